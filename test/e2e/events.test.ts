/**
 * End to end: background-process events reach clients through a real
 * `berth serve` — notify_on_complete completions and watch-pattern matches
 * (with upstream's 15 s per-process limit) on the per-task stream and on the
 * Session stream, with upstream's texts; reconnection with the last id seen;
 * tenancy (another tenant's task answers as an unknown one).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { LoggingMessageNotificationSchema, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { BerthClient, type BackgroundEvent, type TaskEventStream } from '../../services/client/index.js';
import type { TaskEventsResponse } from '../../services/gen/berth/v1/dispatcher.js';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { dockerUnavailableReason, removeLabelled, runTaskIds } from '../support/docker-fixtures.js';
import { BERTH_BIN, REPO_ROOT, startServe, type ServeProcess } from '../support/serve-process.js';
import { startTwoTenants, type TwoTenants } from '../support/two-tenants.js';

/** The next `n` events of a stream (the iterator stays usable). */
async function take(events: AsyncIterator<BackgroundEvent>, n: number): Promise<BackgroundEvent[]> {
  const out: BackgroundEvent[] = [];
  while (out.length < n) {
    const next = await events.next();
    if (next.done) throw new Error(`the event stream ended after ${out.length} of ${n} events`);
    out.push(next.value);
  }
  return out;
}

async function startBackground(task: ReturnType<BerthClient['task']>, command: string, extra: Record<string, unknown>) {
  const r = await task.call<{ session_id: string; error: unknown }>('terminal', { command, background: true, ...extra });
  assert.equal(r.error, null, JSON.stringify(r));
  return r.session_id;
}

