/**
 * The first command after a suspension (docs/suspend.md): a docker task is
 * suspended (unmeasured; its container stops), then `true` is timed, which
 * resumes it (the container starts again, its agent dials in, its tmpfs
 * files are unpacked). Baseline: the first `true` of a cold new task on the
 * same server (no warm pool). Target: p50 ≤ 300 ms.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BenchCase, BenchContext, LatencyCase } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { runTerminal, unmeasured } from '../case-helpers.js';
import { DOCKER_SERVER } from '../docker-helpers.js';
import { formatMs } from '../stats.js';

/** Pause after each cold task ends, for its container's removal to finish. */
const COLD_SETTLE_MS = 400;

function resumeCase(): LatencyCase {
  let server: BenchServer | undefined;
  let ctx: BenchContext | undefined;
  const task = `bench-resume-${process.pid}`;
  let n = 0;
  return {
    kind: 'latency',
    name: 'first `true` after a suspension, docker (resume)',
    baselineName: 'first `true` of a cold new task, docker',
    targets: [
      {
        target: 'resume to first command: p50 ≤ 300 ms',
        judge: (r) => ({ measured: `p50 ${formatMs(r.latency!.a.p50)}`, met: r.latency!.a.p50 <= 300 }),
      },
    ],
    plan: {
      smoke: { pairs: 1 },
      quick: { warmupPairs: 1, pairs: 15, minPairs: 5, budgetMs: 15_000 },
      full: { warmupPairs: 2, pairs: 100, minPairs: 30, budgetMs: 90_000 },
    },
    async setup(context) {
      ctx = context;
      const missing = await context.backendMissing('docker');
      if (missing !== undefined) return { skip: missing };
      server = await context.server(DOCKER_SERVER);
      await runTerminal(server, task, 'true');
      return undefined;
    },
    async runA() {
      const r = await unmeasured(ctx!, `suspending ${task}`, () => server!.client.suspend({ taskId: task }));
      if (!r.suspended) throw new Error(`${task} was not suspended`);
      const t0 = performance.now();
      await runTerminal(server!, task, 'true');
      return performance.now() - t0;
    },
    async runB() {
      const cold = `bench-resume-cold-${process.pid}-${n++}`;
      const t0 = performance.now();
      await runTerminal(server!, cold, 'true');
      const ms = performance.now() - t0;
      await server!.endTask(cold);
      await sleep(COLD_SETTLE_MS);
      return ms;
    },
    async teardown() {
      await server?.endTask(task).catch(() => undefined);
    },
  };
}

export default function cases(): BenchCase[] {
  return [resumeCase()];
}
