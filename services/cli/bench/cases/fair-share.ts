/**
 * Fair share between tenants on the docker backend. Tenant `load` saturates
 * its tasks: each runs a CPU burner, a fork bomb (up to the pids limit), a
 * memory hog (killed at its memory limit, again and again) and an output
 * flood, all at once, as background processes. Tenant `probe` runs
 * `terminal true` on its own warm task, 20 calls one after another per
 * round.
 *
 * A (loaded): the load is started, runs for two seconds, the probe's round
 * is timed, then the load is killed (by process group, untimed). B (idle):
 * the same round with the load's containers idle. So the same server, the
 * same containers and the same machine noise are measured with and without
 * the load, interleaved. (Freezing the load with `docker pause` instead
 * fails here: runc cannot freeze a cgroup whose fork bomb keeps forking.)
 * Target: the probe's p50 under load within 3× of its idle p50.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { createClient, Metadata } from 'nice-grpc';
import { hashApiKey } from '../../../common/config.js';
import { DispatcherDefinition, type DispatcherClient } from '../../../gen/berth/v1/dispatcher.js';
import type { BenchCase, BenchMode, LoadCase, LoadRound } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { checkTerminalResult, unmeasured } from '../case-helpers.js';

/** Bench-only keys: the server they open lives for one bench run on loopback. */
const LOAD_KEY = 'berth-bench-fair-share-load';
const PROBE_KEY = 'berth-bench-fair-share-probe';
const LOAD_TENANT = 'load';
const PROBE_TENANT = 'probe';
const PROBE_TASK = 'bench-fair-probe';

/** Smoke only proves the case works: one load task, a short settle. */
const SIZES: Readonly<Record<BenchMode, { readonly tasks: number; readonly calls: number; readonly settleMs: number }>> = {
  smoke: { tasks: 1, calls: 2, settleMs: 300 },
  quick: { tasks: 10, calls: 20, settleMs: 2_000 },
  full: { tasks: 10, calls: 40, settleMs: 2_000 },
};

/**
 * The load each task runs, in this order: the fork bomb last, since once
 * it holds every pid the task's shell cannot start anything else.
 */
const LOAD_COMMANDS: readonly string[] = [
  // CPU burner.
  'while :; do :; done',
  // Memory hog: grows until the container's memory limit kills it, then starts over.
  "while :; do python3 -c 'b = []\nwhile True: b.append(bytearray(32 << 20))'; done",
  // Output flood into the background process's buffer.
  'yes berth-bench-flood-line',
  // Fork bomb: every child forks too, until the pids limit; then they all spin on EAGAIN.
  "python3 -c 'import os\nwhile True:\n    try: os.fork()\n    except OSError: pass'",
];

/** Memory limit of every container in this case (MiB): bounds the hogs on a shared machine. */
const CONTAINER_MEMORY_MIB = 256;

const SERVER_OPTIONS = {
  backend: 'docker',
  config: {
    terminal: { container_persistent: false, container_memory: CONTAINER_MEMORY_MIB },
    // The load's commands must run, not wait for an answer; hardline rules still apply.
    approvals: { mode: 'off' },
    tenants: [
      { id: LOAD_TENANT, api_key_sha256: hashApiKey(LOAD_KEY) },
      { id: PROBE_TENANT, api_key_sha256: hashApiKey(PROBE_KEY) },
    ],
  },
} as const;

function tenantClient(server: BenchServer, key: string): DispatcherClient {
  return createClient(DispatcherDefinition, server.channel, {
    '*': { metadata: Metadata({ authorization: `Bearer ${key}` }) },
  });
}

async function terminal(client: DispatcherClient, taskId: string, args: Readonly<Record<string, unknown>>): Promise<string> {
  const r = await client.callTool({ name: 'terminal', argumentsJson: JSON.stringify(args), taskId, sessionId: '' });
  return r.resultJson;
}

