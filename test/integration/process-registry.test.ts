import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, realpath, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import { ResourceExhaustedError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import type { BackendEnvironment, TaskKey } from '../../services/executor/backend.js';
import { LocalBackend } from '../../services/executor/backends/local/local-backend.js';
import { ProcessRegistry, type ProcessEvent, type ProcessRegistryOptions } from '../../services/executor/process-registry.js';
import { ShellStateRunner } from '../../services/executor/shell-state-runner.js';
import { TaskEnvironments, type TaskEnvironmentsOptions } from '../../services/executor/task-environment.js';

/** True when `pid` runs (zombies left by a non-reaping PID 1 count as dead). */
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Json = Record<string, unknown>;

let root: string;
let workDir: string;
let backend: LocalBackend;
const cleanups: (() => Promise<unknown>)[] = [];
let taskNo = 0;

before(async () => {
  root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'berth-process-test-')));
  workDir = path.join(root, 'work');
  await mkdir(workDir);
  backend = new LocalBackend({ stateRoot: path.join(root, 'state'), initialCwd: workDir });
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

after(async () => {
  await backend.close();
  await rm(root, { recursive: true, force: true });
});

/** A TaskEnvironments over the local backend, closed after the test. */
function environments(options: Partial<TaskEnvironmentsOptions> = {}): TaskEnvironments {
  const envs = new TaskEnvironments({ backend, logger: silentLogger(), ...options });
  cleanups.push(() => envs.closeAll());
  return envs;
}

function newKey(): TaskKey {
  return { tenant: 'tenant', taskId: `proc-task-${++taskNo}` };
}

/** A registry launching through a real runner, for options TaskEnvironments does not expose per call. */
async function registry(options: Partial<ProcessRegistryOptions> = {}): Promise<ProcessRegistry> {
  const env: BackendEnvironment = await backend.createEnvironment(newKey());
  const runner = new ShellStateRunner(env);
  const reg = new ProcessRegistry({ launch: (o) => runner.startBackground(o), ...options });
  cleanups.push(async () => {
    await reg.closeAll();
    await env.dispose();
  });
  return reg;
}

