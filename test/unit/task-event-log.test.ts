/**
 * The executor's per-task event log: ids, replay after an id, the bounds
 * (per task, by age, across tasks) and the `dropped` notes a follower gets
 * when what it missed is gone; and the dispatcher's reading of an event's
 * JSON, which carries sandbox output.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { ProcessNotification } from '../../services/common/process-notification.js';
import { eventsDropped } from '../../services/common/process-notification.js';
import { parseProcessEvent } from '../../services/dispatcher/task-events.js';
import { TaskEventLog, type TaskEventItem } from '../../services/executor/task-event-log.js';

const A = { tenant: 'a', taskId: 't' };
const B = { tenant: 'b', taskId: 't' };

function match(n: number, task = 't'): ProcessNotification {
  return { session_id: `proc_${n}`, task_id: task, owner_task_id: task, command: 'cmd', type: 'watch_match', pattern: 'x', output: `line ${n}`, suppressed: 0 };
}

/** What a follower receives until it has waited with nothing new (the items in hand). */
async function drain(log: TaskEventLog, task: typeof A, options: { afterId?: string; fromLatest?: boolean } = {}): Promise<TaskEventItem[]> {
  const controller = new AbortController();
  const items: TaskEventItem[] = [];
  const it = log.follow(task, { afterId: options.afterId ?? '', fromLatest: options.fromLatest ?? false, signal: controller.signal });
  for (;;) {
    const next = await Promise.race([it.next(), new Promise<'idle'>((resolve) => setImmediate(() => resolve('idle')))]);
    if (next === 'idle' || next.done) break;
    items.push(next.value);
  }
  controller.abort();
  await it.return(undefined);
  return items;
}

const outputs = (items: TaskEventItem[]) =>
  items.map((i) => (i.kind === 'event' ? (JSON.parse(i.json) as { output: string }).output : i.kind === 'dropped' ? `dropped ${i.count}` : 'subscribed'));

describe('TaskEventLog', () => {
  test('ids increase within a task; a follower after an id gets exactly what came later', async () => {
    const log = new TaskEventLog();
    for (let n = 1; n <= 3; n++) log.append(A, match(n));
    const all = await drain(log, A);
    assert.deepEqual(outputs(all), ['subscribed', 'line 1', 'line 2', 'line 3']);
    const ids = all.flatMap((i) => (i.kind === 'event' ? [i.id] : []));
    assert.deepEqual(ids.map((id) => Number(id.split('-')[1])), [1, 2, 3]);
    assert.deepEqual(all[0], { kind: 'subscribed', lastId: ids[2] });
    assert.deepEqual(outputs(await drain(log, A, { afterId: ids[0]! })), ['subscribed', 'line 2', 'line 3']);
    assert.deepEqual(outputs(await drain(log, A, { fromLatest: true })), ['subscribed']);
    log.close();
  });

  test('a live follower gets new events as they are appended; tenants never share a log', async () => {
    const log = new TaskEventLog();
    const controller = new AbortController();
    const it = log.follow(A, { afterId: '', fromLatest: true, signal: controller.signal });
    assert.deepEqual((await it.next()).value, { kind: 'subscribed', lastId: '' });
    const next = it.next();
    log.append(B, match(99));
    log.append(A, match(1));
    const item = (await next).value as TaskEventItem;
    assert.equal(item.kind, 'event');
    assert.deepEqual(outputs([item]), ['line 1']);
    controller.abort();
    assert.equal((await it.next()).done, true);
    assert.deepEqual(outputs(await drain(log, B)), ['subscribed', 'line 99']);
    log.close();
  });

  test('past the per-task bound the oldest go, and a follower behind them is told how many it missed', async () => {
    const log = new TaskEventLog({ perTask: 3 });
    const first = (() => {
      log.append(A, match(1));
      return drain(log, A);
    })();
    const id1 = (await first).find((i) => i.kind === 'event')!;
    for (let n = 2; n <= 6; n++) log.append(A, match(n));
    const items = await drain(log, A, { afterId: (id1 as { id: string }).id });
    assert.deepEqual(outputs(items), ['subscribed', 'dropped 2', 'line 4', 'line 5', 'line 6']);
    const dropped = items[1] as Extract<TaskEventItem, { kind: 'dropped' }>;
    assert.equal(Number(dropped.id.split('-')[1]), 3, 'the marker stands where the follower can resume');
    log.close();
  });

  test('the totals across tasks and the age limit push out the oldest events; an idle log is forgotten', async () => {
    let nowMs = 1_000_000;
    const log = new TaskEventLog({ total: 2, maxAgeMs: 60_000, now: () => nowMs });
    log.append(A, match(1));
    log.append(B, match(2));
    log.append(B, match(3));
    assert.deepEqual(outputs(await drain(log, A)), ['subscribed'], "A's only event was the oldest of three");
    const [, ...bItems] = await drain(log, B);
    assert.deepEqual(outputs(bItems), ['line 2', 'line 3']);
    const lastB = (bItems[1] as { id: string }).id;
    nowMs += 61_000;
    log.append(A, match(4));
    assert.deepEqual(outputs(await drain(log, B)), ['subscribed'], 'expired');
    // B's log had no event for the age limit: forgotten, so its old id cannot be placed any more.
    log.append(B, match(5));
    assert.deepEqual(outputs(await drain(log, B, { afterId: lastB })), ['subscribed', 'dropped -1', 'line 5']);
    log.close();
  });

  test('an id of another log (a restart, another tenant) reads as "may have missed"; a malformed one is refused', async () => {
    const log = new TaskEventLog();
    assert.deepEqual(outputs(await drain(log, A, { afterId: 'deadbeef-4' })), ['subscribed', 'dropped -1']);
    log.append(A, match(1));
    const aId = (await drain(log, A)).find((i) => i.kind === 'event') as { id: string };
    assert.deepEqual(await drain(log, B, { afterId: aId.id }), await drain(log, { tenant: 'b', taskId: 'unknown' }, { afterId: aId.id }));
    assert.throws(() => log.follow(A, { afterId: '../x', fromLatest: false, signal: new AbortController().signal }), /is not an event id/);
    log.close();
  });

  test('the dropped note says how many, or that the number is not known, with what to do', () => {
    assert.match(eventsDropped('t1', 4).message, /^4 background-process event\(s\) of task t1 were dropped .*last 100 events .*30 minutes.*process\(action="list"\)\.$/);
    assert.equal(eventsDropped('t1', null).count, null);
  });
});

describe('parseProcessEvent (sandbox output inside)', () => {
  test('an event passes; anything without an event shape is refused', () => {
    assert.deepEqual(parseProcessEvent(JSON.stringify(match(1))), match(1));
    for (const bad of ['', 'null', '[]', '{"type":"shell"}', JSON.stringify({ ...match(1), output: 7 }), JSON.stringify({ ...match(1), suppressed: '1' })]) {
      assert.equal(parseProcessEvent(bad), undefined, bad);
    }
  });
});
