import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, readlinkSync, statSync, writeFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import type { BackendEnvironment, BackgroundHandle, ExecOptions } from '../../services/executor/backend.js';
import { InvalidArgumentError, NotFoundError } from '../../services/common/errors.js';
import { buildChildEnv, LocalBackend, stateDirName } from '../../services/executor/backends/local/local-backend.js';
import { ShellStateRunner } from '../../services/executor/shell-state/shell-state-runner.js';

/** True when `pid` runs. Orphans can linger as zombies where PID 1 does not reap them; a zombie runs nothing. */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

function pidsIn(output: string): number[] {
  return [...output.matchAll(/^pid:(\d+)$/gm)].map((m) => Number(m[1]));
}

async function run(env: BackendEnvironment, options: Partial<ExecOptions> & { script: string }) {
  const chunks: Buffer[] = [];
  const result = await env.exec({ timeoutMs: 10_000, ...options, onOutput: (c) => chunks.push(c) });
  return { ...result, output: Buffer.concat(chunks).toString('utf8') };
}

function collect(): { chunks: Buffer[]; text: () => string; exit: Promise<number>; onExit: (code: number) => void } {
  const chunks: Buffer[] = [];
  let onExit: (code: number) => void = () => {};
  const exit = new Promise<number>((resolve) => (onExit = resolve));
  return { chunks, text: () => Buffer.concat(chunks).toString('utf8'), exit, onExit };
}