describe('process tool through TaskEnvironments', () => {
  it('starts in the task cwd with its variables, and saves no state', async () => {
    const envs = environments();
    const key = newKey();
    await envs.exec(key, { command: 'mkdir -p bg && cd bg && export SEEN=from-task', timeoutMs: 5000 });
    const started = await envs.startBackground(key, { command: 'pwd; echo "$SEEN"; cd /; export LEAK=1' });
    assert.match(started.sessionId, /^proc_[0-9a-f]{12}$/);
    assert.ok(started.pid > 0);
    const waited = JSON.parse(await envs.process(key, { action: 'wait', sessionId: started.sessionId, timeoutMs: 5000 })) as Json;
    assert.deepEqual(waited, {
      session_id: started.sessionId,
      status: 'exited',
      exit_code: 0,
      output: `${path.join(workDir, 'bg')}\nfrom-task\n`,
    });
    const after = await envs.exec(key, { command: 'pwd; echo "${LEAK-unset}"', timeoutMs: 5000 });
    assert.equal(after.output, `${path.join(workDir, 'bg')}\nunset\n`);
  });

  it('poll returns status and only the output since the last poll', async () => {
    const envs = environments();
    const key = newKey();
    const { sessionId, pid } = await envs.startBackground(key, {
      command: 'echo one; sleep 0.3; echo two; sleep 0.3; exit 4',
    });
    await sleep(150);
    const first = JSON.parse(await envs.process(key, { action: 'poll', sessionId })) as Json;
    assert.equal(first.status, 'running');
    assert.equal(first.exit_code, null);
    assert.equal(first.output, 'one\n');
    assert.equal(first.pid, pid);
    assert.equal(first.command, 'echo one; sleep 0.3; echo two; sleep 0.3; exit 4');
    await sleep(1000);
    const second = JSON.parse(await envs.process(key, { action: 'poll', sessionId })) as Json;
    assert.deepEqual([second.status, second.exit_code, second.output], ['exited', 4, 'two\n']);
    const third = JSON.parse(await envs.process(key, { action: 'poll', sessionId })) as Json;
    assert.equal(third.output, '');
  });

  it('log pages over lines', async () => {
    const envs = environments();
    const key = newKey();
    const { sessionId } = await envs.startBackground(key, { command: 'seq 1 500' });
    await envs.process(key, { action: 'wait', sessionId, timeoutMs: 5000 });
    const tail = JSON.parse(await envs.process(key, { action: 'log', sessionId })) as Json;
    assert.equal(tail.total_lines, 500);
    assert.equal(tail.offset, 300);
    assert.equal(tail.showing, '200 lines');
    assert.ok(String(tail.output).startsWith('301\n') && String(tail.output).endsWith('\n500'));
    const page = JSON.parse(await envs.process(key, { action: 'log', sessionId, offset: 0, limit: 3 })) as Json;
    assert.deepEqual([page.output, page.offset, page.showing], ['1\n2\n3', 0, '3 lines']);
    const fromEnd = JSON.parse(await envs.process(key, { action: 'log', sessionId, offset: -2, limit: 10 })) as Json;
    assert.equal(fromEnd.output, '499\n500');
  });

  it('write, submit and close drive stdin of cat', async () => {
    const envs = environments();
    const key = newKey();
    const { sessionId } = await envs.startBackground(key, { command: 'cat; echo cat-ended' });
    const written = JSON.parse(await envs.process(key, { action: 'write', sessionId, data: 'abc' })) as Json;
    assert.deepEqual(written, { session_id: sessionId, status: 'ok', bytes_written: 3 });
    await envs.process(key, { action: 'submit', sessionId, data: 'déf' });
    await sleep(200);
    const polled = JSON.parse(await envs.process(key, { action: 'poll', sessionId })) as Json;
    assert.equal(polled.output, 'abcdéf\n');
    const closed = JSON.parse(await envs.process(key, { action: 'close', sessionId })) as Json;
    assert.deepEqual(closed, { session_id: sessionId, status: 'ok', stdin: 'closed' });
    const done = JSON.parse(await envs.process(key, { action: 'wait', sessionId, timeoutMs: 5000 })) as Json;
    assert.deepEqual([done.status, done.exit_code, done.output], ['exited', 0, 'cat-ended\n']);
    const late = JSON.parse(await envs.process(key, { action: 'write', sessionId, data: 'x' })) as Json;
    assert.equal(late.status, 'already_exited');
  });

  it('kill stops the whole group and reports -15', async () => {
    const envs = environments();
    const key = newKey();
    const { sessionId, pid } = await envs.startBackground(key, { command: 'sleep 1000 & echo child:$!; sleep 1000' });
    await sleep(200);
    const polled = JSON.parse(await envs.process(key, { action: 'poll', sessionId })) as Json;
    const child = Number(/child:(\d+)/.exec(String(polled.output))?.[1]);
    assert.ok(child > 0);
    const killed = JSON.parse(await envs.process(key, { action: 'kill', sessionId })) as Json;
    assert.deepEqual(killed, { session_id: sessionId, status: 'killed', exit_code: -15 });
    assert.equal(isAlive(pid), false);
    assert.equal(isAlive(child), false);
    const again = JSON.parse(await envs.process(key, { action: 'kill', sessionId })) as Json;
    assert.deepEqual(again, { session_id: sessionId, status: 'already_exited', exit_code: -15 });
    const polledAfter = JSON.parse(await envs.process(key, { action: 'poll', sessionId })) as Json;
    assert.deepEqual([polledAfter.status, polledAfter.exit_code], ['exited', -15]);
  });

  it('wait times out, clamps long waits and is interruptible', async () => {
    const envs = environments({ processes: { maxWaitMs: 300 } });
    const key = newKey();
    const { sessionId } = await envs.startBackground(key, { command: 'echo waiting; sleep 1000' });
    const timedOut = JSON.parse(await envs.process(key, { action: 'wait', sessionId, timeoutMs: 200 })) as Json;
    assert.deepEqual(timedOut, {
      session_id: sessionId,
      status: 'timeout',
      output: 'waiting\n',
      timeout_note: 'Waited 0s, process still running',
    });
    const clamped = JSON.parse(await envs.process(key, { action: 'wait', sessionId, timeoutMs: 60_000 })) as Json;
    assert.equal(clamped.status, 'timeout');
    assert.equal(clamped.timeout_note, 'Requested wait of 60s was clamped to the maximum of 0s');

    const envs2 = environments();
    const key2 = newKey();
    const second = await envs2.startBackground(key2, { command: 'sleep 1000' });
    const pending = envs2.process(key2, { action: 'wait', sessionId: second.sessionId, timeoutMs: 60_000 });
    await sleep(100);
    assert.equal(envs2.interrupt(key2), 1);
    const interrupted = JSON.parse(await pending) as Json;
    assert.equal(interrupted.status, 'interrupted');
    // The process itself keeps running after an interrupted wait.
    const polled = JSON.parse(await envs2.process(key2, { action: 'poll', sessionId: second.sessionId })) as Json;
    assert.equal(polled.status, 'running');
  });

  it('list shows running and finished processes', async () => {
    const envs = environments();
    const key = newKey();
    const done = await envs.startBackground(key, { command: 'echo finished' });
    await envs.process(key, { action: 'wait', sessionId: done.sessionId, timeoutMs: 5000 });
    const running = await envs.startBackground(key, { command: 'sleep 1000', workdir: '/tmp' });
    const listed = JSON.parse(await envs.process(key, { action: 'list' })) as { processes: Json[] };
    assert.equal(listed.processes.length, 2);
    const [first, second] = listed.processes;
    assert.deepEqual(Object.keys(first ?? {}), [
      'session_id',
      'command',
      'cwd',
      'pid',
      'status',
      'started_at',
      'uptime_seconds',
      'exit_code',
      'output_preview',
    ]);
    assert.deepEqual(
      [first?.session_id, first?.status, first?.exit_code, first?.output_preview, first?.cwd],
      [done.sessionId, 'exited', 0, 'finished\n', workDir],
    );
    assert.deepEqual(
      [second?.session_id, second?.status, second?.exit_code, second?.cwd],
      [running.sessionId, 'running', null, '/tmp'],
    );
  });

  it('reports the spec error strings', async () => {
    const envs = environments();
    const key = newKey();
    await envs.startBackground(key, { command: 'true' });
    assert.equal(
      await envs.process(key, { action: 'explode' }),
      JSON.stringify({ error: 'Unknown process action: explode. Use: list, poll, log, wait, kill, write, submit, close' }),
    );
    for (const action of ['poll', 'log', 'wait', 'kill', 'write', 'submit', 'close']) {
      assert.equal(await envs.process(key, { action }), JSON.stringify({ error: `session_id is required for ${action}` }));
    }
    const unknown = JSON.parse(await envs.process(key, { action: 'poll', sessionId: 'proc_000000000000' })) as Json;
    assert.equal(unknown.status, 'not_found');
    assert.match(String(unknown.error), /^No process with ID proc_000000000000\./);
  });

  it('answers for a task without an environment without creating one', async () => {
    const envs = environments();
    const key = newKey();
    assert.equal(await envs.process(key, { action: 'list' }), '{"processes":[]}');
    const unknown = JSON.parse(await envs.process(key, { action: 'kill', sessionId: 'proc_123456789abc' })) as Json;
    assert.equal(unknown.status, 'not_found');
    assert.equal(envs.has(key), false);
  });

  it('reports watch-pattern matches (also split across chunks) and completion', async () => {
    const events: ProcessEvent[] = [];
    const envs = environments({ onProcessEvent: (_key, event) => events.push(event) });
    const key = newKey();
    const { sessionId } = await envs.startBackground(key, {
      command: 'echo starting; printf "server REA"; sleep 0.2; printf "DY on 8080\\n"; sleep 0.2; exit 2',
      watchPatterns: ['READY'],
      notifyOnComplete: true,
    });
    await envs.process(key, { action: 'wait', sessionId, timeoutMs: 5000 });
    assert.deepEqual(events, [
      { kind: 'watch_match', sessionId, command: events[0]?.command, pattern: 'READY', line: 'server READY on 8080', hits: 1 },
      {
        kind: 'completed',
        sessionId,
        command: events[0]?.command,
        exitCode: 2,
        notifyOnComplete: true,
        outputTail: 'starting\nserver READY on 8080\n',
      },
    ]);
  });

  it('runs background commands under a PTY', async () => {
    const envs = environments();
    const key = newKey();
    const { sessionId } = await envs.startBackground(key, {
      command: 'stty -echo; [ -t 0 ] && echo tty; read -r l; echo "got $l"',
      pty: true,
    });
    await sleep(300);
    await envs.process(key, { action: 'submit', sessionId, data: 'line' });
    const done = JSON.parse(await envs.process(key, { action: 'wait', sessionId, timeoutMs: 5000 })) as Json;
    assert.deepEqual([done.exit_code, done.output], [0, 'tty\ngot line\n']);
  });

  it('release kills the task\'s background processes', async () => {
    const envs = environments();
    const key = newKey();
    const { pid } = await envs.startBackground(key, { command: 'sleep 1000' });
    assert.equal(isAlive(pid), true);
    assert.equal(await envs.release(key), true);
    assert.equal(isAlive(pid), false);
    assert.equal(envs.has(key), false);
  });
});

