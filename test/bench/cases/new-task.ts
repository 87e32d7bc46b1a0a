/**
 * The first command of a new task, whose container must come from somewhere:
 * from the warm pool (started ahead of time), or cold (created and started on
 * the call). Baseline: `docker run --rm IMAGE true`, a container's whole life
 * from the CLI. Target: warm pool p50 ≤ 50 ms.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BenchCase, LatencyCase } from '../bench-case.js';
import type { BenchServer, BenchServerOptions } from '../bench-server-process.js';
import { runProcess, runTerminal } from '../case-helpers.js';
import { BENCH_LABEL, SANDBOX_IMAGE } from '../docker-helpers.js';

const WARM_POOL = 2;
/** Untimed pause after each task ends, so the pool can refill (and the cold path's removal finish). */
const SETTLE_MS = 400;

function newTaskCase(name: string, serverOptions: BenchServerOptions): LatencyCase {
  let server: BenchServer | undefined;
  let n = 0;
  return {
    kind: 'latency',
    name,
    baselineName: '`docker run --rm IMAGE true` (CLI)',
    plan: {
      quick: { warmupPairs: 2, pairs: 25, minPairs: 8, budgetMs: 12_000 },
      full: { warmupPairs: 5, pairs: 200, minPairs: 50, budgetMs: 90_000 },
    },
    async setup(ctx) {
      const missing = await ctx.backendMissing('docker');
      if (missing !== undefined) return { skip: missing };
      server = await ctx.server(serverOptions);
      await sleep(SETTLE_MS * WARM_POOL);
      return undefined;
    },
    async runA() {
      const task = `bench-new-${process.pid}-${n++}`;
      const t0 = performance.now();
      await runTerminal(server!, task, 'true');
      const ms = performance.now() - t0;
      await server!.endTask(task);
      await sleep(SETTLE_MS);
      return ms;
    },
    runB: () => runProcess('docker', ['run', '--rm', '--label', BENCH_LABEL, SANDBOX_IMAGE, 'true']),
    async teardown() {},
  };
}

export default function cases(): BenchCase[] {
  return [
    newTaskCase(`new task, first \`true\`, docker warm pool (${WARM_POOL})`, {
      backend: 'docker',
      config: { docker: { warm_pool: WARM_POOL } },
    }),
    newTaskCase('new task, first `true`, docker cold', { backend: 'docker' }),
  ];
}
