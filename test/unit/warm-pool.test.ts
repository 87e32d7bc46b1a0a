/**
 * The warm pool's sizing, fixed and adaptive, with test-double containers
 * (the pool only starts, hands out and removes them; the docker backend's
 * tests run it with real ones).
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, it } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import type { SandboxContainer } from '../../services/executor/backends/docker/sandbox-container.js';
import { adaptiveTarget, WarmPool, type WarmPoolOptions } from '../../services/executor/backends/docker/warm-pool.js';

/** Counts what the pool does with its containers. */
class Containers {
  started = 0;
  removed = 0;
  readonly create = async (): Promise<SandboxContainer> => {
    this.started += 1;
    await sleep(1);
    return {
      channel: { isLost: false },
      remove: async () => {
        this.removed += 1;
      },
    } as unknown as SandboxContainer;
  };
}

async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await sleep(10);
  assert.ok(check(), what);
}

describe('warm pool sizing', () => {
  const pools: WarmPool[] = [];
  const pool = (o: Omit<WarmPoolOptions, 'create' | 'logger'>, containers: Containers) => {
    const p = new WarmPool({ refillDelayMs: 0, ...o, create: containers.create, logger: silentLogger() });
    pools.push(p);
    p.start();
    return p;
  };
  afterEach(async () => {
    for (const p of pools.splice(0)) await p.close();
  });

  it('adaptiveTarget: the recent arrivals, between the least and the most', () => {
    assert.deepEqual([0, 1, 2, 5, 9, 50].map((n) => adaptiveTarget(n, 2, 8)), [2, 2, 2, 5, 8, 8]);
  });

  it('a fixed pool refills to its size after claims and never grows', async () => {
    const c = new Containers();
    const p = pool({ size: 2 }, c);
    await p.whenFull();
    for (let i = 0; i < 5; i++) {
      assert.ok(p.take(), `claim ${i}`);
      await until(() => p.readyCount === 2, 'refilled to 2');
    }
    assert.equal(c.started, 7);
    assert.equal(p.target, 2);
  });

  it('adaptive: grows to the last burst, up to its most, then shrinks back once the burst ages out', async () => {
    const c = new Containers();
    const p = pool({ size: 1, adaptive: { max: 4, windowMs: 400 } }, c);
    await p.whenFull();
    assert.equal(p.readyCount, 1);
    // A burst of six new tasks: one from the pool, five would have started cold.
    const claimed = Array.from({ length: 6 }, () => p.take()).filter(Boolean).length;
    assert.equal(claimed, 1);
    assert.equal(p.target, 4, 'six arrivals, clamped to the most');
    await until(() => p.readyCount === 4, 'the pool grew to 4');
    // No arrivals for longer than the window: back to the least, the extra containers removed.
    await until(() => p.target === 1 && p.readyCount === 1, 'the pool shrank back to 1');
    assert.equal(c.removed, 3);
  });

  it('adaptive growth stops where mayGrow says so; the least is always kept', async () => {
    const c = new Containers();
    const asked: number[] = [];
    const p = pool({ size: 1, adaptive: { max: 8, windowMs: 60_000 }, mayGrow: async (ready) => (asked.push(ready), ready < 3) }, c);
    await p.whenFull();
    for (let i = 0; i < 8; i++) p.take();
    await until(() => p.readyCount === 3 && asked.includes(3), 'grew while mayGrow allowed');
    await sleep(50);
    assert.equal(p.readyCount, 3, 'held at what mayGrow allowed');
    assert.equal(p.target, 8);
  });
});
