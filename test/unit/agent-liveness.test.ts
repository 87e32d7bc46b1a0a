/** The exec agent's liveness check: asked only while something waits, answered by any frame. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { LivenessWatchdog } from '../../services/executor/backends/shared/agent/agent-liveness.js';

describe('LivenessWatchdog', () => {
  // The watchdog's timer never keeps a process alive by itself; this test's waits must.
  let keepAlive: NodeJS.Timeout;
  before(() => (keepAlive = setInterval(() => undefined, 1000)));
  after(() => clearInterval(keepAlive));

  test('an agent that hears nothing is probed, then given up on, with the silence it kept', async () => {
    const events: string[] = [];
    const silent = new Promise<number>((resolve) => {
      const w = new LivenessWatchdog({
        probeAfterMs: 20,
        timeoutMs: 40,
        isWaiting: () => true,
        probe: () => events.push('probe'),
        onSilent: (ms) => {
          events.push('silent');
          resolve(ms);
        },
      });
      w.arm();
    });
    const silentMs = await silent;
    assert.deepEqual(events, ['probe', 'silent']);
    assert.ok(silentMs >= 60, `silent for ${silentMs} ms: at least the probe delay and the timeout`);
  });

  test('an agent that answers every probe is never given up on', async () => {
    let probes = 0;
    let gaveUp = false;
    const w = new LivenessWatchdog({
      probeAfterMs: 10,
      timeoutMs: 10,
      isWaiting: () => true,
      probe: () => {
        probes++;
        w.heard();
      },
      onSilent: () => (gaveUp = true),
    });
    w.arm();
    while (probes < 5) await sleep(10);
    w.disarm();
    assert.equal(gaveUp, false);
  });

  test('nothing waiting: no probe, and the watchdog stops by itself', async () => {
    let probes = 0;
    let waiting = true;
    const w = new LivenessWatchdog({
      probeAfterMs: 10,
      timeoutMs: 10,
      isWaiting: () => waiting,
      probe: () => probes++,
      onSilent: () => assert.fail('nothing waited'),
    });
    waiting = false;
    w.arm();
    await sleep(100);
    assert.equal(probes, 0);
  });
});
