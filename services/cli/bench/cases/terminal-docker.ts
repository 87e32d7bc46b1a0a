/**
 * A trivial command on a warm docker task (its container already running),
 * through the whole stack, against running the same command in a running
 * container with `docker exec` (the CLI), with an exec through the Engine API
 * (dockerode), and against the floor of any in-container path: a resident
 * process forking `bash -c true` on request over a Unix socket, no Berth.
 * Targets: p50 ≤ 5 ms, p99 ≤ 20 ms, and ≥ 10× faster than `docker exec`.
 */
import type { BenchCase, LatencyCase, Target } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { runProcess, runTerminal, unmeasured } from '../case-helpers.js';
import { DOCKER_SERVER, dockerClient, dockerodeExec, startForkServer, startSleeper } from '../docker-helpers.js';
import { formatMs } from '../stats.js';

const TASK = 'bench-docker-warm';

/** A baseline operation and what to remove afterwards. */
interface Baseline {
  run(): Promise<void>;
  remove(): Promise<void>;
}

function dockerCase(baselineName: string, startBaseline: () => Promise<Baseline>, targets: readonly Target[] = []): LatencyCase {
  let server: BenchServer | undefined;
  let baseline: Baseline | undefined;
  return {
    kind: 'latency',
    name: 'terminal `true`, docker backend, warm task',
    baselineName,
    plan: { quick: { pairs: 150, minPairs: 20, budgetMs: 12_000 } },
    targets,
    async setup(ctx) {
      const missing = await ctx.backendMissing('docker');
      if (missing !== undefined) return { skip: missing };
      const s = await ctx.server(DOCKER_SERVER);
      server = s;
      // The first call creates the task's container; every measured call finds it warm.
      await unmeasured(ctx, "creating the docker task's container", () => runTerminal(s, TASK, 'true'));
      baseline = await startBaseline();
      await baseline.run();
      return undefined;
    },
    runA: () => runTerminal(server!, TASK, 'true'),
    runB: () => baseline!.run(),
    async teardown() {
      await baseline?.remove();
      await server?.endTask(TASK);
    },
  };
}

/** Exec of `true` in a sleeping container, through `exec`. */
async function execBaseline(exec: (containerId: string) => Promise<void>): Promise<Baseline> {
  const sleeper = await startSleeper();
  return { run: () => exec(sleeper.id), remove: () => sleeper.remove() };
}

export default function cases(): BenchCase[] {
  return [
    dockerCase(
      '`docker exec CTR true` (CLI)',
      () => execBaseline((id) => runProcess('docker', ['exec', id, 'true'])),
      [
        {
          target: 'terminal on a warm docker task: p50 ≤ 5 ms',
          judge: (r) => ({ measured: `p50 ${formatMs(r.latency!.a.p50)}`, met: r.latency!.a.p50 <= 5 }),
        },
        {
          target: 'terminal on a warm docker task: p99 ≤ 20 ms',
          judge: (r) => ({ measured: `p99 ${formatMs(r.latency!.a.p99)}`, met: r.latency!.a.p99 <= 20 }),
        },
        {
          target: 'terminal on a warm docker task: ≥ 10× faster than `docker exec` (p50)',
          judge: (r) => {
            const speedup = r.latency!.b.p50 / r.latency!.a.p50;
            return {
              measured: `${speedup.toFixed(1)}× (${formatMs(r.latency!.a.p50)} vs ${formatMs(r.latency!.b.p50)})`,
              met: speedup >= 10,
            };
          },
        },
      ],
    ),
    dockerCase('exec `true` through dockerode', async () => {
      const docker = await dockerClient();
      return execBaseline((id) => dockerodeExec(docker, id, ['true']));
    }),
    dockerCase('a resident process in a container forks `bash -c true` on a socket request (no Berth)', async () => {
      const server = await startForkServer();
      return { run: () => server.request(), remove: () => server.remove() };
    }),
  ];
}
