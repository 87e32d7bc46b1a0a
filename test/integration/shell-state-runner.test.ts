import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import { shellQuote } from '../../services/common/shell/quote.js';
import type { BackendEnvironment } from '../../services/executor/backend.js';
import { LocalBackend } from '../../services/executor/backends/local/local-backend.js';
import { truncateOutput } from '../../services/executor/output.js';
import { CwdMarkerFilter, cwdMarker, parseMarkerBody } from '../../services/executor/shell-state/cwd-marker.js';
import { buildRunScript } from '../../services/executor/shell-state/run-script.js';
import { SHELL_TIMING_FILE, ShellStateRunner, type ShellRunRequest } from '../../services/executor/shell-state/shell-state-runner.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';

describe('CwdMarkerFilter', () => {
  const marker = cwdMarker('0123456789abcdef');
  const markerLine = (cwd: string, nl = '\n') => `${nl}${marker.start}+${cwd}${nl}${marker.end}${nl}`;

  function feed(stream: Buffer, chunkSize: number): { out: string; cwd: string | undefined } {
    const filter = new CwdMarkerFilter(marker);
    const parts: Buffer[] = [];
    for (let i = 0; i < stream.length; i += chunkSize) parts.push(filter.push(stream.subarray(i, i + chunkSize)));
    parts.push(filter.end());
    return { out: Buffer.concat(parts).toString('utf8'), cwd: filter.cwd };
  }

  it('removes the marker line and records the cwd, whatever the chunking (down to 1 byte)', () => {
    const streams = [
      ['hello\nworld\n', '/tmp/a b'],
      ['no trailing newline', '/x'],
      ['', '/'],
      ['ünïcödé ✓\n', '/tmp/dïr'],
      ['looks like \n__berth_cwd_begin_ but is not\n', '/y'],
    ] as const;
    for (const [text, cwd] of streams) {
      const stream = Buffer.from(text + markerLine(cwd));
      for (const size of [1, 2, 3, 7, 64, stream.length]) {
        const { out, cwd: seen } = feed(stream, size);
        assert.equal(out, text, `chunk size ${size}`);
        assert.equal(seen, cwd, `chunk size ${size}`);
      }
    }
  });

  it('handles PTY line endings', () => {
    const { out, cwd } = feed(Buffer.from(`line\r\n${markerLine('/pty', '\r\n')}`), 1);
    assert.equal(out, 'line\r\n');
    assert.equal(cwd, '/pty');
  });

  it('holds back only what could start a marker while streaming', () => {
    const filter = new CwdMarkerFilter(marker);
    assert.equal(filter.push(Buffer.from('abc')).toString(), 'abc');
    assert.equal(filter.push(Buffer.from('def\n__berth')).toString(), 'def');
    assert.equal(filter.push(Buffer.from('_not_it\n')).toString(), '\n__berth_not_it');
    assert.equal(filter.end().toString(), '\n');
  });

  it('does not take output written into the middle of a marker as the cwd', () => {
    // A process that outlived a timeout's kill (`yes flood`) can write between the marker's parts.
    const torn = feed(Buffer.from(`x${markerLine('/good')}y\n${marker.start}+flood\nflood\n/workspace\n${marker.end}\n`), 7);
    assert.deepEqual(torn, { out: 'xy', cwd: '/good' });
    const relative = feed(Buffer.from(`${markerLine('not/absolute')}`), 3);
    assert.equal(relative.cwd, undefined);
  });

  it('drops a marker cut off by the end of the stream, and keeps the last cwd of several', () => {
    const { out } = feed(Buffer.from(`out\n\n${marker.start}/half`), 1);
    assert.equal(out, 'out\n');
    const twice = feed(Buffer.from(`a${markerLine('/one')}b${markerLine('/two')}`), 5);
    assert.deepEqual(twice, { out: 'ab', cwd: '/two' });
  });

  it('reads the resolved start directory from a second line of the body', () => {
    const both = (end: string, start: string, nl = '\n') =>
      `${nl}${marker.start}+${end}${nl}${start}${nl}${marker.end}${nl}`;
    for (const nl of ['\n', '\r\n']) {
      const filter = new CwdMarkerFilter(marker);
      const out = Buffer.concat([filter.push(Buffer.from(`out${both('/end', '/start', nl)}`)), filter.end()]);
      assert.equal(out.toString(), 'out');
      assert.deepEqual([filter.cwd, filter.startCwd], ['/end', '/start']);
    }
    // An unresolved start (empty line) is no start; a body of three lines is nobody's cwd.
    assert.deepEqual(parseMarkerBody(Buffer.from('+/end\n\n')), { saved: true, cwd: '/end', startCwd: undefined });
    assert.deepEqual(parseMarkerBody(Buffer.from('+/a\n/b\n/c\n')), { saved: true, cwd: undefined, startCwd: undefined });
    assert.deepEqual(parseMarkerBody(Buffer.from('-flood\n/b\n')), { saved: false, cwd: undefined, startCwd: undefined });
    assert.deepEqual(parseMarkerBody(Buffer.from('+\n/b\n')), { saved: true, cwd: '', startCwd: '/b' });
  });

  it('lets a marker with a wrong nonce through', () => {
    const other = cwdMarker('ffffffffffffffff');
    const text = `\n${other.start}/z\n${other.end}\n`;
    assert.equal(feed(Buffer.from(text), 1).out, text);
  });
});

