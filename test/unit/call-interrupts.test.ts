/**
 * The executor's register of calls in flight (call-interrupts.ts):
 * InterruptTask interrupts every call of the task, and a call the
 * interrupt named that arrives after it (the two travel separately) is
 * interrupted on arrival; other calls and other tasks are not touched.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isInterrupt } from '../../services/common/interrupts.js';
import { CallInterrupts } from '../../services/executor/call-interrupts.js';

const task = { tenant: 't', taskId: 'a' };
const other = { tenant: 't', taskId: 'b' };

describe('CallInterrupts', () => {
  it("interrupts the task's calls in flight, not those of other tasks, and counts them", () => {
    const calls = new CallInterrupts();
    const one = calls.begin(task, 'c1');
    const two = calls.begin(task, '');
    const elsewhere = calls.begin(other, 'c3');
    assert.equal(calls.interrupt(task), 2);
    assert.ok(isInterrupt(one.signal) && isInterrupt(two.signal));
    assert.equal(elsewhere.signal.aborted, false);
    // Already interrupted calls are not counted again; ended calls are gone.
    assert.equal(calls.interrupt(task), 0);
    one.end();
    two.end();
    elsewhere.end();
    assert.equal(calls.interrupt(other), 0);
  });

  it('a call named by an interrupt that arrives after it is interrupted on arrival; others are not', () => {
    let now = 0;
    const calls = new CallInterrupts(() => now);
    assert.equal(calls.interrupt(task, ['late']), 0);
    assert.ok(isInterrupt(calls.begin(task, 'late').signal), 'the late call starts interrupted');
    assert.equal(calls.begin(task, 'fresh').signal.aborted, false);
    assert.equal(calls.begin(task, '').signal.aborted, false);
    // The id is forgotten after a while: a much later call of it is not touched.
    now += 11 * 60 * 1000;
    assert.equal(calls.begin(task, 'late').signal.aborted, false);
  });
});
