/**
 * A trivial command on a warm docker task (its container already running),
 * through the whole stack, against running the same command in a running
 * container with `docker exec` (the CLI) and with an exec through the Engine
 * API (dockerode). Target: p50 ≤ 5 ms and ≥ 10× faster than `docker exec`.
 */
import type Docker from 'dockerode';
import type { BenchCase, LatencyCase, Target } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { runProcess, runTerminal, unmeasured } from '../case-helpers.js';
import { DOCKER_SERVER, dockerClient, dockerodeExec, startSleeper, type Sleeper } from '../docker-helpers.js';
import { formatMs } from '../stats.js';

const TASK = 'bench-docker-warm';

function dockerCase(
  baselineName: string,
  baseline: (docker: Docker, sleeper: Sleeper) => Promise<void>,
  targets: readonly Target[] = [],
): LatencyCase {
  let server: BenchServer | undefined;
  let sleeper: Sleeper | undefined;
  let docker: Docker | undefined;
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
      sleeper = await startSleeper();
      docker = await dockerClient();
      await baseline(docker, sleeper);
      return undefined;
    },
    runA: () => runTerminal(server!, TASK, 'true'),
    runB: () => baseline(docker!, sleeper!),
    async teardown() {
      await sleeper?.remove();
      await server?.endTask(TASK);
    },
  };
}

export default function cases(): BenchCase[] {
  return [
    dockerCase(
      '`docker exec CTR true` (CLI)',
      (_docker, sleeper) => runProcess('docker', ['exec', sleeper.id, 'true']),
      [
        {
          target: 'terminal on a warm docker task: p50 ≤ 5 ms',
          judge: (r) => ({ measured: `p50 ${formatMs(r.latency!.a.p50)}`, met: r.latency!.a.p50 <= 5 }),
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
    dockerCase('exec `true` through dockerode', (docker, sleeper) => dockerodeExec(docker, sleeper.id, ['true'])),
  ];
}
