/**
 * The backend conformance suite. Every terminal backend must pass it, the
 * built-in ones and a third party's alike (published as `berth/conformance`):
 * it drives a backend through {@link TaskEnvironments} (the shell-state
 * runner and process registry on top), exactly as the executor does, and
 * checks the behaviour agents rely on (spec §3).
 *
 * Process checks run inside the environment (`/proc` read by a command), not
 * on the test host, so they hold for remote and containerised backends too.
 *
 * Usage, in a test file run by `node --test`:
 *
 *     runBackendConformance('local', async () => new LocalBackend({ ... }));
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes, randomInt } from 'node:crypto';
import { after, afterEach, before, describe, it } from 'node:test';
import { BerthError } from '../common/errors.js';
import { silentLogger } from '../common/logging.js';
import type { Backend, BackendEnvironment, TaskKey } from '../executor/backend.js';
import { taskKeyString } from '../executor/backend.js';
import { TaskEnvironments } from '../executor/task-environment.js';
import { CodeRunner } from '../executor/code-execution/code-runner.js';
import { buildHermesToolsModule } from '../dispatcher/tools/code-execution/hermes-tools-module.js';
import type { TaskClient } from '../common/task-client.js';
import type { ToolContext } from '../dispatcher/registry/tool-types.js';
import { fileToolRegistrations } from '../dispatcher/tools/file-tools.js';

export interface BackendConformanceOptions {
  /**
   * Tasks share one host (local, ssh): they see each other's files and
   * processes, so a second task can confirm that a released task left
   * nothing behind. False for containers. Default true.
   */
  readonly sharedHost?: boolean;
  /**
   * Checks from outside whether a released environment still exists
   * (container present, state directory present). When absent and tasks share
   * a host, a second task checks that the released state directory is gone.
   */
  readonly environmentExists?: (env: BackendEnvironment) => Promise<boolean>;
  /** Multiplies every wait and limit, for slow backends; default 1. */
  readonly timeScale?: number;
  /** Skip the PTY checks even when the backend reports PTY support. */
  readonly skipPty?: boolean;
  /** Tenant for the tasks the suite creates; default `conformance`. */
  readonly tenant?: string;
  /**
   * Drops the stream between the executor and the environment's exec agent
   * (as a broken connection would), for backends that have one. Absent
   * (local: no agent stream), the dropped-stream case is not registered.
   */
  readonly dropAgentStream?: (env: BackendEnvironment) => Promise<void>;
  /**
   * What a background process does when the agent stream drops: `survives`
   * (found again by poll, still killable, after the executor reconnects) or
   * `ends` (the agent stops what it started when its stream ends; poll says
   * it exited and nothing is left running). Default `survives`.
   */
  readonly backgroundAfterDrop?: 'survives' | 'ends';
  /**
   * Every environment runs execute_code scripts itself (it has an rpcDir or
   * an rpcRelay): registers the case that a script sees terminal's files.
   * Default false (a backend whose scripts need a code container).
   */
  readonly executeCode?: boolean;
}