describe('ProcessRegistry limits', () => {
  it('keeps a rolling buffer and says how much was missed', async () => {
    const reg = await registry({ bufferChars: 1000 });
    const { sessionId } = await reg.start({ command: 'for i in $(seq 1 500); do echo "line-$i"; done' });
    await reg.handle({ action: 'wait', sessionId, timeoutMs: 5000 });
    const log = JSON.parse(await reg.handle({ action: 'log', sessionId, limit: 1000 })) as Json;
    const output = String(log.output);
    assert.ok(output.length <= 1000);
    assert.ok(output.endsWith('line-500'));
    assert.ok(Number(log.dropped_chars) > 0);
    const total = Array.from({ length: 500 }, (_, i) => `line-${i + 1}\n`).join('').length;
    assert.equal(log.dropped_chars, total - 1000);
    const polled = JSON.parse(await reg.handle({ action: 'poll', sessionId })) as Json;
    // wait already returned the kept part; nothing new since.
    assert.equal(polled.output, '');
  });

  it('caps processes per task: evicts the oldest finished, else refuses', async () => {
    const reg = await registry({ maxProcesses: 3 });
    const finished = await reg.start({ command: 'true' });
    await reg.handle({ action: 'wait', sessionId: finished.sessionId, timeoutMs: 5000 });
    await reg.start({ command: 'sleep 1000' });
    await reg.start({ command: 'sleep 1000' });
    const fourth = await reg.start({ command: 'sleep 1000' });
    assert.equal(reg.size, 3);
    const gone = JSON.parse(await reg.handle({ action: 'poll', sessionId: finished.sessionId })) as Json;
    assert.equal(gone.status, 'not_found');
    await assert.rejects(reg.start({ command: 'sleep 1000' }), (err: unknown) => {
      assert.ok(err instanceof ResourceExhaustedError);
      assert.match(err.message, /already has 3 background processes running/);
      return true;
    });
    await reg.handle({ action: 'kill', sessionId: fourth.sessionId });
    await reg.start({ command: 'true' });
    assert.equal(reg.size, 3);
  });

  it('forgets finished processes after the retention period', async () => {
    let nowMs = Date.now();
    const reg = await registry({ finishedTtlMs: 1_800_000, now: () => nowMs });
    const { sessionId } = await reg.start({ command: 'echo bye' });
    await reg.handle({ action: 'wait', sessionId, timeoutMs: 5000 });
    nowMs += 1_799_000;
    assert.equal((JSON.parse(await reg.handle({ action: 'poll', sessionId })) as Json).status, 'exited');
    nowMs += 2_000;
    assert.equal((JSON.parse(await reg.handle({ action: 'poll', sessionId })) as Json).status, 'not_found');
    assert.equal(await reg.handle({ action: 'list' }), '{"processes":[]}');
  });

  it('truncates what poll returns', async () => {
    const reg = await registry({ readOutputChars: 100 });
    const { sessionId } = await reg.start({ command: 'head -c 1000 /dev/zero | tr "\\0" x' });
    const waited = JSON.parse(await reg.handle({ action: 'wait', sessionId, timeoutMs: 5000 })) as Json;
    assert.equal(waited.output, `${'x'.repeat(40)}\n\n... [OUTPUT TRUNCATED - 900 chars omitted out of 1000 total] ...\n\n${'x'.repeat(60)}`);
  });
});

describe('idle reaping', () => {
  it('releases an idle task and tells the next call its environment is new', async () => {
    const envs = environments({ lifetimeSeconds: 0.3 });
    const key = newKey();
    await envs.exec(key, { command: 'export OLD=1', timeoutMs: 5000 });
    assert.equal(envs.has(key), true);
    await sleep(700);
    assert.equal(envs.has(key), false);
    const r = await envs.exec(key, { command: 'echo "${OLD-unset}"', timeoutMs: 5000 });
    assert.equal(r.output, 'unset\n');
    assert.equal(r.notices.length, 1);
    assert.match(r.notices[0] ?? '', /idle .* recreated/);
  });

  it('keeps a task with a live background process until it ends', async () => {
    const envs = environments({ lifetimeSeconds: 0.3 });
    const key = newKey();
    const { sessionId, pid } = await envs.startBackground(key, { command: 'sleep 1000' });
    await sleep(800);
    assert.equal(envs.has(key), true);
    assert.equal(isAlive(pid), true);
    await envs.process(key, { action: 'kill', sessionId });
    await sleep(800);
    assert.equal(envs.has(key), false);
    assert.equal(existsSync(path.join(root, 'state')), true);
  });
});
