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
 *
 * The cold case has a second baseline, run after each `docker run` round
 * and reported as a note: the engine's own start of Berth's container. As
 * many containers at once through the Engine API, each with the create
 * options container-spec.ts builds for a task of the bench server (its
 * config, its tenant's network and cgroup parent, learnt from the first
 * task's container; a host directory with the account files bound in), but
 * running `true` in place of the agent; each waited for and removed
 * (engine-start.ts). A container that only sleeps holds the network for the
 * case's length, since another executor's close would remove it between
 * rounds. What Berth's burst costs beyond it is Berth's; what it
 * costs beyond `docker run` is the spec's.
 *
 * A third case splits the cold burst's first calls into stages from tracing
 * spans, as call-breakdown does for a warm call: the server exports every
 * span to an OTLP receiver this process runs, and each task's first call is
 * split along its spans (the dispatcher's tool call, the executor's Exec,
 * the backend's operations, the steps of `docker create_environment`). The
 * same number of `docker run`s at once runs between its bursts, as the
 * baseline beside it (a note, since a breakdown has no baseline column).
 */
import { performance } from 'node:perf_hooks';
import type Docker from 'dockerode';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BenchCase, BenchContext, BenchMode, BreakdownCase, LoadCase, LoadRound, RunPlan, StagedCall } from '../bench-case.js';
import type { BenchServer, BenchServerOptions } from '../bench-server-process.js';
import { concurrentRound, runProcess, runTerminal, unmeasured } from '../case-helpers.js';
import { parseConfig } from '../../../common/config-load.js';
import { BENCH_LABEL, DOCKER_SERVER, SANDBOX_IMAGE, dockerClient, servedFromPool, waitForPool, waitForTaskContainersGone } from '../docker-helpers.js';
import {
  benchHostDir,
  engineRound,
  holdNetwork,
  placementOf,
  removeEngineLeftovers,
  taskSpecRunningTrue,
  type BenchHostDir,
  type EngineSteps,
} from '../engine-start.js';
import { SPAN_KIND, startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../otlp-receiver.js';
import { formatMs, formatRatio, median, ratio } from '../stats.js';
import { ms, spanChildren, tracedServer } from './call-breakdown.js';

const TASKS: Readonly<Record<BenchMode, number>> = { smoke: 2, quick: 8, full: 20 };
const TARGET_RATIO = 1;
/**
 * Each container's memory limit, MiB. The default (5120) would have the
 * memory admission (`docker.memory_overcommit`) refuse a burst of twenty on
 * a small host; the limit does not change what a start costs.
 */
const CONTAINER_MEMORY_MIB = 256;
/** The bursts' plan; the warm-up pairs are named, since the second baseline's note leaves them out too. */
const PLAN: Readonly<Record<BenchMode, Partial<RunPlan>>> = {
  smoke: { warmupPairs: 0, pairs: 1 },
  quick: { warmupPairs: 0, pairs: 3, minPairs: 2, budgetMs: 45_000 },
  full: { warmupPairs: 1, pairs: 10, minPairs: 5 },
};
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

/** The second baseline of the cold burst: the engine's own start of Berth's container, `tasks` at once (engine-start.ts). */
class EngineBaseline {
  readonly #tasks: number;
  #docker: Docker | undefined;
  #dirs: BenchHostDir[] = [];
  #specs: Docker.ContainerCreateOptions[] = [];
  /** Each round's latencies and its containers' steps. */
  readonly rounds: { readonly round: LoadRound; readonly steps: EngineSteps[] }[] = [];

  constructor(tasks: number) {
    this.#tasks = tasks;
  }

  /** Builds the specs from the server's config and the container of its task `task`, while that runs. */
  async prepare(server: BenchServer, config: Readonly<Record<string, unknown>>, task: string): Promise<void> {
    const docker = await dockerClient();
    this.#docker = docker;
    const label = [`berth.executor.pid=${server.pid}`, `berth.task=${task}`];
    const [found] = await docker.listContainers({ all: true, filters: { label } });
    if (!found) throw new Error(`the container of task ${task} was not found`);
    const placement = placementOf(await docker.getContainer(found.Id).inspect());
    const parsed = parseConfig(config);
    if (placement.network.startsWith('berth-isolated-')) await holdNetwork(docker, placement.network, parsed.terminal.docker_image);
    for (let i = 0; i < this.#tasks; i++) this.#dirs.push(await benchHostDir());
    this.#specs = this.#dirs.map((d, i) => taskSpecRunningTrue(parsed, placement, `bench-engine-${process.pid}-${i}`, d.path));
  }

  async round(): Promise<void> {
    const steps: EngineSteps[] = [];
    this.rounds.push({ round: await engineRound(this.#docker!, this.#specs, steps), steps });
  }

  /** The note comparing `berth`'s rounds with this baseline's (the first `warmup` of each left out). */
  summary(name: string, berth: readonly LoadRound[], warmup: number): string | undefined {
    const ours = this.rounds.slice(warmup);
    const a = berth.slice(warmup).flatMap((r) => r.latenciesMs);
    const b = ours.flatMap((r) => r.round.latenciesMs);
    if (a.length === 0 || b.length === 0) return undefined;
    const steps = ours.flatMap((r) => r.steps);
    const step = (key: keyof EngineSteps) => formatMs(median(steps.map((s) => s[key])));
    const errors = ours.reduce((t, r) => t + r.round.errors, 0);
    const failed = ours.find((r) => r.round.firstError)?.round.firstError;
    return (
      `${name} against the engine's own start of Berth's container (${this.#tasks} created and started at once through the Engine API ` +
      `with the spec container-spec.ts builds for a task, running \`true\`, waited for and removed): p50 ${formatMs(median(a))} vs ` +
      `${formatMs(median(b))} (${formatRatio(ratio(median(a), median(b)))}) over ${b.length} containers; the engine's steps, p50: ` +
      `create ${step('createMs')}, start ${step('startMs')}, until exit ${step('waitMs')}, remove ${step('removeMs')}` +
      (errors > 0 ? `; ${errors} failed, first: ${failed}` : '')
    );
  }

  async close(): Promise<void> {
    if (this.#docker) await removeEngineLeftovers(this.#docker);
    await Promise.all(this.#dirs.map((d) => d.remove()));
    this.#dirs = [];
  }
}

function burstCase(tasks: number, pooled: boolean): LoadCase {
  let server: BenchServer | undefined;
  let ctx: BenchContext | undefined;
  let round = 0;
  let calls = 0;
  let misses = 0;
  const options = serverOptions(tasks, pooled);
  const engine = pooled ? undefined : new EngineBaseline(tasks);
  const rounds: LoadRound[] = [];
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
    rounds.push(result);
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
    plan: PLAN,
    async setup(context) {
      ctx = context;
      const missing = await context.backendMissing('docker');
      if (missing !== undefined) return { skip: missing };
      const s = await context.server(options);
      server = s;
      // A first task makes what every later one finds (the image checked, the network); not measured.
      await unmeasured(context, 'a first docker task', async () => {
        await runTerminal(s, `bench-docker-burst-${process.pid}-first`, 'true');
        await engine?.prepare(s, options.config ?? {}, `bench-docker-burst-${process.pid}-first`);
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
      const round = await concurrentRound(tasks, 1, () => runProcess('docker', ['run', '--rm', '--label', BENCH_LABEL, SANDBOX_IMAGE, 'true']));
      await engine?.round();
      return round;
    },
    async teardown() {
      if (misses > 0) ctx?.note(`${name}: ${misses} of ${calls} first calls found the pool empty and started cold`);
      const summary = ctx && engine?.summary(name, rounds, PLAN[ctx.mode].warmupPairs ?? 0);
      if (summary) ctx?.note(summary);
      await engine?.close();
      server = undefined;
    },
  };
}

/**
 * The steps of `docker create_environment` that have spans of their own
 * (stage-spans.ts), in the order a cold start takes them, each with its stage
 * name. A step with two spans (network_setup) counts both.
 */
const CREATE_STEPS: readonly (readonly [span: string, stage: string])[] = [
  ['docker memory_admission', 'memory admission (`docker.memory_overcommit`: waiting for room)'],
  ['docker uid_pick', 'uid pick (list containers and volumes carrying a free uid)'],
  ['docker network_setup', "network setup (the tenant's isolated network, made once; closing the embedded DNS in the container)"],
  ['docker host_dir', "host dir (the task's directory, account files from the image)"],
  ['docker start_queue', 'start queue (waiting for a turn under `docker.start_concurrency`)'],
  ['docker container_create', 'container create (`POST /containers/create`)'],
  ['docker container_start', 'container start (`POST /containers/ID/start`)'],
  ['docker agent_connect', "agent connected (the agent's hello, after the start returned)"],
  ['docker environment_init', "environment init (the cgroup counters' baselines, through the agent)"],
];

/** The stages of a cold task's first call, in order; their sum is the client-side total. */
export const COLD_STAGES: readonly string[] = [
  'client and gRPC: the client total (from the burst start) less the dispatcher span',
  'dispatcher: its span less the executor calls in it',
  'executor: the executor calls less the backend operations in them',
  ...CREATE_STEPS.map(([, stage]) => stage),
  'create_environment, the rest (image check, name conflict check, agent socket and token, the environment object)',
  "login shell snapshot (the bootstrap's `bash -l` exec and the snapshot's stat)",
  'first command (`true`): its exec, restore and capture the shell state',
];

/**
 * Splits a new task's first call into {@link COLD_STAGES} from its spans:
 * every stage a span duration or a difference of durations (exact, one
 * server process's clock), the first the client total less the tool span.
 * Undefined while its spans are not all in: the tool call's, an executor
 * call in it, a `docker create_environment` and a `docker exec` in that.
 */
export function coldStagesOf(totalMs: number, tool: ReceivedSpan, children: ReadonlyMap<string, readonly ReceivedSpan[]>): StagedCall | undefined {
  const dur = (s: ReceivedSpan) => ms(s.startTimeUnixNano, s.endTimeUnixNano);
  const sum = (list: readonly ReceivedSpan[]) => list.reduce((t, s) => t + dur(s), 0);
  const kids = (s: ReceivedSpan) => children.get(s.spanId) ?? [];
  const executorCalls = kids(tool).filter((s) => s.name.startsWith('berth.v1.Executor/') && s.kind === SPAN_KIND.server);
  const operations = executorCalls.flatMap((e) => kids(e).filter((s) => s.name.startsWith('docker ')));
  const create = operations.filter((s) => s.name === 'docker create_environment');
  const execs = operations.filter((s) => s.name === 'docker exec').sort((a, b) => (a.startTimeUnixNano < b.startTimeUnixNano ? -1 : 1));
  if (create.length !== 1 || execs.length === 0) return undefined;
  // The command is the last exec; what came before it besides the create (the bootstrap's exec and stat) made the snapshot.
  const command = execs[execs.length - 1]!;
  const bootstrap = operations.filter((s) => s !== create[0] && s !== command);
  const steps = kids(create[0]!);
  const stepMs = CREATE_STEPS.map(([name]) => sum(steps.filter((s) => s.name === name)));
  const stagesMs = [
    totalMs - dur(tool),
    dur(tool) - sum(executorCalls),
    sum(executorCalls) - sum(operations),
    ...stepMs,
    dur(create[0]!) - stepMs.reduce((t, v) => t + v, 0),
    sum(bootstrap),
    dur(command),
  ];
  return { totalMs, stagesMs };
}

/** Where a cold burst's first calls spend their time, by stage, with `docker run`s at once between its bursts. */
function coldBreakdownCase(tasks: number): BreakdownCase {
  let receiver: OtlpReceiver | undefined;
  let server: BenchServer | undefined;
  let ctx: BenchContext | undefined;
  let round = 0;
  const dockerRunMs: number[] = [];
  const ids = (r: number) => Array.from({ length: tasks }, (_, i) => `bench-docker-burst-staged-${process.pid}-${r}-${i}`);
  /** One burst: each task's first call, timed from the burst's start; the tasks end untimed. */
  const burst = async (taskIds: readonly string[]): Promise<Map<string, number>> => {
    const totals = new Map<string, number>();
    const t0 = performance.now();
    await Promise.all(
      taskIds.map(async (id) => {
        await runTerminal(server!, id, 'true');
        totals.set(id, performance.now() - t0);
      }),
    );
    await Promise.all(taskIds.map((id) => server!.endTask(id).catch(() => undefined)));
    await waitForTaskContainersGone(server!.pid);
    return totals;
  };
  return {
    kind: 'breakdown',
    name: `${tasks} new tasks at once, first \`true\`, docker cold: per stage`,
    baselineName: 'client total (from the burst start)',
    stages: COLD_STAGES,
    // Pairs are bursts here: each gives `tasks` calls.
    plan: {
      smoke: { pairs: 1, minPairs: 1 },
      quick: { warmupPairs: 0, pairs: 3, minPairs: 2, budgetMs: 45_000 },
      full: { warmupPairs: 0, pairs: 5, minPairs: 3, budgetMs: 120_000 },
    },
    async setup(context) {
      ctx = context;
      const missing = await context.backendMissing('docker');
      if (missing !== undefined) return { skip: missing };
      receiver = await startOtlpReceiver();
      const s = await context.server(tracedServer(receiver, serverOptions(tasks, false)));
      server = s;
      await unmeasured(context, 'a first docker task', async () => {
        await runTerminal(s, `bench-docker-burst-staged-${process.pid}-first`, 'true');
        await s.endTask(`bench-docker-burst-staged-${process.pid}-first`);
      });
      await waitForTaskContainersGone(s.pid);
      return undefined;
    },
    async run(plan: RunPlan): Promise<StagedCall[]> {
      const totals = new Map<string, number>();
      const startedMs = performance.now();
      while (round < plan.pairs && (round < plan.minPairs || performance.now() - startedMs <= plan.budgetMs)) {
        for (const [id, total] of await burst(ids(round))) totals.set(id, total);
        round += 1;
        const baseline = await concurrentRound(tasks, 1, () => runProcess('docker', ['run', '--rm', '--label', BENCH_LABEL, SANDBOX_IMAGE, 'true']));
        if (baseline.errors > 0) throw new Error(`docker run failed: ${baseline.firstError}`);
        dockerRunMs.push(...baseline.latenciesMs);
      }
      const staged = (spans: ReceivedSpan[]): Map<string, StagedCall | undefined> => {
        const children = spanChildren(spans);
        const tools = spans.filter((s) => s.name === 'execute_tool terminal' && s.kind === SPAN_KIND.server);
        return new Map(
          [...totals].map(([id, total]) => {
            const tool = tools.find((s) => s.attributes['berth.task.id'] === id);
            return [id, tool && coldStagesOf(total, tool, children)];
          }),
        );
      };
      const received = await receiver!.waitFor(`the spans of ${totals.size} first calls`, (spans) =>
        [...staged(spans).values()].every((c) => c !== undefined),
      );
      return [...staged(received).values()] as StagedCall[];
    },
    async teardown() {
      if (dockerRunMs.length > 0) {
        const mean = dockerRunMs.reduce((t, v) => t + v, 0) / dockerRunMs.length;
        ctx?.note(
          `${tasks} × \`docker run --rm IMAGE true\` at once, between the per-stage case's bursts: ` +
            `p50 ${median(dockerRunMs).toFixed(0)} ms, mean ${mean.toFixed(0)} ms over ${dockerRunMs.length} runs`,
        );
      }
      server = undefined;
      await receiver?.close();
    },
  };
}

export default function cases(mode: BenchMode): BenchCase[] {
  const tasks = TASKS[mode];
  // The per-stage case before the pooled one, whose server keeps a pool of idle containers.
  return [burstCase(tasks, false), coldBreakdownCase(tasks), burstCase(tasks, true)];
}