async function until(check: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('LocalBackend', () => {
  let root: string;
  let workDir: string;
  let backend: LocalBackend;
  let env: BackendEnvironment;
  const leftovers: number[] = [];
  let taskNo = 0;

  before(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'berth-local-test-'));
    workDir = await mkdtemp(path.join(os.tmpdir(), 'berth-local-work-'));
    backend = new LocalBackend({
      stateRoot: path.join(root, 'tasks'),
      initialCwd: workDir,
      baseEnv: {
        ...process.env,
        OPENAI_API_KEY: 'sk-should-not-leak',
        GITHUB_TOKEN: 'ghp-should-not-leak',
        database_password: 'hunter2',
        SENTRY_DSN: 'https://dsn.example',
        SEARXNG_URL: 'http://search.internal.should-not-leak:8080',
        BERTH_PASSTHRU_KEY: 'allowed',
        BERTH_PLAIN: 'plain-value',
      },
      envPassthrough: ['BERTH_PASSTHRU_KEY'],
      env: { BERTH_EXTRA: 'extra' },
    });
  });

  afterEach(async () => {
    await env?.dispose();
    for (const pid of leftovers.splice(0)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
  });

  after(async () => {
    await backend.close();
    await rm(root, { recursive: true, force: true });
    await rm(workDir, { recursive: true, force: true });
  });

  /** Aborts a command with a background child at its first output: 130, and the child is gone. */
  async function abortsLongCommand(e: BackendEnvironment): Promise<void> {
    const controller = new AbortController();
    const chunks: Buffer[] = [];
    const r = await e.exec({
      script: 'sleep 1000 & echo pid:$!; sleep 1000',
      timeoutMs: 60_000,
      signal: controller.signal,
      onOutput: (c) => {
        chunks.push(c);
        controller.abort();
      },
    });
    const pids = pidsIn(Buffer.concat(chunks).toString());
    leftovers.push(...pids);
    assert.deepEqual([r.exitCode, r.timedOut, r.interrupted], [130, false, true]);
    assert.equal(pids.length, 1);
    assert.equal(isAlive(pids[0] ?? -1), false);
  }

  async function fresh(): Promise<BackendEnvironment> {
    env = await backend.createEnvironment({ tenant: 'tenant', taskId: `task-${++taskNo}` });
    return env;
  }

  it('reports its capabilities', () => {
    assert.deepEqual(backend.capabilities, { name: 'local', pty: true, hostFilesystem: true, sharesRpcDir: true });
  });

  it('creates a private state dir per task and removes it on dispose', async () => {
    const e = await fresh();
    assert.equal(path.basename(e.stateDir), stateDirName({ tenant: 'tenant', taskId: `task-${taskNo}` }));
    assert.equal(path.dirname(e.stateDir), path.join(root, 'tasks'));
    assert.equal(statSync(e.stateDir).mode & 0o777, 0o700);
    assert.equal(statSync(path.join(root, 'tasks')).mode & 0o777, 0o700);
    assert.equal(e.initialCwd, workDir);
    await e.dispose();
    assert.equal(existsSync(e.stateDir), false);
    await e.dispose(); // idempotent
    await assert.rejects(e.exec({ script: 'true', timeoutMs: 1000 }), /released/);
  });

  it('refuses a second live environment for the same task', async () => {
    const e = await fresh();
    await assert.rejects(backend.createEnvironment({ tenant: 'tenant', taskId: `task-${taskNo}` }), /already exists/);
    await e.dispose();
    env = await backend.createEnvironment({ tenant: 'tenant', taskId: `task-${taskNo}` });
  });

  it('runs bash -c in the starting directory and returns the exit code', async () => {
    const e = await fresh();
    const r = await run(e, { script: 'pwd; echo "$0"; exit 7' });
    assert.equal(r.output, `${workDir}\nbash\n`);
    assert.deepEqual([r.exitCode, r.timedOut, r.interrupted], [7, false, false]);
  });

  it('merges stdout and stderr in arrival order', async () => {
    const e = await fresh();
    const r = await run(e, { script: 'echo one; sleep 0.1; echo two >&2; sleep 0.1; echo three' });
    assert.equal(r.output, 'one\ntwo\nthree\n');
  });

  it('writes stdin and then closes it', async () => {
    const e = await fresh();
    assert.equal((await run(e, { script: 'cat', stdin: 'hello\nworld' })).output, 'hello\nworld');
    assert.equal((await run(e, { script: 'wc -c', stdin: new Uint8Array([1, 2, 3, 0, 255]) })).output.trim(), '5');
    // No stdin: EOF at once instead of a hang.
    const r = await run(e, { script: 'cat; echo done', timeoutMs: 3000 });
    assert.deepEqual([r.output, r.exitCode], ['done\n', 0]);
  });

  it('reports death by signal as 128 + n', async () => {
    const e = await fresh();
    assert.equal((await run(e, { script: 'kill -9 $$' })).exitCode, 137);
  });

  it('on timeout kills the whole group, keeps partial output and exits 124', async () => {
    const e = await fresh();
    const r = await run(e, {
      script:
        'sleep 1000 & echo pid:$!; ' +
        // A grandchild that ignores SIGTERM must still die (SIGKILL after the grace period).
        "bash -c 'trap \"\" TERM; echo pid:$$; while :; do sleep 0.1; done' & " +
        'sleep 0.3; echo partial output; sleep 1000',
      // Room for the starts and the 0.3 s on a loaded machine: the timeout must come after "partial output".
      timeoutMs: 3000,
    });
    const pids = pidsIn(r.output);
    leftovers.push(...pids);
    assert.equal(pids.length, 2, r.output);
    assert.deepEqual([r.exitCode, r.timedOut, r.interrupted], [124, true, false]);
    assert.ok(r.output.includes('partial output\n'), r.output);
    for (const pid of pids) assert.equal(isAlive(pid), false, `pid ${pid} survived the timeout`);
  });

  it('on abort kills the group and exits 130', async () => {
    await abortsLongCommand(await fresh());
  });

  it('does not start at all when already aborted', async () => {
    const e = await fresh();
    const marker = path.join(workDir, 'should-not-exist');
    const r = await e.exec({ script: `touch ${marker}`, timeoutMs: 1000, signal: AbortSignal.abort() });
    assert.deepEqual([r.exitCode, r.interrupted], [130, true]);
    assert.equal(existsSync(marker), false);
  });

  // Waiting for the straggler instead of the drain limit would hang until the test's own timeout.
  it('does not hang when a process outside the group holds the output pipe', { timeout: 60_000 }, async () => {
    const e = await fresh();
    const r = await run(e, { script: 'echo before; setsid sleep 1000 & echo "straggler $!"; echo after', timeoutMs: 2000 });
    const straggler = Number(/straggler (\d+)/.exec(r.output)?.[1]);
    if (straggler > 0) leftovers.push(straggler);
    assert.equal(r.output, `before\nstraggler ${straggler}\nafter\n`);
    assert.equal(r.timedOut, true);
  });

  it('keeps every byte of a large output', async () => {
    const e = await fresh();
    let bytes = 0;
    const r = await e.exec({
      script: 'head -c 5000000 /dev/zero; echo; echo tail-marker >&2',
      timeoutMs: 30_000,
      onOutput: (c) => (bytes += c.length),
    });
    assert.equal(r.exitCode, 0);
    assert.equal(bytes, 5_000_000 + 1 + 'tail-marker\n'.length);
  });

  it('strips provider secrets from the child environment, except passthrough names', async () => {
    const e = await fresh();
    const r = await run(e, { script: 'env', env: { BERTH_CALL: 'per-call' } });
    const names = new Set(r.output.split('\n').map((l) => l.split('=')[0]));
    for (const secret of ['OPENAI_API_KEY', 'GITHUB_TOKEN', 'database_password', 'SENTRY_DSN', 'SEARXNG_URL']) {
      assert.equal(names.has(secret), false, `${secret} leaked`);
    }
    assert.ok(!r.output.includes('should-not-leak') && !r.output.includes('hunter2'));
    assert.ok(r.output.includes('BERTH_PASSTHRU_KEY=allowed\n'));
    assert.ok(r.output.includes('BERTH_PLAIN=plain-value\n'));
    assert.ok(r.output.includes('BERTH_EXTRA=extra\n'));
    assert.ok(r.output.includes('BERTH_CALL=per-call\n'));
  });

  it('buildChildEnv applies the policy as a pure function', () => {
    const env = buildChildEnv(
      { PATH: '/bin', AWS_SECRET_ACCESS_KEY: 's', Bearer_x: 'b', MY_APIKEY: 'k', SLACK_WEBHOOK_URL: 'w', KEEP_KEY: 'kk', GONE: undefined },
      ['KEEP_KEY'],
      { ADDED: '1' },
    );
    assert.deepEqual(env, { PATH: '/bin', KEEP_KEY: 'kk', ADDED: '1' });
  });

  describe('pre-started shells', () => {
    /** The pre-started shell waiting for `e`'s next command: a child of this process whose program reads fd 3. */
    async function spareOf(e: BackendEnvironment): Promise<number> {
      let found: number | undefined;
      await until(() => {
        found = readdirSync('/proc')
          .filter((name) => /^\d+$/.test(name))
          .map(Number)
          .find((pid) => {
            try {
              const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
              const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
              const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
              const cwd = readlinkSync(`/proc/${pid}/cwd`);
              return ppid === process.pid && cmdline.includes('__berth_ps') && cwd === e.initialCwd && isAlive(pid);
            } catch {
              return false;
            }
          });
        return found !== undefined;
      });
      return found!;
    }

    it('runs the next command in a shell started ahead, as bash -c would', async () => {
      const e = await fresh();
      await run(e, { script: 'true' });
      const spare = await spareOf(e);
      const r = await run(e, { script: 'echo "$$ $0 $#"; pwd; cat; [ -e /proc/$$/fd/3 ] || echo fd 3 closed; exit 3', stdin: 'in\n' });
      assert.equal(r.output, `${spare} bash 0\n${workDir}\nin\nfd 3 closed\n`);
      assert.equal(r.exitCode, 3);
      // The next one is started for the command after.
      assert.notEqual(await spareOf(e), spare);
    });

    it('ends a waiting shell on dispose, having run nothing', async () => {
      const e = await fresh();
      const marker = path.join(workDir, 'spare-ran');
      await run(e, { script: `rm -f ${marker}` });
      const spare = await spareOf(e);
      await e.dispose();
      assert.equal(isAlive(spare), false);
      assert.equal(existsSync(marker), false);
    });

    it('kills a long command it runs, with its group, on timeout and on abort', async () => {
      const e = await fresh();
      await run(e, { script: 'true' });
      await spareOf(e);
      const timedOut = await run(e, { script: 'sleep 1000 & echo pid:$!; sleep 1000', timeoutMs: 1500 });
      leftovers.push(...pidsIn(timedOut.output));
      assert.deepEqual([timedOut.exitCode, timedOut.timedOut], [124, true]);
      for (const pid of pidsIn(timedOut.output)) assert.equal(isAlive(pid), false);
      await spareOf(e);
      await abortsLongCommand(e);
    });

    it('starts bash as before for what does not fit: extra env, a PTY, a large script, a new directory, a killed shell', async () => {
      const e = await fresh();
      await run(e, { script: 'true' });
      let spare = await spareOf(e);
      const withEnv = await run(e, { script: 'echo "$$ $BERTH_CALL_VAR"', env: { BERTH_CALL_VAR: 'call' } });
      assert.match(withEnv.output, /^\d+ call\n$/);
      assert.notEqual(withEnv.output, `${spare} call\n`);
      const pty = await run(e, { script: '[ -t 1 ] && echo is-a-tty', pty: true });
      assert.equal(pty.output, 'is-a-tty\r\n');
      spare = await spareOf(e);
      const big = `: ${'x'.repeat(70 * 1024)}\necho "$$ big"`;
      assert.match((await run(e, { script: big })).output, /^\d+ big\n$/);
      // The spare waited through the commands that did not fit; it still takes the next one.
      assert.equal((await run(e, { script: 'echo $$' })).output, `${spare}\n`);
      // The starting directory removed and made again: the spare sits in the old one.
      spare = await spareOf(e);
      await rm(workDir, { recursive: true });
      await mkdir(workDir);
      const again = await run(e, { script: 'echo $$; pwd' });
      assert.match(again.output, new RegExp(`^\\d+\n${workDir}\n$`));
      assert.ok(!again.output.startsWith(`${spare}\n`));
      assert.equal(isAlive(spare), false);
      // A shell killed while it waited: the command still runs, in a bash of its own.
      spare = await spareOf(e);
      process.kill(spare, 'SIGKILL');
      await until(() => !isAlive(spare));
      const afterKill = await run(e, { script: 'echo survived' });
      assert.deepEqual([afterKill.output, afterKill.exitCode], ['survived\n', 0]);
    });

    it('starts no shell ahead when BASH_ENV would run before its script', async () => {
      const log = path.join(root, 'bash-env.log');
      const startup = path.join(root, 'bash-env.sh');
      writeFileSync(startup, `echo ran >> ${log}\n`);
      const withStartup = new LocalBackend({ stateRoot: path.join(root, 'bash-env-tasks'), initialCwd: workDir, env: { BASH_ENV: startup } });
      try {
        const e = await withStartup.createEnvironment({ tenant: 'tenant', taskId: 'bash-env' });
        // The login snapshot taken for the new environment ran it too.
        const before = existsSync(log) ? readFileSync(log, 'utf8') : '';
        for (let i = 0; i < 3; i++) assert.equal((await run(e, { script: 'true' })).exitCode, 0);
        await new Promise((r) => setTimeout(r, 300));
        assert.equal(readFileSync(log, 'utf8'), `${before}${'ran\n'.repeat(3)}`);
      } finally {
        await withStartup.close();
      }
    });

    it('keeps exported variables, functions and the cwd from one command to the next', async () => {
      const e = await fresh();
      const runner = new ShellStateRunner(e);
      const sub = path.join(workDir, 'sub');
      await mkdir(sub, { recursive: true });
      const say = async (command: string) => {
        const chunks: Buffer[] = [];
        const result = await runner.run({ command, timeoutMs: 10_000, onOutput: (c) => chunks.push(c) });
        return { ...result, output: Buffer.concat(chunks).toString('utf8') };
      };
      await say('export BERTH_KEPT=kept; greet() { echo "hi $1"; }; cd sub');
      const spare = await spareOf(e);
      const r = await say('echo "$$ $BERTH_KEPT"; greet you; pwd');
      assert.equal(r.output, `${spare} kept\nhi you\n${sub}\n`);
      assert.equal(r.cwd, sub);
    });
  });

  describe('PTY', () => {
    it('runs under a terminal and keeps the exit code', async () => {
      const e = await fresh();
      const r = await run(e, { script: 'tty; [ -t 1 ] && echo is-a-tty; exit 4', pty: true });
      assert.match(r.output, /^\/dev\/pts\/\d+\r\nis-a-tty\r\n$/);
      assert.equal(r.exitCode, 4);
    });

    it('never loses the end of the output', async () => {
      const e = await fresh();
      for (let i = 0; i < 8; i++) {
        const r = await run(e, { script: 'head -c 300000 /dev/zero | tr "\\0" a; echo; echo END', pty: true });
        assert.ok(r.output.endsWith('\r\nEND\r\n'), `run ${i}: ${JSON.stringify(r.output.slice(-40))}`);
        assert.equal(r.output.length, 300_000 + 2 + 5);
      }
    });

    it('types stdin into the terminal and sends EOF', async () => {
      const e = await fresh();
      const r = await run(e, { script: 'stty -echo; read -r x; echo "got:$x"; cat; echo eof', stdin: 'abc\n', pty: true });
      assert.ok(r.output.includes('got:abc\r\n'), JSON.stringify(r.output));
      assert.ok(r.output.endsWith('eof\r\n'));
    });

    it('kills the group on timeout', async () => {
      const e = await fresh();
      const r = await run(e, { script: 'sleep 1000 & echo pid:$!; sleep 1000', pty: true, timeoutMs: 2000 });
      const pids = pidsIn(r.output.replaceAll('\r', ''));
      leftovers.push(...pids);
      assert.equal(r.exitCode, 124);
      assert.equal(isAlive(pids[0] ?? -1), false);
    });
  });

  describe('background processes', () => {
    const handles: BackgroundHandle[] = [];
    afterEach(async () => {
      await Promise.all(handles.splice(0).map((h) => h.kill()));
    });

    it('keeps stdin open for writes until closed', async () => {
      const e = await fresh();
      const out = collect();
      const h = await e.startBackground({ script: 'cat; echo closed', onOutput: (c) => out.chunks.push(c), onExit: out.onExit });
      handles.push(h);
      assert.ok(h.pid > 0);
      await h.write('first ');
      await h.write(new TextEncoder().encode('second\n'));
      await until(() => out.text() === 'first second\n');
      await h.closeStdin();
      assert.equal(await out.exit, 0);
      assert.equal(out.text(), 'first second\nclosed\n');
      await assert.rejects(h.write('late'), /exited|closed/);
    });

    it('reports a natural exit code', async () => {
      const e = await fresh();
      const out = collect();
      handles.push(await e.startBackground({ script: 'echo hi; exit 7', onOutput: (c) => out.chunks.push(c), onExit: out.onExit }));
      assert.equal(await out.exit, 7);
      assert.equal(out.text(), 'hi\n');
    });

    it('kill terminates the group and reports -15', async () => {
      const e = await fresh();
      const out = collect();
      const h = await e.startBackground({
        script: 'sleep 1000 & echo pid:$!; sleep 1000',
        onOutput: (c) => out.chunks.push(c),
        onExit: out.onExit,
      });
      await until(() => pidsIn(out.text()).length === 1);
      const grandchild = pidsIn(out.text())[0] ?? -1;
      leftovers.push(grandchild);
      await h.kill();
      assert.equal(await out.exit, -15);
      assert.equal(isAlive(grandchild), false);
      assert.equal(isAlive(h.pid), false);
    });

    it('kill escalates to SIGKILL when SIGTERM is ignored', async () => {
      const e = await fresh();
      const out = collect();
      const h = await e.startBackground({
        script: "trap '' TERM; echo ready; while :; do sleep 0.1; done",
        onOutput: (c) => out.chunks.push(c),
        onExit: out.onExit,
      });
      await until(() => out.text().includes('ready'));
      await h.kill();
      assert.equal(await out.exit, -9);
    });

    it('runs under a PTY with stdin writes', async () => {
      const e = await fresh();
      const out = collect();
      const h = await e.startBackground({
        script: 'stty -echo; while read -r l; do echo "got:$l"; done; echo bye',
        pty: true,
        onOutput: (c) => out.chunks.push(c),
        onExit: out.onExit,
      });
      handles.push(h);
      await new Promise((r) => setTimeout(r, 200));
      await h.write('one\n');
      await until(() => out.text().includes('got:one'));
      await h.closeStdin();
      assert.equal(await out.exit, 0);
      assert.ok(out.text().endsWith('bye\r\n'), JSON.stringify(out.text()));
    });

    it('dispose kills what is still running', async () => {
      const e = await fresh();
      const out = collect();
      const h = await e.startBackground({ script: 'sleep 1000', onOutput: () => {}, onExit: out.onExit });
      await e.dispose();
      assert.equal(await out.exit, -15);
      assert.equal(isAlive(h.pid), false);
    });
  });

  describe('files', () => {
    it('writes (creating parents), reads and stats absolute paths', async () => {
      const e = await fresh();
      const file = path.join(workDir, 'files', 'deep', 'a.txt');
      await e.writeFile(file, Buffer.from('content'));
      assert.equal((await e.readFile(file)).toString(), 'content');
      assert.deepEqual(await e.stat(file), { exists: true, isDirectory: false, sizeBytes: 7 });
      assert.deepEqual(await e.stat(path.dirname(file)), { exists: true, isDirectory: true, sizeBytes: statSync(path.dirname(file)).size });
      assert.deepEqual(await e.stat(path.join(workDir, 'missing')), { exists: false, isDirectory: false, sizeBytes: 0 });
    });

    it('rejects missing files with NotFoundError and relative paths with InvalidArgumentError', async () => {
      const e = await fresh();
      await assert.rejects(e.readFile(path.join(workDir, 'nope.txt')), NotFoundError);
      await assert.rejects(e.readFile('relative.txt'), InvalidArgumentError);
      await assert.rejects(e.readFile(workDir), InvalidArgumentError);
    });
  });
});