describe('buildRunScript', () => {
  const base = {
    snapshotPath: "/state/it's/snap.sh",
    saveTo: '/state/snap.2.sh',
    marker: cwdMarker('n'),
    mode: { kind: 'task', cwd: '/w', resetCwds: ['/', '/root'] },
    command: { text: "echo 'hi' \"$X\" `date`" },
  } as const;

  it('quotes the command as one word and never uses hijackable names', () => {
    const script = buildRunScript({ ...base, remove: ['/state/old 1.sh'] });
    assert.ok(script.includes(`\\builtin eval ${shellQuote("echo 'hi' \"$X\" `date`")}`));
    assert.ok(script.includes(shellQuote("/state/it's/snap.sh")));
    assert.ok(script.includes(`\\command rm -f -- ${shellQuote('/state/old 1.sh')}`));
    assert.ok(!/(^|[;{|&]\s*)(cd|mv|rm|printf|pwd|eval|trap) /m.test(script), script);
  });

  it('runs no program besides bash and the command when there is nothing to clean up', () => {
    // Every external program is a fork + exec: as costly as the whole call.
    for (const mode of [base.mode, { kind: 'workdir', workdir: '/w' } as const]) {
      const script = buildRunScript({ ...base, mode });
      assert.ok(!script.includes('\\command'), script);
      assert.ok(!script.includes('$('), script);
    }
  });
});

describe('ShellStateRunner', () => {
  let root: string;
  let home: string;
  let workDir: string;
  let backend: LocalBackend;
  let env: BackendEnvironment;
  let runner: ShellStateRunner;
  let taskNo = 0;

  before(async () => {
    root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'berth-runner-test-')));
    home = path.join(root, 'home');
    workDir = path.join(root, 'work');
    await mkdir(home);
    await mkdir(workDir);
    // A login profile that exports a provider key: it must not reach commands.
    await writeFile(
      path.join(home, '.profile'),
      'export PROFILE_VAR=from-profile\nexport OPENAI_API_KEY=sk-from-profile\nprofile_fn() { echo profile-fn; }\n',
    );
    backend = new LocalBackend({
      stateRoot: path.join(root, 'state'),
      initialCwd: workDir,
      homeDir: home,
      baseEnv: { PATH: process.env.PATH, HOME: home, LANG: 'C.UTF-8', BERTH_PASSTHRU_KEY: 'kept' },
      envPassthrough: ['BERTH_PASSTHRU_KEY'],
    });
  });

  beforeEach(async () => {
    await env?.dispose();
    env = await backend.createEnvironment({ tenant: 't', taskId: `runner-${++taskNo}` });
    runner = new ShellStateRunner(env);
  });

  after(async () => {
    await backend.close();
    await rm(root, { recursive: true, force: true });
  });

  async function sh(command: string, extra: Partial<ShellRunRequest> = {}) {
    const chunks: Buffer[] = [];
    const result = await runner.run({ command, timeoutMs: 10_000, ...extra, onOutput: (c) => chunks.push(c) });
    return { ...result, output: Buffer.concat(chunks).toString('utf8') };
  }

  it('persists cwd, exported variables, functions and aliases across calls', async () => {
    await mkdir(path.join(workDir, 'sub'), { recursive: true });
    const first = await sh('cd sub && export GREETING="hello world" && greet() { echo "fn:$1"; } && alias hi="echo alias-hi"');
    assert.deepEqual([first.exitCode, first.output, first.cwd], [0, '', path.join(workDir, 'sub')]);
    const second = await sh('pwd; echo "$GREETING"; greet x; hi');
    assert.equal(second.output, `${path.join(workDir, 'sub')}\nhello world\nfn:x\nalias-hi\n`);
    assert.equal(runner.cwd, path.join(workDir, 'sub'));
  });

  it('takes the login profile, minus provider secrets it adds', async () => {
    const r = await sh('echo "$PROFILE_VAR ${OPENAI_API_KEY-unset} $BERTH_PASSTHRU_KEY"; profile_fn');
    assert.equal(r.output, 'from-profile unset kept\nprofile-fn\n');
  });

  it('saves state and keeps the exit code when the command calls exit', async () => {
    const r = await sh('export AFTER_EXIT=yes; cd /; exit 3');
    assert.deepEqual([r.exitCode, r.cwd], [3, '/']);
    assert.equal((await sh('echo "$AFTER_EXIT"; pwd')).output, 'yes\n/\n');
    const errexit = await sh('set -e; export ERREXIT=1; false; echo not-reached');
    assert.deepEqual([errexit.exitCode, errexit.output], [1, '']);
    assert.equal((await sh('echo "$ERREXIT"')).output, '1\n');
  });

  it('with the timing log on, output and state are the same and each command logs four increasing stamps', async () => {
    runner = new ShellStateRunner(env, { timing: true });
    await mkdir(path.join(workDir, 'timed'), { recursive: true });
    const first = await sh('cd timed && export TIMED=1 && echo out; echo err >&2');
    assert.deepEqual([first.exitCode, first.output, first.cwd], [0, 'out\nerr\n', path.join(workDir, 'timed')]);
    const exited = await sh('echo "$TIMED"; exit 4');
    assert.deepEqual([exited.exitCode, exited.output], [4, '1\n']);
    assert.equal((await sh('pwd')).output, `${path.join(workDir, 'timed')}\n`);
    const log = (await readFile(path.join(env.stateDir, SHELL_TIMING_FILE), 'utf8')).trimEnd().split('\n');
    assert.equal(log.length, 3);
    for (const line of log) {
      const stamps = line.split(' ').map(Number);
      assert.equal(stamps.length, 4, line);
      assert.ok(stamps.every((t, i) => t > 0 && (i === 0 || t >= stamps[i - 1]!)), line);
    }
  });

  it('logs no timing unless asked', async () => {
    await sh('true');
    assert.ok(!existsSync(path.join(env.stateDir, SHELL_TIMING_FILE)));
    assert.ok(!buildRunScript({ snapshotPath: '/s', saveTo: '/t', marker: cwdMarker('n'), mode: { kind: 'workdir', workdir: '/' }, command: { text: 'true' } }).includes('EPOCHREALTIME'));
  });

  it('keeps a trap the command set itself, and still saves', async () => {
    const r = await sh("trap 'echo bye' EXIT; export TRAPPED=1; echo hi");
    assert.equal(r.output, 'hi\nbye\n');
    assert.equal((await sh('echo "$TRAPPED"')).output, '1\n');
  });

  it('never shows the marker, also with xtrace on', async () => {
    const outputs = [
      await sh('echo a'),
      await sh('printf "no newline"'),
      await sh('set -x; echo traced'),
      await sh('cd /tmp; exit 5'),
      await sh('echo x', { pty: true }),
    ];
    for (const r of outputs) assert.ok(!r.output.includes('__berth_cwd'), JSON.stringify(r.output));
    assert.equal(outputs[1]?.output, 'no newline');
    assert.equal(runner.cwd, '/tmp');
  });

  it('passes commands with any quoting through unchanged', async () => {
    const text = Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i)).join('') + "\n'\"\\$`!{}\tend ✓";
    const r = await sh(`cat <<'BERTH_EOF'\n${text}\nBERTH_EOF`);
    assert.equal(r.output, `${text}\n`);
    assert.equal((await sh(`printf '%s' ${shellQuote(text)}`)).output, text);
  });

  it('runs commands longer than one argv string allows, via a staged file', async () => {
    const big = `: '${'x'.repeat(300_000)}'; export BIG_DONE=1; echo big-ok`;
    const r = await sh(big);
    assert.deepEqual([r.exitCode, r.output], [0, 'big-ok\n']);
    assert.equal((await sh('echo "$BIG_DONE"')).output, '1\n');
    assert.deepEqual(readdirSync(env.stateDir).filter((f) => f.startsWith('command-')), []);
  });

  it('delivers stdin to the command', async () => {
    assert.equal((await sh('read -r a; read -r b; echo "$b $a"', { stdin: 'one\ntwo\n' })).output, 'two one\n');
  });

  it('runs in workdir for one call, keeping the task cwd but saving variables', async () => {
    const r = await sh('pwd; export FROM_WORKDIR=1; cd /', { workdir: '/usr' });
    assert.deepEqual([r.output, r.cwd], ['/usr\n', workDir]);
    // Where it started and ended is reported (for the terminal's `cwd` key); the task cwd is kept.
    assert.deepEqual(r.cwdReport, { start: '/usr', end: '/' });
    const stay = await sh('pwd');
    assert.deepEqual(stay.cwdReport, { start: workDir, end: workDir });
    assert.equal((await sh('pwd; echo "$FROM_WORKDIR"')).output, `${workDir}\n1\n`);
    const missing = await sh('echo never', { workdir: path.join(root, 'missing') });
    assert.equal(missing.exitCode, 126);
    assert.match(missing.output, /workdir .*missing is not a directory/);
  });

  it('shows a workdir named through a symlink as given, and reports its start resolved', async () => {
    const link = path.join(root, 'work-link');
    await symlink(workDir, link);
    try {
      const r = await sh('echo "$PWD"; pwd', { workdir: link });
      assert.equal(r.output, `${link}\n${link}\n`);
      assert.deepEqual(r.cwdReport, { start: workDir, end: workDir });
    } finally {
      await rm(link);
    }
  });

  it('saves nothing in stateless mode', async () => {
    const r = await sh('pwd; cd /; export STATELESS=1', { stateless: true });
    assert.deepEqual([r.output, r.cwd], [`${workDir}\n`, workDir]);
    assert.equal(r.cwdReport, undefined);
    assert.equal((await sh('pwd; echo "${STATELESS-unset}"')).output, `${workDir}\nunset\n`);
  });

  it('exits 126 with a clear message when the cwd is gone, then starts over in the initial directory', async () => {
    const doomed = path.join(workDir, 'doomed');
    await sh(`mkdir -p ${doomed} && cd ${doomed}`);
    assert.equal(runner.cwd, doomed);
    await rm(doomed, { recursive: true });
    const r = await sh('echo never');
    assert.equal(r.exitCode, 126);
    assert.match(r.output, /working directory .*doomed no longer exists/);
    assert.equal(r.cwdResetTo, workDir);
    assert.deepEqual((await sh('pwd')).output, `${workDir}\n`);
  });

  it('falls back to home when the starting directory is gone as well', async () => {
    const start = path.join(root, 'start-gone');
    await mkdir(start);
    const other = new LocalBackend({
      stateRoot: path.join(root, 'state-other'),
      initialCwd: start,
      homeDir: home,
      baseEnv: { PATH: process.env.PATH, HOME: home },
    });
    try {
      const otherRunner = new ShellStateRunner(await other.createEnvironment({ tenant: 't', taskId: 'start-gone' }));
      await otherRunner.bootstrap();
      await rm(start, { recursive: true });
      const chunks: Buffer[] = [];
      const r = await otherRunner.run({ command: 'echo never', timeoutMs: 5000, onOutput: (c) => chunks.push(c) });
      assert.equal(r.exitCode, 126);
      assert.equal(r.cwdResetTo, home);
      assert.match(Buffer.concat(chunks).toString(), new RegExp(`reset to ${home}; run the command again\\.\\n$`));
      const next: Buffer[] = [];
      await otherRunner.run({ command: 'pwd', timeoutMs: 5000, onOutput: (c) => next.push(c) });
      assert.equal(Buffer.concat(next).toString(), `${home}\n`);
    } finally {
      await other.close();
    }
  });

  it('cannot be hijacked by user functions or aliases named like its own commands', async () => {
    await sh("cd() { builtin cd \"$@\" && echo moved; }; alias mv='echo hijacked'; pwd() { echo fake; }; export STILL=1");
    assert.equal((await sh('cd /usr')).output, 'moved\n');
    assert.equal(runner.cwd, '/usr');
    assert.equal((await sh('echo "$STILL"; builtin pwd')).output, '1\n/usr\n');
  });

  it('lets concurrent calls run; the last one to finish decides the cwd', async () => {
    const [a, b] = await Promise.all([sh('sleep 0.4; cd /usr; echo a'), sh('cd /var; echo b')]);
    assert.deepEqual([a.output, b.output], ['a\n', 'b\n']);
    assert.equal(runner.cwd, '/usr');
  });

  it('deletes superseded snapshots in batches, keeping the state dir small', async () => {
    // A small batch, so that a few dozen commands show the mechanism; the default is SNAPSHOT_CLEANUP_BATCH.
    runner = new ShellStateRunner(env, { snapshotCleanupBatch: 8 });
    for (let i = 1; i <= 40; i++) await sh(`export COUNT=${i}`);
    assert.equal((await sh('echo "$COUNT"')).output, '40\n');
    const snapshots = readdirSync(env.stateDir).filter((f) => f.startsWith('shell-snapshot'));
    assert.ok(snapshots.length <= 10, `${snapshots.length} snapshot files left: ${snapshots.join(' ')}`);
    assert.ok(snapshots.includes(path.basename(runner.snapshotPath)));
  });

  it('gives a background command the state current when it starts, while later commands move on', async () => {
    await sh('export PHASE=before');
    const output: Buffer[] = [];
    const exited = new Promise<number>((resolve) => {
      void runner.startBackground({
        command: 'sleep 0.3; echo "bg:$PHASE"',
        onOutput: (c) => output.push(c),
        onExit: resolve,
      });
    });
    for (let i = 0; i < 40; i++) await sh(`export PHASE=after-${i}`);
    assert.equal(await exited, 0);
    assert.equal(Buffer.concat(output).toString(), 'bg:before\n');
  });

  it('reports timeouts (124) and keeps the partial output', async () => {
    const r = await sh('echo partial; sleep 100', { timeoutMs: 400 });
    assert.deepEqual([r.exitCode, r.timedOut], [124, true]);
    // bash may report its killed child ("Terminated") if it notices before its own SIGTERM lands.
    assert.match(r.output, /^partial\n(Terminated\n)?$/);
  });
});

