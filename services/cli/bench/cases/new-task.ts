/**
 * The first command of a new task, whose container must come from somewhere:
 * from the warm pool (started ahead of time), or cold (created and started on
 * the call). Baseline: `docker run --rm IMAGE true`, a container's whole life
 * from the CLI. Target: warm pool p50 ≤ 50 ms.
 *
 * Between runs nothing is timed while the pool refills (or, cold, while the
 * last container goes), so each side sees a quiet Docker daemon.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BenchCase, BenchContext, LatencyCase, Target } from '../bench-case.js';
import type { BenchServer, BenchServerOptions } from '../bench-server-process.js';
import { runProcess, runTerminal } from '../case-helpers.js';
import { BENCH_LABEL, DOCKER_SERVER, SANDBOX_IMAGE, servedFromPool, waitForPool } from '../docker-helpers.js';
import { formatMs } from '../stats.js';

const WARM_POOL = 2;
/** Pause after each cold task ends, for its container's removal to finish. */
const COLD_SETTLE_MS = 400;

function newTaskCase(name: string, serverOptions: BenchServerOptions, pool: number, targets: readonly Target[] = []): LatencyCase {
  let server: BenchServer | undefined;
  let ctx: BenchContext | undefined;
  let n = 0;
  let misses = 0;
  return {
    kind: 'latency',
    name,
    baselineName: '`docker run --rm IMAGE true` (CLI)',
    targets,
    plan: {
      smoke: { pairs: 1 },
      quick: { warmupPairs: 1, pairs: 25, minPairs: 6, budgetMs: 12_000 },
      full: { warmupPairs: 3, pairs: 200, minPairs: 50, budgetMs: 90_000 },
    },
    async setup(context) {
      ctx = context;
      const missing = await context.backendMissing('docker');
      if (missing !== undefined) return { skip: missing };
      server = await context.server(serverOptions);
      return undefined;
    },
    async runA() {
      if (pool > 0) await waitForPool(server!.pid, pool);
      const task = `bench-new-${process.pid}-${n++}`;
      const t0 = performance.now();
      await runTerminal(server!, task, 'true');
      const ms = performance.now() - t0;
      if (pool > 0 && servedFromPool(server!.logPath, task) === false) misses += 1;
      await server!.endTask(task);
      if (pool > 0) await waitForPool(server!.pid, pool);
      else await sleep(COLD_SETTLE_MS);
      return ms;
    },
    runB: () => runProcess('docker', ['run', '--rm', '--label', BENCH_LABEL, SANDBOX_IMAGE, 'true']),
    async teardown() {
      if (misses > 0) ctx?.note(`${name}: ${misses} of ${n} first calls found the pool empty and started cold`);
    },
  };
}

export default function cases(): BenchCase[] {
  // The pool only serves non-persistent tasks (a persistent task's named volumes cannot be mounted into a
  // container started before the task was known), so both sides run that way and differ by the pool alone.
  const { terminal } = DOCKER_SERVER.config;
  return [
    newTaskCase(
      `new task, first \`true\`, docker warm pool (${WARM_POOL})`,
      { backend: 'docker', config: { terminal, docker: { warm_pool: WARM_POOL } } },
      WARM_POOL,
      [
        {
          target: 'first command of a new task from the warm pool: p50 ≤ 50 ms',
          judge: (r) => ({ measured: `p50 ${formatMs(r.latency!.a.p50)}`, met: r.latency!.a.p50 <= 50 }),
        },
      ],
    ),
    newTaskCase('new task, first `true`, docker cold', DOCKER_SERVER, 0),
  ];
}
