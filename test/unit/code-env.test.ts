import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { BerthError } from '../../services/common/errors.js';
import { buildCodeEnv, encodeEnvRecords } from '../../services/executor/code-execution/code-env.js';
import { sandboxOwner } from '../../services/executor/code-execution/code-runner.js';
import {
  buildLauncherScript,
  buildProbeScript,
  parseProbeOutput,
} from '../../services/executor/code-execution/code-launch.js';
import {
  decodeStderrHead,
  StdoutCapture,
  stdoutTruncationNotice,
  withThousandsSeparators,
} from '../../services/executor/code-execution/code-output.js';
import {
  invalidRequest,
  parseRpcRequest,
  responseLine,
  tokenMatches,
  UNAUTHORIZED_RESPONSE,
} from '../../services/executor/code-execution/rpc-socket-server.js';

const fixed = { socketPath: '/run/berth/code-1/rpc.sock', token: 'tok', stubDir: '/run/berth/code-1' };

describe('buildCodeEnv', () => {
  it('keeps safe prefixes and the four HERMES_* names, drops secrets and everything else', () => {
    const { env, droppedHermes } = buildCodeEnv({
      ...fixed,
      passthrough: [],
      base: {
        PATH: '/usr/bin',
        HOME: '/home/u',
        USER: 'u',
        LANG: 'C.UTF-8',
        LC_ALL: 'C',
        TERM: 'xterm',
        TMPDIR: '/tmp',
        SHELL: '/bin/bash',
        XDG_CACHE_HOME: '/c',
        VIRTUAL_ENV: '/venv',
        CONDA_PREFIX: '/conda',
        HERMES_HOME: '/h',
        HERMES_PROFILE: 'p',
        HERMES_CONFIG: 'c',
        HERMES_ENV: 'e',
        HERMES_BASE_URL: 'http://x',
        HERMES_KANBAN_DB: '/db',
        GITHUB_TOKEN: 'ghp',
        MY_API_KEY: 'k',
        DB_PASSWORD: 'p',
        SENTRY_DSN: 'dsn',
        SLACK_WEBHOOK_URL: 'w',
        PATH_TOKEN: 'secret-even-with-a-safe-prefix',
        HOME_AUTH: 'x',
        RANDOM_SETTING: 'dropped',
        NODE_OPTIONS: 'dropped',
      },
    });
    assert.deepEqual(Object.keys(env).sort(), [
      'CONDA_PREFIX',
      'HERMES_CONFIG',
      'HERMES_ENV',
      'HERMES_HOME',
      'HERMES_PROFILE',
      'HERMES_RPC_SOCKET',
      'HERMES_RPC_TOKEN',
      'HOME',
      'LANG',
      'LC_ALL',
      'PATH',
      'PYTHONDONTWRITEBYTECODE',
      'PYTHONIOENCODING',
      'PYTHONPATH',
      'PYTHONUTF8',
      'SHELL',
      'TERM',
      'TMPDIR',
      'USER',
      'VIRTUAL_ENV',
      'XDG_CACHE_HOME',
    ]);
    assert.deepEqual(droppedHermes, ['HERMES_BASE_URL', 'HERMES_KANBAN_DB']);
  });

  it('adds the RPC and Python variables, the stub dir first on PYTHONPATH, and TZ when set', () => {
    const { env } = buildCodeEnv({ ...fixed, passthrough: [], base: { PYTHONPATH: '/proj/src', TZ: 'Europe/Paris' } });
    assert.equal(env.HERMES_RPC_SOCKET, '/run/berth/code-1/rpc.sock');
    assert.equal(env.HERMES_RPC_TOKEN, 'tok');
    assert.equal(env.PYTHONDONTWRITEBYTECODE, '1');
    assert.equal(env.PYTHONIOENCODING, 'utf-8');
    assert.equal(env.PYTHONUTF8, '1');
    assert.equal(env.PYTHONPATH, '/run/berth/code-1:/proj/src');
    assert.equal(env.TZ, 'Europe/Paris');
    assert.equal(buildCodeEnv({ ...fixed, passthrough: [], base: {} }).env.PYTHONPATH, '/run/berth/code-1');
  });

  it('sets TZ to the configured time zone over the sandbox\'s own, and ignores a malformed one', () => {
    const base = { TZ: 'Europe/Paris' };
    assert.equal(buildCodeEnv({ ...fixed, passthrough: [], base, timezone: 'Asia/Kolkata' }).env.TZ, 'Asia/Kolkata');
    assert.equal(buildCodeEnv({ ...fixed, passthrough: [], base: {}, timezone: 'Etc/GMT+5' }).env.TZ, 'Etc/GMT+5');
    assert.equal(buildCodeEnv({ ...fixed, passthrough: [], base, timezone: '' }).env.TZ, 'Europe/Paris');
    assert.equal(buildCodeEnv({ ...fixed, passthrough: [], base, timezone: '../../etc/x' }).env.TZ, 'Europe/Paris');
    assert.equal(buildCodeEnv({ ...fixed, passthrough: [], base: {}, timezone: 'UTC\nX=1' }).env.TZ, undefined);
  });

  it('passes through listed names, but never provider credentials (built-in or added)', () => {
    const { env, refusedPassthrough } = buildCodeEnv({
      ...fixed,
      passthrough: ['MY_SERVICE_TOKEN', 'HERMES_KANBAN_DB', 'OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'SMART_KEY'],
      credentialNames: ['SMART_KEY'],
      base: {
        MY_SERVICE_TOKEN: 't',
        HERMES_KANBAN_DB: '/db',
        OPENAI_API_KEY: 'sk-1',
        ANTHROPIC_API_KEY: 'sk-2',
        OPENROUTER_API_KEY: 'sk-3',
        SMART_KEY: 'sk-4',
      },
    });
    assert.equal(env.MY_SERVICE_TOKEN, 't');
    assert.equal(env.HERMES_KANBAN_DB, '/db');
    for (const name of ['OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'OPENROUTER_API_KEY', 'SMART_KEY']) {
      assert.equal(env[name], undefined, name);
    }
    assert.deepEqual(refusedPassthrough, ['OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'SMART_KEY']);
  });

  it('skips names env -i could not carry', () => {
    const { env } = buildCodeEnv({ ...fixed, passthrough: ['-x', 'A=B'], base: { '-x': '1', PATH_OK: 'y', 'A=B': 'z' } });
    assert.equal(env['-x'], undefined);
    assert.equal(env.PATH_OK, 'y');
  });
});

/** Runs a script with real bash; stdout and the exit code. */
const bash = (script: string, options: { input?: string; env?: NodeJS.ProcessEnv; cwd?: string } = {}) =>
  new Promise<{ stdout: string; code: number }>((resolve, reject) => {
    const child = execFile('bash', ['-c', script], { env: options.env, cwd: options.cwd }, (err, stdout) => {
      const code = (err as { code?: unknown } | null)?.code;
      if (err && typeof code !== 'number') reject(err);
      else resolve({ stdout, code: typeof code === 'number' ? code : 0 });
    });
    // A script that exits without reading its input (mktemp, cat FILE) may close stdin before the write
    // lands; the EPIPE that follows is no failure of the script under test, whose exit and output are judged.
    child.stdin?.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code !== 'EPIPE') reject(err);
    });
    child.stdin?.end(options.input ?? '');
  });

describe('probe and launcher scripts (real bash)', () => {
  it('the probe reports interpreter, ids, cwd and the exported environment, values with newlines intact', async () => {
    const { stdout } = await bash(buildProbeScript('N0NCE', 'strict'), {
      env: { PATH: process.env.PATH, MULTI: 'a\nb=c', EMPTY: '' },
      cwd: '/tmp',
    });
    const probe = parseProbeOutput(`noise before ${stdout} noise after`, 'N0NCE');
    assert.ok(probe);
    assert.equal(probe.interpreter, 'python3');
    assert.equal(probe.uid, process.getuid?.());
    assert.equal(probe.cwd, '/tmp');
    assert.equal(probe.env.MULTI, 'a\nb=c');
    assert.equal(probe.env.EMPTY, '');
    assert.equal(probe.env.__berth_py, undefined);
  });

  it('project mode prefers a working $VIRTUAL_ENV python and falls back to python3 when it is broken', async () => {
    const fakeVenv = '/nonexistent-venv-for-berth-test';
    const { stdout } = await bash(buildProbeScript('N', 'project'), { env: { PATH: process.env.PATH, VIRTUAL_ENV: fakeVenv } });
    assert.equal(parseProbeOutput(stdout, 'N')?.interpreter, 'python3');
  });

  it('parseProbeOutput refuses output cut short', () => {
    assert.equal(parseProbeOutput('N\0python3\x000\x000\0/tmp\0A=1\0', 'N'), undefined);
  });

  it('the launcher runs with exactly the given environment, stdout through, stderr head to a file, exit status kept', async () => {
    const dir = (await bash('mktemp -d')).stdout.trim();
    try {
      writeFileSync(`${dir}/s.py`, "import os,sys\nprint(sorted(os.environ))\nprint(repr(os.environ['ONLY_ME']))\nsys.stderr.write('E' * 100)\nsys.exit(3)\n");
      const script = buildLauncherScript({ dir, interpreter: 'python3', scriptPath: `${dir}/s.py`, stderrPath: `${dir}/err`, maxStderrBytes: 10 });
      const r = await bash(script, {
        input: encodeEnvRecords({ PATH: process.env.PATH ?? '', ONLY_ME: 'x\ny' }),
        env: { ...process.env, LEAK: 'no' },
      });
      assert.equal(r.code, 3);
      assert.match(r.stdout, /'ONLY_ME'/);
      assert.match(r.stdout, /^'x\\ny'$/m);
      assert.ok(!r.stdout.includes('LEAK'));
      assert.equal((await bash(`cat ${dir}/err`)).stdout, 'E'.repeat(10));
    } finally {
      await bash(`rm -rf ${dir}`);
    }
  });
});

describe('the launcher\'s stderr head', () => {
  it('counts bytes, not characters, and drains megabytes behind the head without blocking the script', async () => {
    const dir = (await bash('mktemp -d')).stdout.trim();
    try {
      // 2 MB of two-byte characters, then stdout: the script only gets there if stderr never fills up.
      writeFileSync(`${dir}/s.py`, "import sys\nsys.stderr.write('\u00e9' * 1_000_000)\nsys.stderr.flush()\nprint('done')\n");
      const script = buildLauncherScript({ dir, interpreter: 'python3', scriptPath: `${dir}/s.py`, stderrPath: `${dir}/err`, maxStderrBytes: 11 });
      const r = await bash(script, { input: encodeEnvRecords({ PATH: process.env.PATH ?? '', LANG: 'C.UTF-8' }) });
      assert.equal(r.code, 0);
      assert.equal(r.stdout, 'done\n');
      const head = (await bash(`od -An -tx1 ${dir}/err | tr -d ' \\n'`)).stdout;
      assert.equal(head, 'c3a9'.repeat(5) + 'c3', 'exactly 11 bytes: five characters and half of the sixth');
    } finally {
      await bash(`rm -rf ${dir}`);
    }
  });

  it('writes an empty head when the script writes nothing to stderr, or when the cap is 0', async () => {
    const dir = (await bash('mktemp -d')).stdout.trim();
    try {
      writeFileSync(`${dir}/quiet.py`, "import sys\nprint('quiet')\n");
      writeFileSync(`${dir}/loud.py`, "import sys\nsys.stderr.write('E' * 5000)\n");
      const env = encodeEnvRecords({ PATH: process.env.PATH ?? '' });
      const quiet = buildLauncherScript({ dir, interpreter: 'python3', scriptPath: `${dir}/quiet.py`, stderrPath: `${dir}/e1`, maxStderrBytes: 100 });
      assert.equal((await bash(quiet, { input: env })).stdout, 'quiet\n');
      const loud = buildLauncherScript({ dir, interpreter: 'python3', scriptPath: `${dir}/loud.py`, stderrPath: `${dir}/e2`, maxStderrBytes: 0 });
      assert.equal((await bash(loud, { input: env })).code, 0);
      assert.equal((await bash(`wc -c < ${dir}/e1; wc -c < ${dir}/e2`)).stdout.replace(/ /g, ''), '0\n0\n');
    } finally {
      await bash(`rm -rf ${dir}`);
    }
  });
});

describe('stdout and stderr caps', () => {
  it('formats the notice with thousands separators', () => {
    assert.equal(withThousandsSeparators(56789), '56,789');
    assert.equal(withThousandsSeparators(1234567), '1,234,567');
    assert.equal(withThousandsSeparators(999), '999');
    assert.equal(
      stdoutTruncationNotice(1234, 56789),
      '\n\n... [OUTPUT TRUNCATED - 1,234 chars omitted out of 56,789 total] ...\n\n',
    );
  });

  it('keeps stdout whole within the cap, else 40% head and a rolling 60% tail', () => {
    const small = new StdoutCapture(100);
    small.push(Buffer.from('x'.repeat(100)));
    assert.equal(small.text(), 'x'.repeat(100));

    const big = new StdoutCapture(1000);
    big.push(Buffer.from('H'.repeat(400)));
    for (let i = 0; i < 100; i++) big.push(Buffer.from('M'.repeat(1000)));
    big.push(Buffer.from('T'.repeat(600)));
    assert.equal(
      big.text(),
      'H'.repeat(400) + '\n\n... [OUTPUT TRUNCATED - 100,000 chars omitted out of 101,000 total] ...\n\n' + 'T'.repeat(600),
    );
  });

  it('never splits a UTF-8 character at the cut', () => {
    const capture = new StdoutCapture(10);
    capture.push(Buffer.from('ééééééééééééééééé'));
    const text = capture.text();
    assert.ok(!text.includes('\uFFFD'), text);
    assert.equal(decodeStderrHead(Buffer.from('aé'), 2), 'a');
  });
});

describe('RPC request lines', () => {
  it('compares tokens in constant time and fails closed on an empty server token', () => {
    assert.equal(tokenMatches('abc', 'abc'), true);
    assert.equal(tokenMatches('abc', 'abd'), false);
    assert.equal(tokenMatches('abc', 'abcd'), false);
    assert.equal(tokenMatches('', ''), false);
    assert.equal(tokenMatches('abc', undefined), false);
  });

  it('accepts a valid request and reports every invalid one with the spec errors', () => {
    assert.deepEqual(parseRpcRequest('{"tool":"read_file","args":{"path":"x"},"token":"t"}', 't'), {
      request: { tool: 'read_file', args: { path: 'x' } },
    });
    assert.deepEqual(parseRpcRequest('{"tool":"terminal","token":"t"}', 't'), { request: { tool: 'terminal', args: {} } });
    assert.deepEqual(parseRpcRequest('{"tool":"x","args":{},"token":"bad"}', 't'), { response: UNAUTHORIZED_RESPONSE });
    assert.equal(UNAUTHORIZED_RESPONSE, '{"error":"Unauthorized RPC request"}');
    const notJson = parseRpcRequest('{not json', 't');
    assert.ok('response' in notJson && notJson.response.startsWith('{"error":"Invalid RPC request: '));
    assert.deepEqual(parseRpcRequest('[1]', 't'), {
      response: invalidRequest('expected a JSON object with "tool", "args" and "token"'),
    });
    assert.deepEqual(parseRpcRequest('{"tool":"","token":"t"}', 't'), { response: invalidRequest('"tool" must be a non-empty string') });
    assert.deepEqual(parseRpcRequest('{"tool":"x","args":[1],"token":"t"}', 't'), {
      response: invalidRequest('"args" must be a JSON object'),
    });
  });

  it('frames a result with newlines as one JSON string line', () => {
    assert.equal(responseLine('{"a":1}'), '{"a":1}\n');
    assert.equal(responseLine('{"a":1}\n\n... [RESULT TRUNCATED]'), `${JSON.stringify('{"a":1}\n\n... [RESULT TRUNCATED]')}\n`);
  });
});

describe('sandboxOwner', () => {
  it('hands files to a different sandbox user only as root, and refuses clearly otherwise', () => {
    assert.equal(sandboxOwner({ uid: 0, gid: 0 }, 0), undefined);
    assert.equal(sandboxOwner({ uid: 1000, gid: 1000 }, 1000), undefined);
    assert.deepEqual(sandboxOwner({ uid: 1000, gid: 1001 }, 0), { uid: 1000, gid: 1001 });
    assert.equal(sandboxOwner({ uid: undefined, gid: undefined }, 0), undefined);
    assert.throws(
      () => sandboxOwner({ uid: 1000, gid: 1000 }, 1234),
      (err: unknown) => err instanceof BerthError && err.code === 'FAILED_PRECONDITION' && /uid 1000/.test(err.message),
    );
  });
});
