/**
 * A burst of new local tasks: N tasks' first calls at once (each creates its
 * environment and needs its first shell snapshot). The floor beside it is
 * what that work cannot avoid on this host: one login shell, then N plain
 * `bash -c true` spawns at once, each call's time counted from the round's
 * start. New tasks share one login-shell snapshot per environment
 * definition (services/executor/backends/local/login-snapshot.ts), so the
 * ratio shows what else a new task costs.
 */
import { performance } from 'node:perf_hooks';
import type { BenchCase, BenchMode, LoadCase, LoadRound } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { concurrentRound, runProcess, runTerminal, spawnBash, unmeasured } from '../case-helpers.js';

const TASKS: Readonly<Record<BenchMode, number>> = { smoke: 5, quick: 50, full: 50 };
const TARGET_RATIO = 3;

function burstCase(tasks: number): LoadCase {
  let server: BenchServer | undefined;
  let round = 0;
  return {
    kind: 'load',
    name: `${tasks} new tasks at once, first \`true\`, local backend`,
    baselineName: `one login shell, then ${tasks} × spawn bash -c true at once`,
    concurrency: tasks,
    targets: [
      {
        target: `${tasks} new local tasks' first calls: p50 ≤ ${TARGET_RATIO}× one login shell plus ${tasks} plain spawns`,
        judge: (r) => ({ measured: `${r.load!.ratioP50.toFixed(2)}×`, met: r.load!.ratioP50 <= TARGET_RATIO }),
      },
    ],
    plan: { smoke: { pairs: 1 }, quick: { pairs: 5, minPairs: 3 }, full: { pairs: 10, minPairs: 5 } },
    async setup(ctx) {
      server = await ctx.server();
      // The server's own start-up is not what is measured.
      await unmeasured(ctx, 'a first local task', async () => {
        await runTerminal(server!, 'bench-burst-first', 'true');
        await server!.endTask('bench-burst-first');
      });
    },
    async runA(): Promise<LoadRound> {
      const ids = Array.from({ length: tasks }, (_, i) => `bench-burst-${process.pid}-${round}-${i}`);
      round += 1;
      const result = await concurrentRound(tasks, 1, (task) => runTerminal(server!, ids[task]!, 'true'));
      await Promise.all(ids.map((id) => server!.endTask(id).catch(() => undefined)));
      return result;
    },
    async runB(): Promise<LoadRound> {
      const started = performance.now();
      await runProcess('bash', ['-l', '-c', 'true']);
      const spawns = await concurrentRound(tasks, 1, () => spawnBash('true'));
      // Each call's time from the round's start: the login shell is on every task's path.
      const loginMs = performance.now() - started - spawns.elapsedMs;
      return { ...spawns, latenciesMs: spawns.latenciesMs.map((ms) => ms + loginMs), elapsedMs: performance.now() - started };
    },
    async teardown() {
      server = undefined;
    },
  };
}

export default function cases(mode: BenchMode): BenchCase[] {
  return [burstCase(TASKS[mode])];
}