async function waitExited(task: ReturnType<BerthClient['task']>, sessionId: string): Promise<void> {
  for (;;) {
    const r = await task.call<{ status: string }>('process_manage', { action: 'poll', session_id: sessionId });
    if (r.status === 'exited') return;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

describe('background-process events through berth serve (local backend)', () => {
  let tenants: TwoTenants;
  let alpha: BerthClient;

  before(async () => {
    tenants = await startTwoTenants({ backend: 'local' });
    alpha = new BerthClient(tenants.serve.address, { apiKey: tenants.keys.alpha });
  });

  after(async () => {
    alpha.close();
    await tenants.stop();
  });

  test('a notify_on_complete completion reaches client.events() with upstream text; a reconnection gets what it missed', { timeout: 120_000 }, async () => {
    const task = alpha.task('ev-complete');
    const stream = alpha.events('ev-complete');
    const iterator = stream[Symbol.asyncIterator]();
    const first = take(iterator, 1);
    assert.deepEqual(await stream.ready, { lastId: '' });

    const sid = await startBackground(task, 'echo built; exit 3', { notify_on_complete: true });
    const [completion] = await first;
    assert.equal(completion!.type, 'completion');
    assert.equal(completion!.taskId, 'ev-complete');
    assert.equal(completion!.event.session_id, sid);
    assert.equal(completion!.event.exit_code, 3);
    assert.equal(
      completion!.text,
      `[IMPORTANT: Background process ${sid} exited (exit code 3).\nCommand: echo built; exit 3\nOutput:\nbuilt\n]`,
    );
    const seen = completion!.id;
    stream.close();
    assert.equal((await iterator.next()).done, true, 'close ends the iteration');

    // While nobody listens, two more complete.
    const missed = [
      await startBackground(task, 'echo two', { notify_on_complete: true }),
      await startBackground(task, 'echo three', { notify_on_complete: true }),
    ];
    for (const s of missed) await waitExited(task, s);

    using resumed = alpha.events('ev-complete', { after: seen });
    const got = await take(resumed[Symbol.asyncIterator](), 2);
    assert.deepEqual(got.map((e) => e.event.session_id).sort(), [...missed].sort());
    assert.ok(got.every((e) => e.type === 'completion' && e.id !== seen));
    assert.equal(resumed.lastId, got[1]!.id);

    // Without `after`: every event kept, oldest first.
    using all = alpha.events('ev-complete');
    const history = await take(all[Symbol.asyncIterator](), 3);
    assert.deepEqual(history.map((e) => e.id), [seen, got[0]!.id, got[1]!.id]);
    assert.equal((await all.ready).lastId, got[1]!.id);
  });

  test('an id the task never gave (a log that is gone) starts with an events_dropped marker', { timeout: 120_000 }, async () => {
    const task = alpha.task('ev-stale');
    const sid = await startBackground(task, 'echo once', { notify_on_complete: true });
    await waitExited(task, sid);
    using stream = alpha.events('ev-stale', { after: '0badc0de-41' });
    const [marker, completion] = await take(stream[Symbol.asyncIterator](), 2);
    assert.equal(marker!.type, 'events_dropped');
    assert.equal(marker!.event.count, null);
    assert.match(marker!.text, /^\[IMPORTANT: Background-process events of task ev-stale may have been missed: .*process\(action="list"\)\.\]$/);
    assert.equal(completion!.type, 'completion');
    assert.equal(completion!.event.session_id, sid);

    const bad = alpha.events('ev-stale', { after: 'not an id' });
    await assert.rejects(bad.ready, /INVALID_ARGUMENT: after 'not an id' is not an event id/);
  });

  test('watch_patterns: a match at once, the next only after the 15 s window, with the suppressed count', { timeout: 120_000 }, async () => {
    const task = alpha.task('ev-watch');
    using stream = alpha.events('ev-watch');
    const iterator = stream[Symbol.asyncIterator]();
    const command = 'for i in $(seq 1 17); do echo "line $i READY"; sleep 1; done';
    const sid = await startBackground(task, command, { watch_patterns: ['READY'] });
    const [firstMatch] = await take(iterator, 1);
    assert.equal(firstMatch!.type, 'watch_match');
    assert.equal(
      firstMatch!.text,
      `[IMPORTANT: Background process ${sid} matched watch pattern "READY".\nCommand: ${command}\nMatched output:\nline 1 READY]`,
    );
    await waitExited(task, sid);
    // 17 lines over ~17 s: the second delivery is the first line after the window; the ones between were dropped.
    const [second] = await take(iterator, 1);
    assert.equal(second!.type, 'watch_match');
    const line = Number(/^line (\d+) READY$/.exec(String(second!.event.output))?.[1]);
    assert.ok(line > 2 && line <= 17, String(second!.event.output));
    assert.equal(second!.event.suppressed, line - 2);
    assert.ok(second!.text.endsWith(`\n(${line - 2} earlier matches were suppressed by rate limit)]`), second!.text);
    // Nothing else came: the lines after it fell in the next window, and the process was not promoted to notify.
    assert.equal((await all(alpha, 'ev-watch')).length, 2);
  });

  test("another tenant subscribing to a task's id gets the answer of an unknown task, and none of its events", { timeout: 120_000 }, async () => {
    const { b } = tenants;
    const taskId = 'ev-tenancy';
    const sid = await startBackground(alpha.task(taskId), 'echo private', { notify_on_complete: true });
    await waitExited(alpha.task(taskId), sid);
    const [aEvent] = await all(alpha, taskId);
    const answer = async (client: typeof b, id: string, after: string) => {
      const controller = new AbortController();
      const seen: TaskEventsResponse[] = [];
      const stream = client.taskEvents({ taskId: id, after }, { signal: controller.signal });
      // The ready message, then whatever comes within a second (a timeout, not a time assertion).
      const reading = (async () => {
        for await (const m of stream) seen.push(m);
      })().catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      controller.abort();
      await reading;
      return JSON.stringify(seen).replaceAll(id, 'TASK');
    };
    for (const after of ['', aEvent!.id]) {
      const bOnA = await answer(b, taskId, after);
      assert.equal(bOnA, await answer(b, 'ev-never-used', after));
      assert.ok(!bOnA.includes('private') && !bOnA.includes(sid), bOnA);
    }
    assert.match(await answer(tenants.a, taskId, ''), /private/);
  });

  test('the Session stream carries the events of the tasks it calls, and resumes after a reconnection', { timeout: 120_000 }, async () => {
    const task = alpha.task('ev-session');
    const session = task.session();
    const events = session.events()[Symbol.asyncIterator]();
    const r = await session.run('terminal', { command: 'echo from-session; exit 0', background: true, notify_on_complete: true }).result();
    const sid = (r.result as { session_id: string }).session_id;
    const [completion] = await take(events, 1);
    assert.equal(completion!.type, 'completion');
    assert.equal(completion!.event.session_id, sid);
    assert.equal(
      completion!.text,
      `[IMPORTANT: Background process ${sid} completed normally (exit code 0).\nCommand: echo from-session; exit 0\nOutput:\nfrom-session\n]`,
    );
    await session.close();

    const later = await startBackground(task, 'echo while-away', { notify_on_complete: true });
    await waitExited(task, later);
    const again = task.session();
    const resumed = again.events()[Symbol.asyncIterator]();
    assert.notEqual((await again.subscribeEvents(completion!.id)).lastId, completion!.id);
    const [missed] = await take(resumed, 1);
    assert.equal(missed!.event.session_id, later);
    await again.close();
  });

  test('berth shell prints an event between commands, with the text the agent would get', { timeout: 120_000 }, async () => {
    const lines = [
      'terminal {"command":"echo shell-bg","background":true,"notify_on_complete":true}',
      // The event arrives while this runs; it is printed after its result, before the next command.
      '!sleep 3; echo slept',
      '/quit',
      '',
    ].join('\n');
    const out = await runWithInput(['shell', '--task', 'ev-shell'], { BERTH_SERVER: tenants.serve.address, BERTH_API_KEY: tenants.keys.alpha }, lines);
    assert.equal(out.code, 0, out.stderr);
    const sid = /"session_id": ?"(proc_[0-9a-f]+)"/.exec(out.stdout)?.[1];
    assert.ok(sid, out.stdout);
    const event = out.stdout.indexOf(`[IMPORTANT: Background process ${sid} completed normally (exit code 0).\nCommand: echo shell-bg\nOutput:\nshell-bg\n]`);
    assert.ok(event > 0, out.stdout);
    assert.match(out.stdout, /\[event completion · task ev-shell · id [0-9a-f]+-1\]\n\[IMPORTANT/);
    assert.ok(event > out.stdout.indexOf('slept'), 'not inside the running command\'s output');
  });

  test('berth mcp sends the events as logging notifications', { timeout: 120_000 }, async () => {
    const client = new Client({ name: 'berth-e2e-events', version: '1.0.0' });
    const notes: Array<Record<string, unknown>> = [];
    let arrived: () => void = () => undefined;
    const completion = new Promise<void>((resolve) => (arrived = resolve));
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
      if (n.params.logger !== 'berth.events') return;
      notes.push(n.params.data as Record<string, unknown>);
      if ((n.params.data as { type?: string }).type === 'completion') arrived();
    });
    await client.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: [BERTH_BIN, 'mcp', '--server', tenants.serve.address, '--api-key', tenants.keys.alpha, '--task', 'ev-mcp'],
        cwd: REPO_ROOT,
        stderr: 'pipe',
      }),
    );
    try {
      const started = await client.callTool({
        name: 'terminal',
        arguments: { command: 'echo via-mcp; exit 1', background: true, notify_on_complete: true },
      });
      const sid = (JSON.parse((started as CallToolResult).content[0]!.type === 'text' ? ((started as CallToolResult).content[0] as { text: string }).text : '{}') as { session_id: string }).session_id;
      await completion;
      const note = notes.find((n) => n.type === 'completion')!;
      assert.equal(note.task_id, 'ev-mcp');
      assert.equal(note.text, `[IMPORTANT: Background process ${sid} exited (exit code 1).\nCommand: echo via-mcp; exit 1\nOutput:\nvia-mcp\n]`);
      assert.equal((note.event as { session_id: string }).session_id, sid);
    } finally {
      await client.close();
    }
  });
});

