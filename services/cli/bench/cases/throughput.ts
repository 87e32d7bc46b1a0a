/**
 * Many tasks at once on the local backend: each task runs its commands one
 * after another, the tasks run concurrently, over one client channel. The
 * baseline runs the same shape of work as plain `bash -c true` spawns from
 * the client, so the ratio shows what Berth adds under load, and the same
 * suite at 1, 10 and 50 tasks gives the cost curve (how p50 grows).
 */
import type { BenchCase, BenchMode, LoadCase, Target } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { concurrentRound, runTerminal, spawnBash, unmeasured } from '../case-helpers.js';
import { formatMs } from '../stats.js';

/** Smoke runs a small load: it only has to prove the case still works. */
const SIZES: Readonly<Record<BenchMode, { readonly tasks: readonly number[]; readonly perTask: number }>> = {
  smoke: { tasks: [1, 3, 5], perTask: 2 },
  quick: { tasks: [1, 10, 50], perTask: 20 },
  full: { tasks: [1, 10, 50], perTask: 20 },
};

/** The targets for the largest load. */
const LOAD_TARGETS: readonly Target[] = [
  {
    target: '50 concurrent tasks: zero errors',
    judge: (r) => ({ measured: `${r.load!.a.errors} errors in ${r.load!.a.samples.length + r.load!.a.errors} calls`, met: r.load!.a.errors === 0 }),
  },
  {
    target: '50 concurrent tasks: p99 ≤ 10× p50',
    judge: (r) => {
      const { p50, p99 } = r.load!.a.latency;
      return { measured: `p99/p50 ${(p99 / p50).toFixed(2)} (${formatMs(p99)} / ${formatMs(p50)})`, met: p99 <= 10 * p50 };
    },
  },
];

function loadCase(
  tasks: number,
  perTask: number,
  rounds: { quick: number; quickMin: number; full: number },
  targets: readonly Target[] = [],
): LoadCase {
  let server: BenchServer | undefined;
  const taskId = (i: number) => `bench-load-${tasks}-${i}`;
  return {
    kind: 'load',
    name: `${tasks} task${tasks === 1 ? '' : 's'} at once × ${perTask} × terminal \`true\`, local backend`,
    baselineName: `${tasks} at once × ${perTask} × spawn bash -c true`,
    concurrency: tasks,
    targets,
    plan: {
      quick: { pairs: rounds.quick, minPairs: rounds.quickMin },
      full: { pairs: rounds.full, minPairs: Math.min(5, rounds.full) },
    },
    async setup(ctx) {
      const s = await ctx.server();
      server = s;
      // Each task's first command creates its environment; rounds measure live tasks only.
      await Promise.all(
        Array.from({ length: tasks }, (_, i) => unmeasured(ctx, `creating task ${taskId(i)}`, () => runTerminal(s, taskId(i), 'true'))),
      );
    },
    runA: () => concurrentRound(tasks, perTask, (t) => runTerminal(server!, taskId(t), 'true')),
    runB: () => concurrentRound(tasks, perTask, () => spawnBash('true')),
    async teardown() {
      if (server === undefined) return;
      await Promise.allSettled(Array.from({ length: tasks }, (_, i) => server!.endTask(taskId(i))));
    },
  };
}

export default function cases(mode: BenchMode): BenchCase[] {
  const { tasks, perTask } = SIZES[mode];
  // Fewer rounds where one round already holds many calls.
  const rounds = [
    { quick: 10, quickMin: 3, full: 40 },
    { quick: 4, quickMin: 1, full: 15 },
    { quick: 3, quickMin: 1, full: 10 },
  ];
  return tasks.map((n, i) => loadCase(n, perTask, rounds[i]!, i === tasks.length - 1 ? LOAD_TARGETS : []));
}
