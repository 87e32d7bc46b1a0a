/**
 * docker.start_concurrency's gate: at most N starts at once, the rest in
 * arrival order with tasks before the warm pool, an abort while waiting
 * leaves the queue, and a limit that cannot be learnt holds nothing back.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { StartGate } from '../../services/executor/backends/docker/start-gate.js';

const flush = () => new Promise((resolve) => setImmediate(resolve));

describe('the start gate', () => {
  it('lets `limit` starts run at once and the next in as one finishes', async () => {
    const gate = new StartGate(async () => 2);
    const a = await gate.acquire('task');
    await gate.acquire('task');
    let third = false;
    const pending = gate.acquire('task').then((release) => {
      third = true;
      return release;
    });
    await flush();
    assert.equal(third, false, 'the third waits while two run');
    assert.deepEqual([gate.running, gate.waiting], [2, 1]);
    a();
    a(); // a second call of the same release frees nothing more
    await pending;
    assert.equal(third, true);
    assert.deepEqual([gate.running, gate.waiting], [2, 0]);
  });

  it("grants tasks' starts before the pool's, each in arrival order", async () => {
    const gate = new StartGate(async () => 1);
    const first = await gate.acquire('task');
    const order: string[] = [];
    const releases = new Map<string, () => void>();
    const arrivals = [
      ['pool', 'pool 1'],
      ['task', 'task 1'],
      ['pool', 'pool 2'],
      ['task', 'task 2'],
    ] as const;
    const waits = arrivals.map(([priority, name]) =>
      gate.acquire(priority).then((release) => {
        order.push(name);
        releases.set(name, release);
      }),
    );
    await flush();
    assert.equal(gate.waiting, 4);
    first();
    for (let granted = 1; granted < arrivals.length; granted++) {
      await flush();
      assert.equal(order.length, granted, 'one start let in per start finished');
      releases.get(order.at(-1)!)!();
    }
    await Promise.all(waits);
    assert.deepEqual(order, ['task 1', 'task 2', 'pool 1', 'pool 2']);
  });

  it('an abort while waiting rejects with its reason and takes no slot', async () => {
    const gate = new StartGate(async () => 1);
    const held = await gate.acquire('task');
    const stop = new AbortController();
    const aborted = gate.acquire('task', stop.signal);
    const after = gate.acquire('task');
    await flush();
    stop.abort(new Error('the call was cancelled'));
    await assert.rejects(aborted, /the call was cancelled/);
    assert.equal(gate.waiting, 1);
    held();
    const release = await after;
    assert.deepEqual([gate.running, gate.waiting], [1, 0], 'the slot went to the next waiter');
    release();
    assert.equal(gate.running, 0);
    await assert.rejects(gate.acquire('task', AbortSignal.abort(new Error('already'))), /already/);
    assert.equal(gate.running, 0, 'an already aborted signal takes no slot');
  });

  it('holds nothing back while the limit cannot be learnt, and asks again at the next start', async () => {
    let asked = 0;
    const gate = new StartGate(async () => {
      asked++;
      if (asked <= 2) throw new Error('the engine did not answer');
      return 1;
    });
    const one = await gate.acquire('task');
    const two = await gate.acquire('task');
    assert.deepEqual([gate.running, asked], [2, 2], 'both run while the limit is unknown');
    let third = false;
    const pending = gate.acquire('task').then((release) => ((third = true), release));
    await flush();
    assert.deepEqual([third, asked], [false, 3], 'learnt at the third start (1), which waits');
    one();
    two();
    (await pending)();
    assert.equal(gate.running, 0);
    (await gate.acquire('task'))();
    assert.equal(asked, 3, 'once learnt, not asked again');
  });
});
