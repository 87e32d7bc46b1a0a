/**
 * A burst of new docker tasks: N tasks' first `true` at once through the
 * whole stack, each needing a container, beside what the engine itself does
 * for as many: N × `docker run --rm IMAGE true` at once (the CLI, a
 * container's whole life). Each call's time counts from the round's start.
 *
 * Two ways to meet the burst: cold (each task creates and starts its own
 * container on its first call), and from the adaptive warm pool sized to N
 * (`docker.warm_pool_max`, within `docker.warm_pool_memory_mb`), which one
 * earlier burst taught to hold N ready containers, so the burst costs what
 * a claim costs.
 *
 * Between rounds nothing is timed while the ended tasks' containers go and
 * the pool refills, so each side meets a quiet Docker daemon.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { BenchCase, BenchContext, BenchMode, LoadCase, LoadRound } from '../bench-case.js';
import type { BenchServer, BenchServerOptions } from '../bench-server-process.js';
import { concurrentRound, runProcess, runTerminal, unmeasured } from '../case-helpers.js';
import { BENCH_LABEL, DOCKER_SERVER, SANDBOX_IMAGE, servedFromPool, waitForPool, waitForTaskContainersGone } from '../docker-helpers.js';

const TASKS: Readonly<Record<BenchMode, number>> = { smoke: 2, quick: 8, full: 20 };
const TARGET_RATIO = 1;
/**
 * Each container's memory limit, MiB. The default (5120) would have the
 * memory admission (`docker.memory_overcommit`) refuse a burst of twenty on
 * a small host; the limit does not change what a start costs.
 */
const CONTAINER_MEMORY_MIB = 256;
/** Long enough that no burst ages out of the adaptive pool's window while the case runs. */
const POOL_WINDOW_S = 3600;
/** The pool starts its containers one at a time, each with its login shell's snapshot. */
const POOL_FILL_MS_PER_CONTAINER = 15_000;
/** The last pool container runs before its agent connects and its shell snapshot is written; on a busy host that takes a while. */
const POOL_READY_MS = 1000;

function serverOptions(tasks: number, pooled: boolean): BenchServerOptions {
  const terminal = { ...DOCKER_SERVER.config.terminal, container_memory: CONTAINER_MEMORY_MIB };
  if (!pooled) return { backend: 'docker', config: { terminal } };
  const docker = {
    warm_pool: 1,
    warm_pool_max: tasks,
    warm_pool_window_s: POOL_WINDOW_S,
    warm_pool_memory_mb: tasks * CONTAINER_MEMORY_MIB,
  };
  return { backend: 'docker', config: { terminal, docker } };
}

function burstCase(tasks: number, pooled: boolean): LoadCase {
  let server: BenchServer | undefined;
  let ctx: BenchContext | undefined;
  let round = 0;
  let calls = 0;
  let misses = 0;
  const name = pooled
    ? `${tasks} new tasks at once, first \`true\`, docker adaptive warm pool (${tasks})`
    : `${tasks} new tasks at once, first \`true\`, docker cold`;
  const settle = async () => {
    await waitForTaskContainersGone(server!.pid);
    if (!pooled) return;
    await waitForPool(server!.pid, tasks, tasks * POOL_FILL_MS_PER_CONTAINER);
    await sleep(POOL_READY_MS);
  };
  /** One burst of new tasks, each task's first call timed from the round's start; the tasks end untimed. */
  const burst = async (): Promise<LoadRound> => {
    const ids = Array.from({ length: tasks }, (_, i) => `bench-docker-burst-${process.pid}-${round}-${i}`);
    round += 1;
    const result = await concurrentRound(tasks, 1, (task) => runTerminal(server!, ids[task]!, 'true'));
    if (pooled) {
      calls += ids.length;
      misses += ids.filter((id) => servedFromPool(server!.logPath, id) === false).length;
    }
    await Promise.all(ids.map((id) => server!.endTask(id).catch(() => undefined)));
    await settle();
    return result;
  };
  return {
    kind: 'load',
    name,
    baselineName: `${tasks} × \`docker run --rm IMAGE true\` at once (CLI)`,
    concurrency: tasks,
    targets: [
      {
        target: `${tasks} new docker tasks' first calls at once (${pooled ? 'adaptive warm pool' : 'cold'}): p50 ≤ ${TARGET_RATIO}× ${tasks} \`docker run\`s at once`,
        judge: (r) => ({ measured: `${r.load!.ratioP50.toFixed(2)}×`, met: r.load!.ratioP50 <= TARGET_RATIO }),
      },
    ],
    plan: { smoke: { pairs: 1 }, quick: { pairs: 3, minPairs: 2, budgetMs: 45_000 }, full: { pairs: 10, minPairs: 5 } },
    async setup(context) {
      ctx = context;
      const missing = await context.backendMissing('docker');
      if (missing !== undefined) return { skip: missing };
      const s = await context.server(serverOptions(tasks, pooled));
      server = s;
      // A first task makes what every later one finds (the image checked, the network); not measured.
      await unmeasured(context, 'a first docker task', async () => {
        await runTerminal(s, `bench-docker-burst-${process.pid}-first`, 'true');
        await s.endTask(`bench-docker-burst-${process.pid}-first`);
      });
      if (pooled) {
        // The earlier burst the adaptive pool learns its size from; then it fills to N.
        const taught = await concurrentRound(tasks, 1, (task) => runTerminal(s, `bench-docker-burst-${process.pid}-teach-${task}`, 'true'));
        if (taught.errors > 0) throw new Error(`the burst that sizes the warm pool failed: ${taught.firstError}`);
        await Promise.all(Array.from({ length: tasks }, (_, task) => s.endTask(`bench-docker-burst-${process.pid}-teach-${task}`)));
      }
      await settle();
      return undefined;
    },
    runA: burst,
    async runB(): Promise<LoadRound> {
      return concurrentRound(tasks, 1, () => runProcess('docker', ['run', '--rm', '--label', BENCH_LABEL, SANDBOX_IMAGE, 'true']));
    },
    async teardown() {
      if (misses > 0) ctx?.note(`${name}: ${misses} of ${calls} first calls found the pool empty and started cold`);
      server = undefined;
    },
  };
}

export default function cases(mode: BenchMode): BenchCase[] {
  const tasks = TASKS[mode];
  return [burstCase(tasks, false), burstCase(tasks, true)];
}
