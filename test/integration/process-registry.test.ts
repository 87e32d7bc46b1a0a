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
import { ShellStateRunner } from '../../services/executor/shell-state/shell-state-runner.js';
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

/** Waits until `check` holds (events arrive from output as it is read). */
async function eventually(check: () => boolean, what = 'the expected events'): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await sleep(25);
  assert.ok(check(), `never saw ${what}`);
}

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

/** Polls until the process's output preview contains `needle` (poll reads nothing away). */
async function previewUntil(envs: TaskEnvironments, key: TaskKey, sessionId: string, needle: string): Promise<Json> {
  for (let i = 0; i < 100; i++) {
    const polled = JSON.parse(await envs.process(key, { action: 'poll', sessionId })) as Json;
    if (String(polled.output_preview).includes(needle)) return polled;
    await sleep(50);
  }
  assert.fail(`${sessionId} never showed ${JSON.stringify(needle)}`);
}

const TIMEOUT_ADVICE =
  ' Poll again later or use terminal(background=true, notify_on_complete=true) next time for automatic notification.';

describe('process tool through TaskEnvironments', () => {
  it('starts in the task cwd with its variables, and saves no state', async () => {
    const envs = environments();
    const key = newKey();
    await envs.exec(key, { command: 'mkdir -p bg && cd bg && export SEEN=from-task', timeoutMs: 5000 });
    const command = 'pwd; echo "$SEEN"; cd /; export LEAK=1';
    const started = await envs.startBackground(key, { command });
    assert.match(started.sessionId, /^proc_[0-9a-f]{12}$/);
    assert.ok(started.pid > 0);
    const waited = JSON.parse(await envs.process(key, { action: 'wait', sessionId: started.sessionId, timeoutMs: 5000 })) as Json;
    assert.deepEqual(waited, {
      status: 'exited',
      command,
      exit_code: 0,
      completion_reason: 'exited',
      termination_source: '',
      output: `${path.join(workDir, 'bg')}\nfrom-task\n`,
    });
    const after = await envs.exec(key, { command: 'pwd; echo "${LEAK-unset}"', timeoutMs: 5000 });
    assert.equal(after.output, `${path.join(workDir, 'bg')}\nunset\n`);
  });

  it('poll shows the last 1,000 characters without consuming them, and how the process ended', async () => {
    const envs = environments();
    const key = newKey();
    const command = 'echo one; read -r go; head -c 1500 /dev/zero | tr "\\0" y; echo; exit 4';
    const { sessionId, pid } = await envs.startBackground(key, { command, pipeStdin: true });
    await previewUntil(envs, key, sessionId, 'one');
    const first = JSON.parse(await envs.process(key, { action: 'poll', sessionId })) as Json;
    assert.deepEqual(Object.keys(first), ['session_id', 'command', 'status', 'pid', 'uptime_seconds', 'output_preview']);
    assert.deepEqual([first.session_id, first.command, first.status, first.pid, first.output_preview], [
      sessionId,
      command,
      'running',
      pid,
      'one\n',
    ]);
    // Read-only: a second poll shows the same output again.
    const second = JSON.parse(await envs.process(key, { action: 'poll', sessionId })) as Json;
    assert.equal(second.output_preview, 'one\n');
    await envs.process(key, { action: 'submit', sessionId, data: 'go' });
    await envs.process(key, { action: 'wait', sessionId, timeoutMs: 5000 });
    const done = JSON.parse(await envs.process(key, { action: 'poll', sessionId })) as Json;
    assert.deepEqual(
      [done.status, done.exit_code, done.completion_reason, done.termination_source, done.output_preview],
      ['exited', 4, 'exited', '', `${'y'.repeat(999)}\n`],
    );
    assert.deepEqual(Object.keys(done).slice(-3), ['exit_code', 'completion_reason', 'termination_source']);
  });

  it('log pages over lines like a Python slice', async () => {
    const envs = environments();
    const key = newKey();
    const command = 'seq 1 500';
    const { sessionId } = await envs.startBackground(key, { command });
    await envs.process(key, { action: 'wait', sessionId, timeoutMs: 5000 });
    const tail = JSON.parse(await envs.process(key, { action: 'log', sessionId })) as Json;
    assert.deepEqual(Object.keys(tail), ['session_id', 'command', 'status', 'output', 'total_lines', 'showing']);
    assert.deepEqual([tail.session_id, tail.command, tail.status, tail.total_lines, tail.showing], [
      sessionId,
      command,
      'exited',
      500,
      '200 lines',
    ]);
    assert.ok(String(tail.output).startsWith('301\n') && String(tail.output).endsWith('\n500'));
    const page = JSON.parse(await envs.process(key, { action: 'log', sessionId, offset: 0, limit: 3 })) as Json;
    assert.deepEqual([page.output, page.showing], ['1\n2\n3', '3 lines']);
    const last = JSON.parse(await envs.process(key, { action: 'log', sessionId, limit: 2 })) as Json;
    assert.equal(last.output, '499\n500');
    // lines[-3:-3+1000]: three from the end.
    const fromEnd = JSON.parse(await envs.process(key, { action: 'log', sessionId, offset: -3, limit: 1000 })) as Json;
    assert.equal(fromEnd.output, '498\n499\n500');
    const past = JSON.parse(await envs.process(key, { action: 'log', sessionId, offset: 600 })) as Json;
    assert.deepEqual([past.output, past.showing], ['', '0 lines']);
  });

  it('log counts lines the way Python splitlines does', async () => {
    const envs = environments();
    const key = newKey();
    const { sessionId } = await envs.startBackground(key, { command: 'printf "a\\rb\\r\\nc\\n\\nd"' });
    await envs.process(key, { action: 'wait', sessionId, timeoutMs: 5000 });
    const log = JSON.parse(await envs.process(key, { action: 'log', sessionId })) as Json;
    assert.deepEqual([log.output, log.total_lines], ['a\nb\nc\n\nd', 5]);
  });

  it('starts without a PTY at end of input: cat finishes at once, and stdin actions say there is none', async () => {
    const envs = environments();
    const key = newKey();
    const { sessionId } = await envs.startBackground(key, { command: 'wc -l; cat; echo cat-ended; sleep 1000' });
    await previewUntil(envs, key, sessionId, 'cat-ended');
    const polled = JSON.parse(await envs.process(key, { action: 'poll', sessionId })) as Json;
    assert.deepEqual([polled.status, polled.output_preview], ['running', '0\ncat-ended\n']);
    for (const action of ['write', 'submit', 'close']) {
      const refused = JSON.parse(await envs.process(key, { action, sessionId, data: 'x' })) as Json;
      assert.deepEqual(refused, { status: 'error', error: 'Process stdin not available (non-local backend or stdin closed)' }, action);
    }
    await envs.process(key, { action: 'kill', sessionId });
    const late = JSON.parse(await envs.process(key, { action: 'write', sessionId, data: 'x' })) as Json;
    assert.deepEqual(late, { status: 'already_exited', error: 'Process has already finished' });
  });

  it('write, submit and close drive stdin of cat when asked for a stdin pipe', async () => {
    const envs = environments();
    const key = newKey();
    const { sessionId } = await envs.startBackground(key, { command: 'cat; echo cat-ended', pipeStdin: true });
    const written = JSON.parse(await envs.process(key, { action: 'write', sessionId, data: 'abc' })) as Json;
    assert.deepEqual(written, { status: 'ok', bytes_written: 3 });
    // Characters, not UTF-8 bytes: "déf\n" is 4.
    const submitted = JSON.parse(await envs.process(key, { action: 'submit', sessionId, data: 'déf' })) as Json;
    assert.deepEqual(submitted, { status: 'ok', bytes_written: 4 });
    await previewUntil(envs, key, sessionId, 'abcdéf\n');
    const closed = JSON.parse(await envs.process(key, { action: 'close', sessionId })) as Json;
    assert.deepEqual(closed, { status: 'ok', message: 'stdin closed' });
    const done = JSON.parse(await envs.process(key, { action: 'wait', sessionId, timeoutMs: 5000 })) as Json;
    assert.deepEqual([done.status, done.exit_code, done.output], ['exited', 0, 'abcdéf\ncat-ended\n']);
    for (const action of ['write', 'submit', 'close']) {
      const late = JSON.parse(await envs.process(key, { action, sessionId, data: 'x' })) as Json;
      assert.deepEqual(late, { status: 'already_exited', error: 'Process has already finished' });
    }
  });

  it('refuses to write after stdin was closed', async () => {
    const envs = environments();
    const key = newKey();
    const { sessionId } = await envs.startBackground(key, { command: 'cat; echo input-ended; sleep 1000', pipeStdin: true });
    await envs.process(key, { action: 'close', sessionId });
    await previewUntil(envs, key, sessionId, 'input-ended');
    const refused = JSON.parse(await envs.process(key, { action: 'write', sessionId, data: 'x' })) as Json;
    assert.deepEqual(refused, { status: 'error', error: 'Process stdin not available (non-local backend or stdin closed)' });
    // Closing again is harmless, as upstream's close of a closed pipe.
    const again = JSON.parse(await envs.process(key, { action: 'close', sessionId })) as Json;
    assert.deepEqual(again, { status: 'ok', message: 'stdin closed' });
    await envs.process(key, { action: 'kill', sessionId });
  });

  it('kill stops the whole group and answers with how it ended and the output', async () => {
    const envs = environments();
    const key = newKey();
    const command = 'sleep 1000 & echo child:$!; sleep 1000';
    const { sessionId, pid } = await envs.startBackground(key, { command });
    const polled = await previewUntil(envs, key, sessionId, '\n');
    const child = Number(/child:(\d+)/.exec(String(polled.output_preview))?.[1]);
    assert.ok(child > 0);
    const killed = JSON.parse(await envs.process(key, { action: 'kill', sessionId })) as Json;
    assert.deepEqual(killed, {
      status: 'killed',
      session_id: sessionId,
      completion_reason: 'killed',
      termination_source: 'process.kill',
      output: `child:${child}\n`,
    });
    assert.equal(isAlive(pid), false);
    assert.equal(isAlive(child), false);
    const again = JSON.parse(await envs.process(key, { action: 'kill', sessionId })) as Json;
    assert.deepEqual(again, {
      status: 'already_exited',
      command,
      exit_code: -15,
      completion_reason: 'killed',
      termination_source: 'process.kill',
      output: `child:${child}\n`,
    });
    const polledAfter = JSON.parse(await envs.process(key, { action: 'poll', sessionId })) as Json;
    assert.deepEqual([polledAfter.status, polledAfter.exit_code, polledAfter.completion_reason], ['exited', -15, 'killed']);
  });

  it('wait times out with the process still running, clamps long waits and is interruptible', async () => {
    // A frozen clock keeps the uptime in the note at 0 s.
    const frozen = Date.now();
    const envs = environments({ processes: { maxWaitMs: 300, now: () => frozen } });
    const key = newKey();
    const command = 'echo waiting; sleep 1000';
    const { sessionId } = await envs.startBackground(key, { command });
    await previewUntil(envs, key, sessionId, 'waiting');
    const timedOut = JSON.parse(await envs.process(key, { action: 'wait', sessionId, timeoutMs: 200 })) as Json;
    const note = (window: string) =>
      `Wait window of ${window}s elapsed — the process is still running. This is not an error. Uptime: 0s.${TIMEOUT_ADVICE}`;
    assert.deepEqual(timedOut, {
      status: 'timeout',
      command,
      output: 'waiting\n',
      process_running: true,
      timeout_note: note('0.2'),
    });
    const clamped = JSON.parse(await envs.process(key, { action: 'wait', sessionId, timeoutMs: 60_000 })) as Json;
    assert.equal(clamped.status, 'timeout');
    assert.equal(clamped.timeout_note, `Requested wait of 60s was clamped to configured limit of 0.3s. ${note('0.3')}`);
    const zero = JSON.parse(await envs.process(key, { action: 'wait', sessionId, timeoutMs: -2000 })) as Json;
    assert.deepEqual(zero, { status: 'error', error: 'timeout must be positive (got -2)' });

    const notified = await envs.startBackground(key, { command: 'sleep 1000', notifyOnComplete: true });
    const told = JSON.parse(await envs.process(key, { action: 'wait', sessionId: notified.sessionId, timeoutMs: 100 })) as Json;
    assert.equal(
      told.timeout_note,
      'Wait window of 0.1s elapsed — the process is still running. This is not an error. Uptime: 0s.' +
        ' notify_on_complete is set: you will be notified on exit — do more work instead of waiting again.',
    );

    const envs2 = environments();
    const key2 = newKey();
    const second = await envs2.startBackground(key2, { command: 'sleep 1000' });
    const pending = envs2.process(key2, { action: 'wait', sessionId: second.sessionId, timeoutMs: 60_000 });
    await sleep(100);
    assert.equal(envs2.interrupt(key2), 1);
    const interrupted = JSON.parse(await pending) as Json;
    assert.deepEqual(interrupted, {
      status: 'interrupted',
      command: 'sleep 1000',
      output: '',
      note: 'User sent a new message -- wait interrupted',
    });
    // The process itself keeps running after an interrupted wait.
    const polled = JSON.parse(await envs2.process(key2, { action: 'poll', sessionId: second.sessionId })) as Json;
    assert.equal(polled.status, 'running');
  });

  it('a clamped wait that sees the exit keeps the clamp note', async () => {
    const envs = environments({ processes: { maxWaitMs: 5000 } });
    const key = newKey();
    const { sessionId } = await envs.startBackground(key, { command: 'echo quick' });
    const waited = JSON.parse(await envs.process(key, { action: 'wait', sessionId, timeoutMs: 60_000 })) as Json;
    assert.deepEqual(waited, {
      status: 'exited',
      command: 'echo quick',
      exit_code: 0,
      completion_reason: 'exited',
      termination_source: '',
      output: 'quick\n',
      timeout_note: 'Requested wait of 60s was clamped to configured limit of 5s',
    });
  });

  it('list shows running and finished processes with upstream keys', async () => {
    let nowMs = 1_767_225_600_250;
    const envs = environments({ processes: { now: () => nowMs } });
    const key = newKey();
    const done = await envs.startBackground(key, { command: 'echo finished' });
    await envs.process(key, { action: 'wait', sessionId: done.sessionId, timeoutMs: 5000 });
    nowMs += 1000;
    const long = `sleep 1000 # ${'x'.repeat(300)}`;
    const running = await envs.startBackground(key, {
      command: long,
      workdir: '/tmp',
      notifyOnComplete: true,
      watchPatterns: ['READY'],
      persistOnRelease: true,
    });
    const listed = JSON.parse(await envs.process(key, { action: 'list' })) as { processes: Json[] };
    assert.equal(listed.processes.length, 2);
    const [first, second] = listed.processes;
    const base = ['session_id', 'command', 'cwd', 'pid', 'owner_task_id', 'started_at', 'uptime_seconds', 'status', 'output_preview'];
    assert.deepEqual(Object.keys(first ?? {}), [...base, 'exit_code', 'exited_at', 'completion_reason']);
    assert.deepEqual(
      [first?.session_id, first?.status, first?.exit_code, first?.output_preview, first?.cwd, first?.owner_task_id],
      [done.sessionId, 'exited', 0, 'finished\n', workDir, key.taskId],
    );
    // Seconds since the epoch, with the fraction, as upstream's time.time().
    assert.deepEqual([first?.exited_at, first?.completion_reason], [1_767_225_600.25, 'exited']);
    assert.match(String(first?.started_at), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$/);
    assert.deepEqual(Object.keys(second ?? {}), [...base, 'watch_patterns', 'watch_hit', 'notify_on_complete', 'persist_on_release']);
    assert.equal(second?.persist_on_release, true);
    assert.deepEqual(
      [second?.session_id, second?.status, second?.cwd, second?.command, second?.watch_patterns, second?.watch_hit],
      [running.sessionId, 'running', '/tmp', long.slice(0, 200), ['READY'], false],
    );
  });

  it('reports upstream error strings', async () => {
    const envs = environments();
    const key = newKey();
    await envs.startBackground(key, { command: 'true' });
    assert.equal(
      await envs.process(key, { action: 'explode' }),
      JSON.stringify({ error: 'Unknown process action: explode. Use: list, poll, log, wait, kill, write, submit, close, handoff' }),
    );
    for (const action of ['poll', 'log', 'wait', 'kill', 'write', 'submit', 'close', 'handoff']) {
      assert.equal(await envs.process(key, { action }), JSON.stringify({ error: `session_id is required for ${action}` }));
    }
    assert.equal(
      await envs.process(key, { action: 'handoff', sessionId: 'proc_000000000000', data: 'a server' }),
      JSON.stringify({ error: 'handoff is only available to a running subagent with a live parent; you are not one.' }),
    );
    assert.equal(
      await envs.process(key, { action: 'poll', sessionId: 'proc_000000000000' }),
      JSON.stringify({ status: 'not_found', error: 'No process with ID proc_000000000000' }),
    );
  });

  it('answers for a task without an environment without creating one', async () => {
    const envs = environments();
    const key = newKey();
    assert.equal(await envs.process(key, { action: 'list' }), '{"processes":[]}');
    const unknown = JSON.parse(await envs.process(key, { action: 'kill', sessionId: 'proc_123456789abc' })) as Json;
    assert.equal(unknown.status, 'not_found');
    assert.equal(envs.has(key), false);
  });

  it('reports watch-pattern matches (also split across chunks) and the completion in upstream\'s shapes', async () => {
    const events: ProcessEvent[] = [];
    const nowMs = 1_767_225_600_000;
    const envs = environments({ onProcessEvent: (_key, event) => events.push(event), processes: { now: () => nowMs } });
    const key = newKey();
    const command = 'echo starting; printf "server REA"; sleep 0.2; printf "DY on 8080\\n"; sleep 0.2; exit 2';
    const { sessionId } = await envs.startBackground(key, { command, watchPatterns: ['READY'], notifyOnComplete: true });
    await envs.process(key, { action: 'poll', sessionId });
    await eventually(() => events.length === 2);
    const base = { session_id: sessionId, task_id: key.taskId, owner_task_id: key.taskId, command };
    assert.deepEqual(events, [
      { ...base, type: 'watch_match', pattern: 'READY', output: 'server READY on 8080', suppressed: 0 },
      {
        ...base,
        type: 'completion',
        exit_code: 2,
        completion_reason: 'exited',
        termination_source: '',
        output: 'starting\nserver READY on 8080\n',
        started_at: 1_767_225_600,
      },
    ]);
  });

  it('sends a completion only with notify_on_complete, and not when the model took the end itself', async () => {
    const events: ProcessEvent[] = [];
    const envs = environments({ onProcessEvent: (_key, event) => events.push(event) });
    const key = newKey();
    const silent = await envs.startBackground(key, { command: 'echo quiet' });
    await envs.process(key, { action: 'wait', sessionId: silent.sessionId, timeoutMs: 5000 });
    const killed = await envs.startBackground(key, { command: 'sleep 1000', notifyOnComplete: true });
    await envs.process(key, { action: 'kill', sessionId: killed.sessionId });
    const waited = await envs.startBackground(key, { command: 'sleep 0.3; echo waited-for', notifyOnComplete: true });
    await envs.process(key, { action: 'wait', sessionId: waited.sessionId, timeoutMs: 5000 });
    const cut = await envs.startBackground(key, { command: 'head -c 2500 /dev/zero | tr "\\0" z', notifyOnComplete: true });
    await eventually(() => events.length === 1);
    assert.deepEqual(
      events.map((e) => [e.type, e.session_id]),
      [['completion', cut.sessionId]],
    );
    const event = events[0] as Extract<ProcessEvent, { type: 'completion' }>;
    assert.deepEqual([event.output, event.output_cut], ['z'.repeat(2000), 500]);
    assert.deepEqual(Object.keys(event).slice(-3), ['output', 'output_cut', 'started_at']);
    // Release kills what still runs, and that end is not the model's: it is told.
    const left = await envs.startBackground(key, { command: 'sleep 1000', notifyOnComplete: true });
    await envs.release(key);
    assert.deepEqual(
      events.slice(1).map((e) => [e.type, e.session_id, (e as { completion_reason?: string }).completion_reason]),
      [['completion', left.sessionId, 'killed']],
    );
  });

  it('rate-limits watch matches, disables watching after three strike windows and promotes to a completion', async () => {
    const events: ProcessEvent[] = [];
    let nowMs = 1_767_225_600_000;
    const envs = environments({ onProcessEvent: (_key, event) => events.push(event), processes: { now: () => nowMs } });
    const key = newKey();
    const { sessionId } = await envs.startBackground(key, {
      command: 'while IFS= read -r l; do printf "%s\\n" "$l"; done; echo done',
      pipeStdin: true,
      watchPatterns: ['hit'],
    });
    const say = async (text: string, advanceMs: number) => {
      nowMs += advanceMs;
      await envs.process(key, { action: 'submit', sessionId, data: text });
      await previewUntil(envs, key, sessionId, `${text}\n`);
    };
    await say('hit 1', 0); // delivered
    await say('hit 2', 1000); // strike 1
    await say('hit 3', 15_000); // delivered, 1 suppressed
    await say('hit 4', 1000); // strike 2
    await say('hit 5', 15_000); // delivered
    await say('hit 6', 1000); // strike 3: disabled
    await say('hit 7', 60_000); // not watched any more
    const listed = JSON.parse(await envs.process(key, { action: 'list' })) as { processes: Json[] };
    assert.deepEqual(
      [listed.processes[0]?.watch_patterns, listed.processes[0]?.notify_on_complete],
      [undefined, true],
    );
    await envs.process(key, { action: 'close', sessionId });
    await eventually(() => events.some((e) => e.type === 'completion'));
    assert.deepEqual(
      events.map((e) => [e.type, (e as { output?: string }).output, (e as { suppressed?: number }).suppressed]),
      [
        ['watch_match', 'hit 1', 0],
        ['watch_match', 'hit 3', 1],
        ['watch_match', 'hit 5', 1],
        ['watch_disabled', undefined, 1],
        ['completion', 'hit 1\nhit 2\nhit 3\nhit 4\nhit 5\nhit 6\nhit 7\ndone\n', undefined],
      ],
    );
    assert.equal(
      (events[3] as { message?: string }).message,
      `Watch patterns disabled for process ${sessionId} — 3 consecutive rate-limit windows triggered (min spacing 15s). ` +
        "Falling back to notify_on_complete semantics; you'll get exactly one notification when the process exits.",
    );
  });

  it('one tenant\'s flood of watch matches trips its breaker, tells its watching tasks, and leaves other tenants alone', async () => {
    const received: Array<{ task: string; event: ProcessEvent }> = [];
    let nowMs = 1_767_225_600_000;
    const envs = environments({
      onProcessEvent: (key, event) => received.push({ task: `${key.tenant}/${key.taskId}`, event }),
      processes: { now: () => nowMs },
    });
    const echo = 'while IFS= read -r l; do printf "%s\\n" "$l"; done';
    const loud = [newKey(), newKey()];
    const quiet = newKey();
    const other = { tenant: 'other-tenant', taskId: 'other-task' };
    const start = async (key: TaskKey) => (await envs.startBackground(key, { command: echo, pipeStdin: true, watchPatterns: ['hit'] })).sessionId;
    const ids = [await start(loud[0]!), await start(loud[1]!), await start(other)];
    await start(quiet);
    // 16 processes' worth of first matches in one 10 s window: 8 each from two tasks (a new process per match).
    const flood = async (key: TaskKey, n: number) => {
      for (let i = 0; i < n; i++) {
        const id = i === 0 ? ids[loud.indexOf(key)]! : await start(key);
        await envs.process(key, { action: 'submit', sessionId: id, data: `hit ${i}` });
        await previewUntil(envs, key, id, `hit ${i}`);
      }
    };
    await flood(loud[0]!, 8);
    await flood(loud[1]!, 8);
    const tripped = received.filter((r) => r.event.type === 'watch_overflow_tripped');
    // The match that tripped it is dropped; the summary reaches every task of the tenant that watches.
    assert.deepEqual(tripped.map((r) => r.task).sort(), [loud[0], loud[1], quiet].map((k) => `${k!.tenant}/${k!.taskId}`).sort());
    assert.equal(received.filter((r) => r.event.type === 'watch_match').length, 15);
    // Another tenant's match in the same second goes through.
    await envs.process(other, { action: 'submit', sessionId: ids[2]!, data: 'hit other' });
    await eventually(() => received.some((r) => r.task === 'other-tenant/other-task' && r.event.type === 'watch_match'));
    // After the cooldown the tenant's next match is let through with the summary of what was dropped.
    nowMs += 30_000;
    const later = await start(loud[0]!);
    await envs.process(loud[0]!, { action: 'submit', sessionId: later, data: 'hit late' });
    await eventually(() => received.some((r) => r.event.type === 'watch_overflow_released'));
    const released = received.find((r) => r.event.type === 'watch_overflow_released')?.event;
    assert.deepEqual(released, {
      session_id: '',
      command: '',
      type: 'watch_overflow_released',
      suppressed: 1,
      message: 'Watch-pattern notifications resumed. 1 match event(s) were suppressed during the flood.',
    });
  });

  it('sends heartbeats with the output since the last one, skipping ticks with nothing new', async () => {
    const events: ProcessEvent[] = [];
    let nowMs = 1_767_225_600_000;
    const envs = environments({
      onProcessEvent: (_key, event) => events.push(event),
      processes: { now: () => nowMs, heartbeatTickMs: 20 },
    });
    const key = newKey();
    const { sessionId } = await envs.startBackground(key, {
      command: 'echo first; while IFS= read -r l; do printf "%s\\n" "$l"; done',
      pipeStdin: true,
      notifyOnComplete: true,
      heartbeatSeconds: 5,
    });
    await previewUntil(envs, key, sessionId, 'first');
    nowMs += 59_000;
    await sleep(100);
    assert.equal(events.length, 0, 'raised to 60 s: not due yet');
    nowMs += 1000;
    await eventually(() => events.length === 1);
    nowMs += 61_000;
    await sleep(100); // nothing new: skipped
    await envs.process(key, { action: 'submit', sessionId, data: 'x'.repeat(2100) });
    await previewUntil(envs, key, sessionId, 'xxx\n');
    nowMs += 60_000;
    await eventually(() => events.length === 2);
    const base = { session_id: sessionId, task_id: key.taskId, owner_task_id: key.taskId };
    assert.deepEqual(events[0], {
      ...base,
      command: events[0]?.command,
      type: 'heartbeat',
      seq: 1,
      interval: 60,
      elapsed: 60,
      output: 'first\n',
      started_at: 1_767_225_600,
    });
    const second = events[1] as Extract<ProcessEvent, { type: 'heartbeat' }>;
    assert.deepEqual(
      [second.seq, second.elapsed, second.output],
      [2, 181, `...(101 earlier characters omitted)\n${'x'.repeat(1999)}\n`],
    );
    await envs.process(key, { action: 'kill', sessionId });
  });

  it('runs background commands under a PTY', async () => {
    const envs = environments();
    const key = newKey();
    const { sessionId } = await envs.startBackground(key, {
      command: 'stty -echo; [ -t 0 ] && echo tty; read -r l; echo "got $l"',
      pty: true,
    });
    await previewUntil(envs, key, sessionId, 'tty');
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

describe('session id prefixes', () => {
  it('finds a process by a unique prefix of 4 or more characters, with or without proc_', async () => {
    const suffixes = ['4dae56ca81f6', '4dbe00000001', '9f0e12345678'];
    const reg = await registry({ idSuffix: () => suffixes.shift() ?? 'ffffffffffff' });
    const a = await reg.start({ command: 'sleep 1000' });
    const b = await reg.start({ command: 'sleep 1000' });
    await reg.start({ command: 'sleep 1000' });
    assert.deepEqual([a.sessionId, b.sessionId], ['proc_4dae56ca81f6', 'proc_4dbe00000001']);
    const pollId = async (sessionId: string) => JSON.parse(await reg.handle({ action: 'poll', sessionId })) as Json;
    for (const id of ['proc_4dae56ca81f6', 'proc_4dae', '4dae', '4dae56ca81f6', ' 4dae ']) {
      assert.equal((await pollId(id)).session_id, a.sessionId, id);
    }
    assert.equal((await pollId('4dbe')).session_id, b.sessionId);
    // Shorter than 4 after proc_, or shared by two processes: not found, never a guess.
    for (const id of ['4da', 'proc_4da', '4d', 'proc_', 'proc_4dae56ca81f7', '4dae56ca81f6x']) {
      assert.deepEqual(await pollId(id), { status: 'not_found', error: `No process with ID ${id}` }, id);
    }
    suffixes.push('4dae99999999');
    const twin = await reg.start({ command: 'sleep 1000' });
    assert.deepEqual(await pollId('4dae'), { status: 'not_found', error: 'No process with ID 4dae' });
    assert.equal((await pollId('4dae9')).session_id, twin.sessionId);
    // Every action resolves the same way.
    const killed = JSON.parse(await reg.handle({ action: 'kill', sessionId: '4dae5' })) as Json;
    assert.deepEqual([killed.status, killed.session_id], ['killed', a.sessionId]);
  });
});

describe('ProcessRegistry limits', () => {
  it('keeps a rolling buffer', async () => {
    const reg = await registry({ bufferChars: 1000 });
    const { sessionId } = await reg.start({ command: 'for i in $(seq 1 500); do echo "line-$i"; done' });
    await reg.handle({ action: 'wait', sessionId, timeoutMs: 5000 });
    const log = JSON.parse(await reg.handle({ action: 'log', sessionId, limit: 1000 })) as Json;
    const output = String(log.output);
    assert.ok(output.length <= 1000);
    assert.ok(output.endsWith('line-500'));
    assert.ok(!output.includes('line-1\n'));
  });

  it('answers poll, wait and kill with tails of 1,000 and 2,000 characters', async () => {
    const reg = await registry();
    const { sessionId } = await reg.start({ command: 'for i in $(seq 1 1000); do printf "%04d," $i; done; sleep 1000' });
    const body = Array.from({ length: 1000 }, (_, i) => `${String(i + 1).padStart(4, '0')},`).join('');
    for (let i = 0; i < 100; i++) {
      const polled = JSON.parse(await reg.handle({ action: 'poll', sessionId })) as Json;
      if (String(polled.output_preview).endsWith('1000,')) break;
      await sleep(50);
    }
    const polled = JSON.parse(await reg.handle({ action: 'poll', sessionId })) as Json;
    assert.equal(polled.output_preview, body.slice(-1000));
    const waited = JSON.parse(await reg.handle({ action: 'wait', sessionId, timeoutMs: 50 })) as Json;
    assert.equal(waited.output, body.slice(-1000));
    const killed = JSON.parse(await reg.handle({ action: 'kill', sessionId })) as Json;
    assert.equal(killed.output, body.slice(-2000));
    // How much came before the tail, so the reader knows it is not the whole output.
    assert.deepEqual(Object.keys(killed).slice(-2), ['output', 'output_cut']);
    assert.equal(killed.output_cut, 3000);
    const exited = JSON.parse(await reg.handle({ action: 'wait', sessionId })) as Json;
    assert.equal(exited.output, body.slice(-2000));
    assert.deepEqual(Object.keys(exited).slice(-2), ['output', 'output_cut']);
    assert.equal(exited.output_cut, 3000);
    const listed = JSON.parse(await reg.handle({ action: 'list' })) as { processes: Json[] };
    assert.equal(listed.processes[0]?.output_preview, body.slice(-200));
  });

  it('counts characters as Python does: a character outside the BMP is one, never split', async () => {
    const reg = await registry();
    const command = `: ${'x'.repeat(197)}😀 and more; printf "\\360\\237\\230\\200"; head -c 999 /dev/zero | tr "\\0" a; sleep 1000`;
    const { sessionId } = await reg.start({ command });
    const expected = `😀${'a'.repeat(999)}`;
    let preview = '';
    for (let i = 0; i < 100 && preview !== expected; i++) {
      preview = String((JSON.parse(await reg.handle({ action: 'poll', sessionId })) as Json).output_preview);
      if (preview !== expected) await sleep(50);
    }
    assert.equal(preview, expected);
    const listed = JSON.parse(await reg.handle({ action: 'list' })) as { processes: Json[] };
    assert.equal(listed.processes[0]?.command, `: ${'x'.repeat(197)}😀`);
  });

  it('records a release as a kill by kill_all', async () => {
    const reg = await registry();
    const { sessionId } = await reg.start({ command: 'sleep 1000' });
    await reg.closeAll();
    const polled = JSON.parse(await reg.handle({ action: 'poll', sessionId })) as Json;
    assert.deepEqual([polled.status, polled.exit_code, polled.completion_reason, polled.termination_source], [
      'exited',
      -15,
      'killed',
      'kill_all',
    ]);
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