interface ProcessJson {
  readonly status?: string;
  readonly exit_code?: number | null;
  readonly output?: string;
  readonly output_preview?: string;
  readonly completion_reason?: string;
  readonly termination_source?: string;
  readonly pid?: number;
  readonly processes?: readonly { readonly session_id: string }[];
  readonly error?: string;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A number nobody else's `sleep` uses, so process checks find only ours. */
function uniqueSleepSeconds(): number {
  return 900_000 + randomInt(0, 99_999);
}

/**
 * A script that prints `count=N`: how many live processes have an argument
 * exactly equal to `arg` (letters, digits, `_`, `.`, `-`). Zombies have an
 * empty command line, so they do not count. The pattern is bracketed
 * (`[9]12345`) so the grep that searches never matches itself.
 */
export function countProcessesScript(arg: string): string {
  if (!/^[A-Za-z0-9_.-]+$/.test(arg)) throw new Error(`unsupported process argument: ${arg}`);
  const pattern = `[${arg.slice(0, 1)}]${arg.slice(1).replaceAll('.', '\\.')}`;
  return `echo "count=$(grep -lzx -e '${pattern}' /proc/[0-9]*/cmdline 2>/dev/null | wc -l)"`;
}

/**
 * Registers the conformance tests for one backend. `makeBackend` runs once
 * before the tests; the suite closes the backend afterwards.
 */
export function runBackendConformance(
  name: string,
  makeBackend: () => Promise<Backend>,
  options: BackendConformanceOptions = {},
): void {
  const scale = options.timeScale ?? 1;
  const sharedHost = options.sharedHost ?? true;
  const tenant = options.tenant ?? 'conformance';
  const runId = randomBytes(4).toString('hex');
  const testTimeoutMs = 60_000 * scale;

  describe(`backend conformance: ${name}`, () => {
    let inner: Backend;
    let envs: TaskEnvironments;
    /** The backend environment behind each task, for checks from outside after release. */
    const environments = new Map<string, BackendEnvironment>();
    const used: TaskKey[] = [];
    let taskNo = 0;

    const newTask = (): TaskKey => {
      const key = { tenant, taskId: `${name}-${runId}-${++taskNo}` };
      used.push(key);
      return key;
    };

    before(async () => {
      inner = await makeBackend();
      // Wrapped so the suite can see which environment each task got.
      const recording: Backend = {
        get capabilities() {
          return inner.capabilities;
        },
        createEnvironment: async (key) => {
          const env = await inner.createEnvironment(key);
          environments.set(taskKeyString(key), env);
          return env;
        },
        close: () => inner.close(),
      };
      envs = new TaskEnvironments({ backend: recording, logger: silentLogger(), lifetimeSeconds: 0 });
    });

    afterEach(async () => {
      await Promise.all(used.splice(0).map((key) => envs.release(key)));
    });

    after(async () => {
      await envs?.closeAll();
      await inner?.close();
    });

    const exec = (key: TaskKey, command: string, extra: { timeoutMs?: number; stdin?: string; pty?: boolean } = {}) =>
      envs.exec(key, { command, timeoutMs: extra.timeoutMs ?? 30_000 * scale, ...extra, maxOutputChars: 2_000_000 });

    const processAction = async (key: TaskKey, action: string, sessionId?: string, extra: object = {}) =>
      JSON.parse(
        await envs.process(key, { action, ...(sessionId !== undefined ? { sessionId } : {}), ...extra }),
      ) as ProcessJson;

    /** Waits until no live process in the task's environment has an argument equal to `arg`. */
    const assertNoProcess = async (key: TaskKey, arg: string, what: string) => {
      const deadline = Date.now() + 10_000 * scale;
      let last = '';
      for (;;) {
        const r = await exec(key, countProcessesScript(arg));
        last = r.output.trim();
        if (last === 'count=0') return;
        if (Date.now() > deadline) break;
        await sleep(200);
      }
      assert.fail(`${what}: processes with argument "${arg}" still run in ${name} (${last})`);
    };

    const untilOutput = async (key: TaskKey, sessionId: string, needle: string) => {
      const deadline = Date.now() + 15_000 * scale;
      let seen = '';
      while (!seen.includes(needle)) {
        if (Date.now() > deadline) assert.fail(`background output never showed "${needle}"; got ${JSON.stringify(seen)}`);
        // poll reads nothing away: each answer shows the buffer's last 1,000 characters.
        const p = await processAction(key, 'poll', sessionId);
        seen = p.output_preview ?? '';
        if (!seen.includes(needle)) await sleep(100);
      }
      return seen;
    };

    describe('shell state', () => {
      it('keeps cwd, exported variables and functions across calls', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const made = await exec(key, 'd=$(mktemp -d) && mkdir -p "$d/sub dir" && cd "$d/sub dir" && pwd');
        assert.equal(made.exitCode, 0, made.output);
        const dir = made.output.trim();
        assert.match(dir, /\/sub dir$/);
        await exec(key, 'export BERTH_CONF_VAR="two words"; greet() { echo "hello $1"; }');
        const r = await exec(key, 'pwd; echo "$BERTH_CONF_VAR"; greet there');
        assert.equal(r.output, `${dir}\ntwo words\nhello there\n`);
        assert.equal(r.exitCode, 0);
        assert.equal(await envs.cwd(key), dir);
      });

      it('keeps state when a command ends with exit 3', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const r = await exec(key, 'cd / && export BERTH_EXIT_VAR=kept; echo before; exit 3');
        assert.deepEqual([r.exitCode, r.output], [3, 'before\n']);
        const after3 = await exec(key, 'pwd; echo "$BERTH_EXIT_VAR"');
        assert.equal(after3.output, '/\nkept\n');
        // Where each command started and ended, for the terminal's `cwd` key: resolved, and both from the shell.
        assert.equal(r.endCwd, '/');
        assert.equal(typeof r.startCwd, 'string');
        assert.deepEqual([after3.startCwd, after3.endCwd], ['/', '/']);
      });

      it('reports where a workdir command started and ended, and keeps the task cwd', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        await exec(key, 'cd /');
        const r = await envs.exec(key, { command: 'cd /tmp', workdir: '/', timeoutMs: 30_000 * scale });
        assert.equal(r.exitCode, 0, r.output);
        assert.equal(r.startCwd, '/');
        assert.match(r.endCwd ?? '', /^\/.*tmp$/);
        assert.equal((await exec(key, 'pwd')).output, '/\n');
        const timedOut = await envs.exec(key, { command: 'cd /tmp && sleep 30', timeoutMs: 1000 });
        assert.equal(timedOut.timedOut, true);
        assert.deepEqual([timedOut.startCwd, timedOut.endCwd], [undefined, undefined]);
      });

      it('merges stderr, passes stdin and reports signals as 128+n', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const r = await exec(key, 'echo out; echo err >&2; cat', { stdin: 'from stdin\n' });
        assert.equal(r.output, 'out\nerr\nfrom stdin\n');
        assert.equal((await exec(key, 'kill -9 $$')).exitCode, 137);
      });

      it('returns every byte of a large output', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const r = await exec(key, 'seq 1 150000; echo END');
        const lines = r.output.split('\n');
        assert.equal(lines[0], '1');
        assert.equal(lines[149_999], '150000');
        assert.equal(lines[150_000], 'END');
        assert.equal(r.exitCode, 0);
      });
    });

    describe('timeouts and interrupts', () => {
      it('times out with 124, keeps partial output and leaves no process behind', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const child = uniqueSleepSeconds();
        const leader = child + 1;
        const r = await exec(key, `echo partial-output; sh -c 'sleep ${child}' & sleep ${leader}; echo never`, {
          timeoutMs: 1500 * scale,
        });
        assert.equal(r.exitCode, 124);
        assert.equal(r.timedOut, true);
        assert.match(r.output, /partial-output/);
        assert.doesNotMatch(r.output, /never/);
        await assertNoProcess(key, `${child}`, 'after a timeout');
        await assertNoProcess(key, `${leader}`, 'after a timeout');
        // The task still works, and the command's state was not saved over the old one.
        assert.equal((await exec(key, 'echo alive')).output, 'alive\n');
      });

      it('interrupts with 130 and kills the command', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const seconds = uniqueSleepSeconds();
        let ready!: () => void;
        const started = new Promise<void>((resolve) => (ready = resolve));
        let seen = '';
        const running = envs.exec(key, {
          command: `echo ready; sleep ${seconds}`,
          timeoutMs: 60_000 * scale,
          onOutput: (text) => {
            seen += text;
            if (seen.includes('ready')) ready();
          },
        });
        await started;
        assert.equal(envs.interrupt(key), 1);
        const r = await running;
        assert.deepEqual([r.exitCode, r.interrupted, r.timedOut], [130, true, false]);
        assert.match(r.output, /ready/);
        await assertNoProcess(key, `${seconds}`, 'after an interrupt');
      });
    });

    describe('background processes', () => {
      it('starts, polls, logs and kills with -15', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        await exec(key, 'cd / && export BERTH_BG_VAR=from-snapshot');
        const seconds = uniqueSleepSeconds();
        const started = await envs.startBackground(key, {
          command: `echo "bg-one $BERTH_BG_VAR"; pwd; echo bg-two; sleep ${seconds}`,
        });
        assert.match(started.sessionId, /^proc_[0-9a-f]{12}$/);
        assert.ok(started.pid > 0, `pid ${started.pid}`);
        const polled = await untilOutput(key, started.sessionId, 'bg-two');
        assert.match(polled, /bg-one from-snapshot\n\/\nbg-two/);

        const running = await processAction(key, 'poll', started.sessionId);
        assert.equal(running.status, 'running');
        const log = await processAction(key, 'log', started.sessionId);
        assert.match(log.output ?? '', /bg-one from-snapshot\n\/\nbg-two/);
        const list = await processAction(key, 'list');
        assert.ok(list.processes?.some((p) => p.session_id === started.sessionId));

        // The check below must be able to see the process, or it would pass for the wrong reason.
        assert.equal((await exec(key, countProcessesScript(`${seconds}`))).output.trim(), 'count=1');
        const killed = await processAction(key, 'kill', started.sessionId);
        assert.deepEqual(
          [killed.status, killed.completion_reason, killed.termination_source],
          ['killed', 'killed', 'process.kill'],
        );
        assert.match(killed.output ?? '', /bg-two/);
        const after15 = await processAction(key, 'poll', started.sessionId);
        assert.deepEqual([after15.status, after15.exit_code], ['exited', -15]);
        await assertNoProcess(key, `${seconds}`, 'after killing a background process');
      });

      it('reports a natural exit code and takes stdin', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const done = await envs.startBackground(key, { command: 'echo finishing; exit 5' });
        const waited = await processAction(key, 'wait', done.sessionId, { timeoutMs: 20_000 * scale });
        assert.deepEqual([waited.status, waited.exit_code], ['exited', 5]);
        assert.match(waited.output ?? '', /finishing/);

        // A stdin pipe kept open on request (commands that read piped input to its end).
        const reader = await envs.startBackground(key, {
          command: 'read -r line; echo "got:$line"; cat; echo eof',
          pipeStdin: true,
        });
        const submitted = await processAction(key, 'submit', reader.sessionId, { data: 'hello there' });
        assert.equal(submitted.status, 'ok', JSON.stringify(submitted));
        await untilOutput(key, reader.sessionId, 'got:hello there');
        const closed = await processAction(key, 'close', reader.sessionId);
        assert.equal(closed.status, 'ok', JSON.stringify(closed));
        const end = await processAction(key, 'wait', reader.sessionId, { timeoutMs: 20_000 * scale });
        assert.deepEqual([end.status, end.exit_code], ['exited', 0]);
        assert.match(end.output ?? '', /eof/);
      });

      it('starts a process without a PTY at end of input: one that reads stdin to its end finishes', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const seconds = uniqueSleepSeconds();
        const started = await envs.startBackground(key, { command: `wc -l; cat; echo read-all; sleep ${seconds}` });
        await untilOutput(key, started.sessionId, 'read-all');
        const polled = await processAction(key, 'poll', started.sessionId);
        assert.deepEqual([polled.status, polled.output_preview], ['running', '0\nread-all\n']);
        const refused = await processAction(key, 'write', started.sessionId, { data: 'late' });
        assert.deepEqual(refused, { status: 'error', error: 'Process stdin not available (non-local backend or stdin closed)' });
        await processAction(key, 'kill', started.sessionId);
      });

      it('takes input under a PTY: submit answers a prompt, close ends the input', { timeout: testTimeoutMs }, async (t) => {
        if (options.skipPty || !inner.capabilities.pty) {
          t.skip(`${name} has no PTY support`);
          return;
        }
        const key = newTask();
        const started = await envs.startBackground(key, {
          command: 'stty -echo 2>/dev/null; read -r line; echo "got:$line"; cat >/dev/null; echo eof',
          pty: true,
        });
        const submitted = await processAction(key, 'submit', started.sessionId, { data: 'typed' });
        assert.equal(submitted.status, 'ok', JSON.stringify(submitted));
        await untilOutput(key, started.sessionId, 'got:typed');
        const closed = await processAction(key, 'close', started.sessionId);
        assert.deepEqual(closed, { status: 'ok', message: 'EOF sent' });
        const end = await processAction(key, 'wait', started.sessionId, { timeoutMs: 20_000 * scale });
        assert.deepEqual([end.status, end.exit_code], ['exited', 0]);
        assert.match(end.output ?? '', /eof/);
      });
    });

    const dropAgentStream = options.dropAgentStream;
    if (dropAgentStream) {
      describe('dropped agent stream', () => {
        const survives = (options.backgroundAfterDrop ?? 'survives') === 'survives';
        const title = survives
          ? 'a background process survives a dropped agent stream and is found again after reconnect'
          : 'a dropped agent stream ends background processes: poll says they exited, none is left running';
        it(title, { timeout: testTimeoutMs }, async () => {
          const key = newTask();
          await exec(key, 'cd / && export BERTH_DROP_VAR=kept');
          const seconds = uniqueSleepSeconds();
          const started = await envs.startBackground(key, { command: `echo bg-up; sleep ${seconds}; echo never` });
          await untilOutput(key, started.sessionId, 'bg-up');
          assert.equal((await exec(key, countProcessesScript(`${seconds}`))).output.trim(), 'count=1');
          const env = environments.get(taskKeyString(key));
          assert.ok(env);

          await dropAgentStream(env);

          // The next command reconnects; the shell state lives in the environment, not in the stream.
          const after = await exec(key, 'echo "$PWD $BERTH_DROP_VAR"');
          assert.equal(after.exitCode, 0, after.output);
          assert.equal(after.output, '/ kept\n');
          const list = await processAction(key, 'list');
          assert.ok(list.processes?.some((p) => p.session_id === started.sessionId), JSON.stringify(list));
          if (survives) {
            const polled = await processAction(key, 'poll', started.sessionId);
            assert.equal(polled.status, 'running', JSON.stringify(polled));
            assert.equal((await exec(key, countProcessesScript(`${seconds}`))).output.trim(), 'count=1');
            const killed = await processAction(key, 'kill', started.sessionId);
            assert.equal(killed.status, 'killed', JSON.stringify(killed));
            const end = await processAction(key, 'poll', started.sessionId);
            assert.deepEqual([end.status, end.exit_code], ['exited', -15]);
          } else {
            const end = await processAction(key, 'wait', started.sessionId, { timeoutMs: 20_000 * scale });
            assert.equal(end.status, 'exited', JSON.stringify(end));
            assert.match(end.output ?? '', /bg-up/);
          }
          await assertNoProcess(key, `${seconds}`, 'after the dropped stream');
        });
      });
    }

    if (options.executeCode) {
      describe('execute_code', () => {
        it("a script sees terminal's files and cwd, and terminal sees the script's", { timeout: testTimeoutMs }, async () => {
          const key = newTask();
          const dir = (await exec(key, 'mktemp -d')).output.trim();
          assert.match(dir, /^\//);
          const made = await exec(key, `cd ${dir} && printf 'from terminal ${runId}' > from-terminal.txt`);
          assert.equal(made.exitCode, 0, made.output);
          const runner = new CodeRunner(envs, { logger: silentLogger(), killGraceMs: 1000 });
          const code = `import json, os
print(json.dumps({"cwd": os.getcwd(), "read": open("from-terminal.txt").read()}))
open("from-script.txt", "w").write("from script ${runId}")
`;
          const r = await runner.run(key, {
            code,
            stubModule: buildHermesToolsModule(['terminal']),
            mode: 'project',
            timeoutMs: 60_000 * scale,
            maxStdoutBytes: 50_000,
            maxStderrBytes: 10_000,
            envPassthrough: [],
            credentialEnv: [],
            allowedTools: ['terminal'],
            allowHostSubprocess: true,
            onToolCall: () => Promise.resolve(JSON.stringify({ error: 'no tool calls in this case' })),
          });
          assert.equal(r.exitCode, 0, r.stderr);
          assert.deepEqual(JSON.parse(r.stdout), { cwd: dir, read: `from terminal ${runId}` });
          assert.ok(!r.notices.some((n) => /code container/.test(n)), JSON.stringify(r.notices));
          assert.equal((await exec(key, 'cat from-script.txt')).output, `from script ${runId}`);
        });
      });
    }

    describe('files', () => {
      const tempDir = async (key: TaskKey) => {
        const r = await exec(key, 'mktemp -d');
        assert.equal(r.exitCode, 0, r.output);
        return r.output.trim();
      };
      const sha256 = (data: Uint8Array) => createHash('sha256').update(data).digest('hex');

      it('writes, reads and stats files, with spaces in names', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const dir = await tempDir(key);
        const file = `${dir}/a dir/with space's name.txt`;
        const written = await envs.writeFile(key, file, 'line one\nline two\n');
        assert.deepEqual(written, { absPath: file, bytesWritten: 18, dirsCreated: true });
        assert.equal((await envs.readFile(key, file)).content.toString('utf8'), 'line one\nline two\n');
        assert.deepEqual(await envs.stat(key, file), { absPath: file, exists: true, isDirectory: false, sizeBytes: 18 });
        assert.equal((await envs.stat(key, `${dir}/a dir`)).isDirectory, true);
        assert.equal((await envs.stat(key, `${dir}/missing`)).exists, false);
        // What the file tools write, the shell sees, and the other way round.
        assert.equal((await exec(key, `cat "${dir}/a dir/with space's name.txt"`)).output, 'line one\nline two\n');
        await exec(key, `cd "${dir}/a dir" && printf 'from shell' > 'shell file.txt'`);
        assert.equal((await envs.readFile(key, 'shell file.txt')).content.toString(), 'from shell');
        const relative = await envs.writeFile(key, 'relative.txt', 'r');
        assert.equal(relative.absPath, `${dir}/a dir/relative.txt`);
      });

      it('rejects a missing file with NOT_FOUND', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const dir = await tempDir(key);
        await assert.rejects(envs.readFile(key, `${dir}/nope.txt`), (err: unknown) => {
          assert.ok(err instanceof BerthError, String(err));
          assert.equal(err.code, 'NOT_FOUND');
          return true;
        });
      });

      it('keeps binary content and a 5 MB file intact', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const dir = await tempDir(key);
        const binary = Buffer.alloc(256 * 4);
        for (let i = 0; i < binary.length; i++) binary[i] = i % 256;
        await envs.writeFile(key, `${dir}/bytes.bin`, binary);
        assert.deepEqual((await envs.readFile(key, `${dir}/bytes.bin`)).content, binary);
        assert.equal((await exec(key, `sha256sum < ${dir}/bytes.bin`)).output.split(' ')[0], sha256(binary));

        const big = randomBytes(5 * 1024 * 1024);
        await envs.writeFile(key, `${dir}/big.bin`, big);
        assert.equal((await envs.stat(key, `${dir}/big.bin`)).sizeBytes, big.length);
        assert.equal((await exec(key, `sha256sum < ${dir}/big.bin`)).output.split(' ')[0], sha256(big));
        const back = (await envs.readFile(key, `${dir}/big.bin`)).content;
        assert.equal(back.length, big.length);
        assert.equal(sha256(back), sha256(big));
        await exec(key, `head -c 3000000 /dev/urandom > ${dir}/from-shell.bin`);
        const fromShell = (await envs.readFile(key, `${dir}/from-shell.bin`)).content;
        assert.equal((await exec(key, `sha256sum < ${dir}/from-shell.bin`)).output.split(' ')[0], sha256(fromShell));
      });

      it('writes atomically: a new inode with the old mode, through a symlink', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const dir = await tempDir(key);
        await envs.writeFile(key, `${dir}/f.txt`, 'old\n');
        const before = await exec(key, `cd ${dir} && chmod 754 f.txt && ln -s f.txt link && ln f.txt hard && stat -c %i f.txt`);
        assert.equal(before.exitCode, 0, before.output);
        const written = await envs.writeFile(key, `${dir}/f.txt`, 'new content\n');
        assert.deepEqual(written, { absPath: `${dir}/f.txt`, bytesWritten: 12, dirsCreated: false });
        const after = await exec(key, `cd ${dir} && stat -c '%a %i' f.txt && cat f.txt hard`);
        const [mode, inode] = after.output.split('\n')[0]!.split(' ');
        assert.equal(mode, '754');
        assert.notEqual(inode, before.output.trim(), 'the write replaced the file (rename), not rewrote it in place');
        // A hard link keeps the old file: the rename gives the path a new inode (as upstream's mv -f does).
        assert.equal(after.output.split('\n').slice(1).join('\n'), 'new content\nold\n');

        // Through a symlink: the link's target is replaced, the link stays a link to it.
        await envs.writeFile(key, `${dir}/link`, 'via link\n');
        const link = await exec(key, `cd ${dir} && [ -L link ] && readlink link && cat f.txt && stat -c %a f.txt`);
        assert.equal(link.output, 'f.txt\nvia link\n754\n');
        // A dangling link: the file is made where it points.
        await exec(key, `cd ${dir} && mkdir sub && ln -s sub/made.txt dangling`);
        await envs.writeFile(key, `${dir}/dangling`, 'made\n');
        assert.equal((await exec(key, `cd ${dir} && [ -L dangling ] && cat sub/made.txt`)).output, 'made\n');
        assert.equal((await exec(key, `ls -A ${dir} ${dir}/sub | grep -c '^\\..*\\.berth-'`)).output, '0\n', 'no temp file is left');
      });

      it('a write that fails leaves the old content and no temp file', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const dir = await tempDir(key);
        await envs.writeFile(key, `${dir}/locked/f.txt`, 'old\n');
        // The temp file cannot be made beside the file: a directory we may not write (root ignores
        // the mode bits, so as root it is made immutable instead).
        const lock = await exec(
          key,
          `cd ${dir} && if [ "$(id -u)" = 0 ]; then chattr +i locked; else chmod 555 locked; fi && echo locked`,
        );
        assert.equal(lock.output, 'locked\n', `cannot lock a directory in ${name}: ${lock.output}`);
        try {
          await assert.rejects(envs.writeFile(key, `${dir}/locked/f.txt`, 'new\n'), (err: unknown) => {
            assert.ok(err instanceof BerthError, String(err));
            assert.equal(err.code, 'PERMISSION_DENIED', err.message);
            assert.equal(err.message, `Permission denied: ${dir}/locked/f.txt`);
            return true;
          });
          assert.equal((await exec(key, `cat ${dir}/locked/f.txt; ls -A ${dir}/locked`)).output, 'old\nf.txt\n');
        } finally {
          await exec(key, `cd ${dir} && if [ "$(id -u)" = 0 ]; then chattr -i locked; else chmod 755 locked; fi`);
        }
      });

      /** Asserts that `promise` is refused with INVALID_ARGUMENT and a message matching `pattern`. */
      const refused = (promise: Promise<unknown>, pattern: RegExp) =>
        assert.rejects(promise, (err: unknown) => {
          assert.ok(err instanceof BerthError, String(err));
          assert.equal(err.code, 'INVALID_ARGUMENT', err.message);
          assert.match(err.message, pattern);
          return true;
        });

      // Each of these once grew the executor without bound or hung the call (a FIFO without a writer).
      it('refuses to read or write a character device', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        await refused(envs.readFile(key, '/dev/zero'), /\/dev\/zero is not a regular file \(it is a character device\)/);
        await refused(envs.writeFile(key, '/dev/null', 'x'), /\/dev\/null is not a regular file/);
        // The environment keeps serving.
        assert.equal((await exec(key, 'echo still here')).output, 'still here\n');
      });

      it('refuses a FIFO without opening it for long', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const dir = await tempDir(key);
        assert.equal((await exec(key, `mkfifo ${dir}/pipe && echo made`)).output, 'made\n');
        await refused(envs.readFile(key, `${dir}/pipe`), /pipe is not a regular file \(it is a FIFO\)/);
        await refused(envs.writeFile(key, `${dir}/pipe`, 'x'), /pipe is not a regular file \(it is a FIFO\)/);
        assert.equal((await exec(key, `[ -p ${dir}/pipe ] && echo still a fifo`)).output, 'still a fifo\n');
      });

      it('refuses a Unix socket', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const dir = await tempDir(key);
        // python3 where the image has it, else perl (an image without python3 still has perl-base).
        const bind =
          `if command -v python3 >/dev/null; then python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' ${dir}/sock; ` +
          `else perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Local => $ARGV[0], Listen => 1) or die "$!"' ${dir}/sock; fi`;
        const made = await exec(key, `${bind} && [ -S ${dir}/sock ] && echo made`);
        assert.equal(made.output, 'made\n', `cannot make a socket in ${name}: ${made.output}`);
        await refused(envs.readFile(key, `${dir}/sock`), /sock is not a regular file \(it is a socket\)/);
        await refused(envs.writeFile(key, `${dir}/sock`, 'x'), /sock is not a regular file/);
      });

      it('the file tools refuse a FIFO and a device, and search_files passes a FIFO by', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const dir = await tempDir(key);
        await exec(key, `mkfifo ${dir}/pipe && printf 'beside the pipe\\n' > ${dir}/text.txt`);
        // The dispatcher's own tools, on this backend's environment: what a model's call does.
        const task: TaskClient = {
          exec: (request) => envs.exec(key, request),
          readFile: (path) => envs.readFile(key, path),
          writeFile: (path, content) => envs.writeFile(key, path, content),
          stat: (path) => envs.stat(key, path),
          startBackground: (request) => envs.startBackground(key, request),
          process: (request) => envs.process(key, request),
        };
        const context: ToolContext = { tenant, taskId: key.taskId, sessionId: 's', task, signal: new AbortController().signal, logger: silentLogger() };
        const call = async (tool: string, args: Record<string, unknown>) => {
          const registration = fileToolRegistrations().find((r) => r.name === tool);
          assert.ok(registration, tool);
          return JSON.parse(await registration.handler(args, context)) as Record<string, unknown>;
        };
        assert.equal(
          (await call('read_file', { path: `${dir}/pipe` })).error,
          `Cannot read '${dir}/pipe': not a regular file (directory, FIFO, socket, or device). Reading it could block indefinitely.`,
        );
        // /dev/zero is refused by name; /dev/null is not on that list, so the environment's own check answers.
        assert.equal(
          (await call('read_file', { path: '/dev/zero' })).error,
          "Cannot read '/dev/zero': this is a device file that would block or produce infinite output.",
        );
        assert.equal(
          (await call('read_file', { path: '/dev/null' })).error,
          "Cannot read '/dev/null': not a regular file (directory, FIFO, socket, or device). Reading it could block indefinitely.",
        );
        assert.match(String((await call('write_file', { path: `${dir}/pipe`, content: 'x' })).error), /pipe is not a regular file/);
        const found = await call('search_files', { pattern: 'beside', path: dir });
        assert.deepEqual(found.matches, [{ path: `${dir}/text.txt`, line: 1, content: 'beside the pipe' }]);
        assert.match(String((await call('search_files', { pattern: 'x', path: `${dir}/pipe` })).error), /is not a regular file or directory/);
      });

      it('refuses a file over the read cap from its size, sparse or not', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const dir = await tempDir(key);
        // 64 GiB of holes: reading it whole is what must not happen.
        assert.equal((await exec(key, `truncate -s 64G ${dir}/sparse && echo made`)).output, 'made\n');
        await refused(envs.readFile(key, `${dir}/sparse`), /File too large to read: .*sparse is 68,719,476,736 bytes; the file tools read files up to 8,388,608 bytes/);
        assert.equal((await envs.stat(key, `${dir}/sparse`)).sizeBytes, 64 * 1024 ** 3);
        // One byte over the cap is refused; the cap itself is read whole.
        await exec(key, `head -c 8388609 /dev/urandom > ${dir}/over.bin && head -c 8388608 ${dir}/over.bin > ${dir}/cap.bin`);
        await refused(envs.readFile(key, `${dir}/over.bin`), /over\.bin is 8,388,609 bytes/);
        assert.equal((await envs.readFile(key, `${dir}/cap.bin`)).content.length, 8 * 1024 * 1024);
      });
    });

    describe('isolation and release', () => {
      it('keeps two tasks apart', { timeout: testTimeoutMs }, async () => {
        const a = newTask();
        const b = newTask();
        await exec(a, 'cd / && export BERTH_ISO=a-only');
        const rb = await exec(b, 'echo "[${BERTH_ISO-}]"; pwd');
        assert.equal(rb.output.split('\n')[0], '[]');
        assert.notEqual(rb.output.split('\n')[1], '/');
        const bg = await envs.startBackground(a, { command: `sleep ${uniqueSleepSeconds()}` });
        const listB = await processAction(b, 'list');
        assert.deepEqual(listB.processes, []);
        assert.equal((await processAction(b, 'poll', bg.sessionId)).status, 'not_found');
        if (!sharedHost) {
          await exec(a, 'echo a > /tmp/berth-iso-file');
          assert.equal((await exec(b, 'cat /tmp/berth-iso-file 2>/dev/null || echo absent')).output, 'absent\n');
        }
      });

      it('runs commands of several tasks concurrently', { timeout: testTimeoutMs }, async () => {
        const keys = [newTask(), newTask(), newTask(), newTask()];
        const results = await Promise.all(
          keys.flatMap((key, t) =>
            [0, 1, 2].map(async (c) => {
              const r = await exec(key, `sleep 0.2; echo task-${t}-cmd-${c}`);
              return { want: `task-${t}-cmd-${c}\n`, r };
            }),
          ),
        );
        for (const { want, r } of results) assert.deepEqual([r.output, r.exitCode], [want, 0]);
      });

      it('release kills background processes and removes the environment', { timeout: testTimeoutMs }, async () => {
        const key = newTask();
        const seconds = uniqueSleepSeconds();
        await exec(key, 'export BERTH_RELEASED=old');
        await envs.startBackground(key, { command: `sleep ${seconds}` });
        const env = environments.get(taskKeyString(key));
        assert.ok(env);
        assert.equal(await envs.release(key), true);
        assert.equal(envs.has(key), false);
        assert.equal(await envs.release(key), false);
        await assert.rejects(env.exec({ script: 'true', timeoutMs: 5000 * scale }));
        if (options.environmentExists) {
          assert.equal(await options.environmentExists(env), false, `${env.description} still exists after release`);
        }
        if (sharedHost) {
          const other = newTask();
          await assertNoProcess(other, `${seconds}`, 'after release');
          if (!options.environmentExists) {
            const gone = await exec(other, `test -e '${env.stateDir}' && echo present || echo gone`);
            assert.equal(gone.output, 'gone\n', `state dir ${env.stateDir} left behind`);
          }
        }
        // The same task id gets a fresh environment afterwards.
        assert.equal((await exec(key, 'echo "[${BERTH_RELEASED-}]"')).output, '[]\n');
      });
    });

    describe('pty', () => {
      it('runs under a terminal when asked', { timeout: testTimeoutMs }, async (t) => {
        if (options.skipPty || !inner.capabilities.pty) {
          t.skip(`${name} has no PTY support`);
          return;
        }
        const key = newTask();
        const r = await exec(key, 'test -t 1 && echo is-a-tty; export BERTH_PTY_VAR=kept; exit 4', { pty: true });
        assert.equal(r.exitCode, 4);
        assert.match(r.output, /is-a-tty/);
        assert.equal((await exec(key, 'test -t 1 || echo not-a-tty; echo "$BERTH_PTY_VAR"')).output, 'not-a-tty\nkept\n');
      });
    });
  });
}