const docker = new Dockerode();
const dockerUnavailable = await dockerUnavailableReason(docker);

describe('background-process events through berth serve (docker backend)', { skip: dockerUnavailable }, () => {
  let serve: ServeProcess;
  let berth: BerthClient;
  const { ids, task: taskName } = runTaskIds();

  before(async () => {
    serve = await startServe(['--backend', 'docker'], { env: { TERMINAL_CONTAINER_PERSISTENT: 'false' } });
    berth = new BerthClient(serve.address);
  });

  after(async () => {
    berth?.close();
    await serve?.stop();
    for (const id of ids) await removeLabelled(docker, LABEL.task, id);
  });

  test('processes in the container: a watch match and a completion arrive on the Session stream', { timeout: 180_000 }, async () => {
    const task = berth.task(taskName('ev-docker'));
    const session = task.session();
    const events = session.events()[Symbol.asyncIterator]();
    const watched = 'echo "server READY"; sleep 600';
    const r1 = await session.run('terminal', { command: watched, background: true, notify: ['READY'] }).result();
    const watchedId = (r1.result as { session_id: string }).session_id;
    const [match] = await take(events, 1);
    assert.equal(
      match!.text,
      `[IMPORTANT: Background process ${watchedId} matched watch pattern "READY".\nCommand: ${watched}\nMatched output:\nserver READY]`,
    );
    const r2 = await session.run('terminal', { command: 'echo done; exit 4', background: true, notify: true }).result();
    const sid = (r2.result as { session_id: string }).session_id;
    const [completion] = await take(events, 1);
    assert.equal(completion!.type, 'completion');
    assert.equal(completion!.event.session_id, sid);
    assert.equal(completion!.text, `[IMPORTANT: Background process ${sid} exited (exit code 4).\nCommand: echo done; exit 4\nOutput:\ndone\n]`);
    await session.close();
    await task.end();
  });
});

/** `bin/berth ARGS` with `input` on stdin. */
function runWithInput(args: string[], env: NodeJS.ProcessEnv, input: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BERTH_BIN, ...args], { cwd: REPO_ROOT, env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input);
  });
}

/** Every event the server keeps for the task (read until a second passes without one). */
async function all(client: BerthClient, taskId: string): Promise<BackgroundEvent[]> {
  const stream: TaskEventStream = client.events(taskId);
  const { lastId } = await stream.ready;
  const out: BackgroundEvent[] = [];
  if (lastId === '') {
    stream.close();
    return out;
  }
  for await (const ev of stream) {
    out.push(ev);
    if (ev.id === lastId) break;
  }
  return out;
}