function fairShareCase(mode: BenchMode): LoadCase {
  // settleMs: how long the load runs before the probe is timed; the fork bombs reach the pids limit by then.
  const { tasks, calls, settleMs } = SIZES[mode];
  const loadTasks = Array.from({ length: tasks }, (_, i) => `bench-fair-load-${i}`);
  let load: DispatcherClient | undefined;
  let probe: DispatcherClient | undefined;

  const sessions: Array<{ readonly taskId: string; readonly sessionId: string }> = [];
  const startLoad = async () => {
    // One kind of load at a time in every task, so the fork bombs start last everywhere.
    for (const command of LOAD_COMMANDS) {
      await Promise.all(
        loadTasks.map(async (taskId) => {
          const started = JSON.parse(await terminal(load!, taskId, { command, background: true })) as { session_id?: unknown };
          if (typeof started.session_id !== 'string') throw new Error(`starting the load in ${taskId} failed: ${JSON.stringify(started)}`);
          sessions.push({ taskId, sessionId: started.session_id });
        }),
      );
    }
  };
  // Kills every load by its process group, fork bombs first: they hold the pids the others need to exit cleanly.
  const stopLoad = async () => {
    const running = sessions.splice(0).reverse();
    for (let i = 0; i < running.length; i += tasks) {
      await Promise.all(
        running.slice(i, i + tasks).map(({ taskId, sessionId }) =>
          load!.callTool({ name: 'process', argumentsJson: JSON.stringify({ action: 'kill', session_id: sessionId }), taskId, sessionId: '' }),
        ),
      );
    }
  };
  const probeRound = async (): Promise<LoadRound> => {
    const latenciesMs: number[] = [];
    let errors = 0;
    let firstError: string | undefined;
    const started = performance.now();
    for (let i = 0; i < calls; i++) {
      const t0 = performance.now();
      try {
        checkTerminalResult(await terminal(probe!, PROBE_TASK, { command: 'true' }));
        latenciesMs.push(performance.now() - t0);
      } catch (err) {
        errors += 1;
        firstError ??= err instanceof Error ? err.message : String(err);
      }
    }
    return { latenciesMs, elapsedMs: performance.now() - started, errors, ...(firstError ? { firstError } : {}) };
  };

  return {
    kind: 'load',
    name: `terminal \`true\` of one tenant while another saturates ${tasks} task${tasks === 1 ? "" : "s"} (CPU burner, fork bomb, memory hog, output flood each), docker`,
    baselineName: `the same while the other tenant's ${tasks} tasks are idle (their load killed between rounds)`,
    concurrency: 1,
    plan: { quick: { pairs: 4, minPairs: 3, budgetMs: 30_000 }, full: { pairs: 10, minPairs: 5 } },
    targets: [
      {
        target: `fair share: one tenant saturating ${tasks} tasks leaves another's terminal p50 within 3× of idle`,
        judge: (r) => ({
          measured: `${r.load!.ratioP50.toFixed(2)}× (p50 ${r.load!.a.latency.p50.toFixed(1)} ms loaded vs ${r.load!.b.latency.p50.toFixed(1)} ms idle)`,
          met: r.load!.ratioP50 <= 3,
        }),
      },
    ],
    async setup(ctx) {
      const missing = await ctx.backendMissing('docker');
      if (missing !== undefined) return { skip: missing };
      const server = await ctx.server(SERVER_OPTIONS);
      load = tenantClient(server, LOAD_KEY);
      probe = tenantClient(server, PROBE_KEY);
      await unmeasured(ctx, "creating the probe's task", async () => checkTerminalResult(await terminal(probe!, PROBE_TASK, { command: 'true' })));
      await Promise.all(
        loadTasks.map((taskId) =>
          unmeasured(ctx, `creating load task ${taskId}`, async () => checkTerminalResult(await terminal(load!, taskId, { command: 'true' }))),
        ),
      );
      return undefined;
    },
    async runA() {
      await startLoad();
      try {
        await sleep(settleMs);
        return await probeRound();
      } finally {
        await stopLoad();
      }
    },
    runB: () => probeRound(),
    async teardown() {
      if (load !== undefined) await stopLoad().catch(() => undefined);
      await Promise.allSettled([
        ...(probe ? [probe.endTask({ taskId: PROBE_TASK })] : []),
        ...(load ? loadTasks.map((taskId) => load!.endTask({ taskId })) : []),
      ]);
    },
  };
}

export default function cases(mode: BenchMode): BenchCase[] {
  return [fairShareCase(mode)];
}