describe('TaskEnvironments exec', () => {
  let root: string;
  let backend: LocalBackend;
  let environments: TaskEnvironments;
  const key = { tenant: 'tenant-a', taskId: 'task-exec' };

  before(async () => {
    root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'berth-envs-test-')));
    await mkdir(path.join(root, 'work'));
    await mkdir(path.join(root, 'home'));
    backend = new LocalBackend({
      stateRoot: path.join(root, 'state'),
      initialCwd: path.join(root, 'work'),
      homeDir: path.join(root, 'home'),
      baseEnv: { ...process.env, OPENAI_API_KEY: 'sk-not-for-children' },
    });
    environments = new TaskEnvironments({ backend, logger: silentLogger() });
  });

  after(async () => {
    await environments.closeAll();
    await backend.close();
    await rm(root, { recursive: true, force: true });
  });

  const exec = (command: string, extra: Partial<Parameters<TaskEnvironments['exec']>[1]> = {}) =>
    environments.exec(key, { command, timeoutMs: 10_000, ...extra });

  it('truncates 1 MB of output with the spec format', async () => {
    const r = await exec('seq 1 200000');
    const expected = Array.from({ length: 200_000 }, (_, i) => `${i + 1}\n`).join('');
    assert.ok(expected.length > 1_000_000);
    assert.equal(r.output, truncateOutput(expected, 50_000));
    assert.ok(r.output.includes(`[OUTPUT TRUNCATED - ${expected.length - 50_000} chars omitted out of ${expected.length} total]`));
  });

  it('honours maxOutputChars and leaves short output alone', async () => {
    const r = await exec('printf "%s" 0123456789abcdefghij', { maxOutputChars: 10 });
    assert.equal(r.output, '0123\n\n... [OUTPUT TRUNCATED - 10 chars omitted out of 20 total] ...\n\nefghij');
    assert.equal((await exec('echo short')).output, 'short\n');
  });

  it('strips ANSI escapes and merges stderr', async () => {
    // A task of its own: earlier tests leave functions and variables in the shared task's snapshot.
    const r = await environments.exec(
      { tenant: 'default', taskId: 'ansi-merge' },
      { command: "printf '\\033[1;31mred\\033[0m\\n'; echo err >&2; ls --color=always -d /", timeoutMs: 10_000 },
    );
    assert.equal(r.output, 'red\nerr\n/\n');
  });

  it('normalises PTY line endings', async () => {
    const r = await exec('echo one; echo two', { pty: true });
    assert.equal(r.output, 'one\ntwo\n');
  });

  it('streams live output as text', async () => {
    const seen: string[] = [];
    const r = await exec('echo first; sleep 0.2; echo second', { onOutput: (t) => seen.push(t) });
    assert.equal(seen.join(''), 'first\nsecond\n');
    assert.ok(seen.length >= 2);
    assert.equal(r.output, 'first\nsecond\n');
  });

  it('keeps provider secrets out of commands', async () => {
    assert.equal((await exec('echo "${OPENAI_API_KEY-unset}"')).output, 'unset\n');
  });

  it('interrupt stops the running command with exit 130', async () => {
    const pending = exec('echo started; sleep 100');
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(environments.interrupt(key), 1);
    const r = await pending;
    assert.deepEqual([r.exitCode, r.interrupted], [130, true]);
    assert.match(r.output, /^started\n(Terminated\n)?$/);
    assert.equal(environments.interrupt(key), 0);
    assert.equal(environments.interrupt({ tenant: 'tenant-a', taskId: 'no-such-task' }), 0);
  });

  it('times out with 124 and the partial output', async () => {
    const r = await exec('echo partial; sleep 100', { timeoutMs: 300 });
    assert.deepEqual([r.exitCode, r.timedOut], [124, true]);
    assert.match(r.output, /^partial\n(Terminated\n)?$/);
  });

  it('resolves file paths against the task cwd and ~', async () => {
    await exec('mkdir -p dir && cd dir');
    const written = await environments.writeFile(key, 'new/file.txt', 'data');
    assert.deepEqual(written, { absPath: path.join(root, 'work', 'dir', 'new', 'file.txt'), bytesWritten: 4, dirsCreated: true });
    const again = await environments.writeFile(key, 'new/other.txt', new Uint8Array([1, 2]));
    assert.equal(again.dirsCreated, false);
    const read = await environments.readFile(key, './new/../new/file.txt');
    assert.deepEqual([read.absPath, read.content.toString()], [written.absPath, 'data']);
    const home = await environments.writeFile(key, '~/h.txt', 'h');
    assert.equal(home.absPath, path.join(root, 'home', 'h.txt'));
    assert.deepEqual(await environments.stat(key, '~'), {
      absPath: path.join(root, 'home'),
      exists: true,
      isDirectory: true,
      sizeBytes: (await environments.stat(key, '~')).sizeBytes,
    });
    assert.equal((await environments.stat(key, 'missing')).exists, false);
    assert.equal(existsSync(path.join(root, 'work', 'dir', 'new', 'file.txt')), true);
  });

  it('release kills the environment; the next call gets a fresh one', async () => {
    await exec('export KEPT=1; cd /');
    assert.equal(await environments.release(key), true);
    assert.equal(await environments.release(key), false);
    const r = await exec('pwd; echo "${KEPT-unset}"');
    assert.equal(r.output, `${path.join(root, 'work')}\nunset\n`);
    assert.deepEqual(r.notices, []);
  });
});
