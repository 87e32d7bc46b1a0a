/**
 * The kubernetes backend, against the Kubernetes stand-in (a test double of
 * a Kubernetes API server whose pods are containers of the local Docker
 * engine; found through test-doubles.ts), reached through the kubeconfig it
 * writes, as a cluster would be:
 *
 * - a trivial command on a warm task (its exec agent running in the pod,
 *   one long-lived `pods/exec` stream), through the whole stack, beside one
 *   per-command `pods/exec` of `true` in the same pod through the same
 *   client (@kubernetes/client-node, the backend's own per-command channel,
 *   what every command costs in an image without python3). The baseline
 *   leaves out the gRPC hop, the dispatcher and the shell-state runner, so
 *   the ratio is if anything unfavourable to the agent. Target: the agent at
 *   least 3× faster (p50).
 * - the first command of a new task whose pod comes from the warm pool
 *   (`kubernetes.warm_pool`) beside one whose pod is created on the call.
 *
 * Stand-in figures, not a cluster's: there every exec also crosses the API
 * server and the kubelet, and a cold pod also waits for the scheduler and
 * possibly an image pull.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { KubeApi } from '../../../executor/backends/kubernetes/kube-api.js';
import type { PodExecChannel } from '../../../executor/backends/kubernetes/pod-exec-channel.js';
import type { BenchCase, BenchContext, LatencyCase, Skip } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { runTerminal, unmeasured } from '../case-helpers.js';
import { formatMs } from '../stats.js';
import { startStandin, type StartedStandin } from '../test-doubles.js';

const IMAGE = 'berth-sandbox:latest';
const NAMESPACE = 'berth-bench';
const WARM_TASK = 'bench-kubernetes-warm';
const WARM_POOL = 2;
const POOL_WAIT_MS = 120_000;

/** A stand-in with its kubeconfig, the client the bench itself uses, and bench servers pointed at it. */
interface Cluster {
  readonly standin: StartedStandin;
  readonly scratch: string;
  readonly kubeconfig: string;
  readonly api: KubeApi;
}

async function startCluster(ctx: BenchContext): Promise<Cluster | Skip> {
  const missing = (await ctx.backendMissing('kubernetes')) ?? (await ctx.dockerUnavailable());
  if (missing !== undefined) return { skip: missing };
  const scratch = mkdtempSync(join(tmpdir(), 'berth-bench-kubernetes-'));
  const kubeconfig = join(scratch, 'kubeconfig');
  const started = await startStandin('kubernetes', ctx.repoRoot, {}, ['--kubeconfig', kubeconfig, '--namespace', NAMESPACE, '--node-cpu', '64', '--node-memory', '64Gi']);
  if ('skip' in started) {
    rmSync(scratch, { recursive: true, force: true });
    return started;
  }
  const saved = process.env.KUBECONFIG;
  process.env.KUBECONFIG = kubeconfig;
  try {
    const { KubeApi } = await import('../../../executor/backends/kubernetes/kube-api.js');
    return { standin: started, scratch, kubeconfig, api: await KubeApi.load({ namespace: NAMESPACE }) };
  } finally {
    if (saved === undefined) delete process.env.KUBECONFIG;
    else process.env.KUBECONFIG = saved;
  }
}

async function stopCluster(cluster: Cluster | undefined): Promise<void> {
  if (!cluster) return;
  await cluster.standin.stop();
  rmSync(cluster.scratch, { recursive: true, force: true });
}

function server(ctx: BenchContext, cluster: Cluster, executorId: string, warmPool: number): Promise<BenchServer> {
  return ctx.server({
    backend: 'kubernetes',
    config: {
      // Small requests: the stand-in's one node must hold the pool, the warm task and cold pods still terminating.
      terminal: { kubernetes_image: IMAGE, container_persistent: false, container_cpu: 1, container_memory: 1024, container_disk: 1024 },
      kubernetes: { namespace: NAMESPACE, executor_id: executorId, warm_pool: warmPool },
    },
    env: { KUBECONFIG: cluster.kubeconfig },
    // The server serves once its warm pool is filled: pods start in seconds each on a busy machine.
    startTimeoutMs: 180_000,
  });
}

/** Running pods of executor `executorId` matching `extra` (a label selector), through the bench's client. */
async function runningPods(cluster: Cluster, executorId: string, extra = ''): Promise<string[]> {
  const pods = await cluster.api.listPods(`berth.dev/executor=${executorId}${extra ? `,${extra}` : ''}`);
  return pods.filter((p) => p.status?.phase === 'Running' && !p.metadata?.deletionTimestamp).map((p) => p.metadata!.name!);
}

function warmTaskCase(): LatencyCase {
  let cluster: Cluster | undefined;
  let s: BenchServer | undefined;
  let channel: PodExecChannel | undefined;
  const executorId = 'bench-warm';
  return {
    kind: 'latency',
    name: 'terminal `true`, kubernetes backend (Kubernetes stand-in), warm task: exec agent',
    baselineName: 'one per-command `pods/exec` of `true` in the same pod, same client (@kubernetes/client-node)',
    plan: { quick: { pairs: 60, minPairs: 15, budgetMs: 20_000 } },
    targets: [
      {
        target: 'terminal on a warm kubernetes task: ≥ 3× faster than a per-command pods/exec (p50, stand-in)',
        judge: (r) => {
          const speedup = r.latency!.b.p50 / r.latency!.a.p50;
          return { measured: `${speedup.toFixed(1)}× (${formatMs(r.latency!.a.p50)} vs ${formatMs(r.latency!.b.p50)})`, met: speedup >= 3 };
        },
      },
    ],
    async setup(ctx) {
      const c = await startCluster(ctx);
      if ('skip' in c) return c;
      cluster = c;
      const started = await server(ctx, c, executorId, 0);
      s = started;
      await unmeasured(ctx, "starting the kubernetes task's pod and agent", () => runTerminal(started, WARM_TASK, 'true'));
      const [pod] = await runningPods(c, executorId);
      if (!pod) throw new Error('the warm task has no running pod');
      const { PodExecChannel } = await import('../../../executor/backends/kubernetes/pod-exec-channel.js');
      channel = new PodExecChannel(c.api, pod, `pod ${pod}`);
      return undefined;
    },
    runA: () => runTerminal(s!, WARM_TASK, 'true'),
    runB: async () => {
      const proc = await channel!.spawn({ script: 'true', cwd: '/', onOutput: () => undefined });
      const exit = await proc.exited;
      if (exit.code !== 0) throw new Error(`the per-command exec of true exited ${exit.code}`);
    },
    async teardown() {
      channel?.close();
      await s?.endTask(WARM_TASK).catch(() => undefined);
      await s?.stop().catch(() => undefined);
      await stopCluster(cluster);
    },
  };
}

function newTaskCase(): LatencyCase {
  let cluster: Cluster | undefined;
  let warm: BenchServer | undefined;
  let cold: BenchServer | undefined;
  let ctx: BenchContext | undefined;
  let n = 0;
  let misses = 0;
  const waitForPool = async () => {
    const deadline = Date.now() + POOL_WAIT_MS;
    while ((await runningPods(cluster!, 'bench-pool', 'berth.dev/pool=warm')).length < WARM_POOL) {
      if (Date.now() > deadline) throw new Error(`the warm pool did not fill to ${WARM_POOL} within ${POOL_WAIT_MS} ms`);
      await sleep(100);
    }
  };
  /** The first call of a new task on `on`, timed; the task ends untimed. */
  const firstCall = async (on: BenchServer, kind: string) => {
    const task = `bench-k8s-${kind}-${process.pid}-${n++}`;
    const t0 = performance.now();
    await runTerminal(on, task, 'true');
    const ms = performance.now() - t0;
    await on.endTask(task);
    return ms;
  };
  return {
    kind: 'latency',
    name: `new task, first \`true\`, kubernetes warm pool (${WARM_POOL}, Kubernetes stand-in)`,
    baselineName: 'the same, pod created on the call (no warm pool)',
    plan: {
      smoke: { pairs: 1 },
      quick: { warmupPairs: 1, pairs: 12, minPairs: 4, budgetMs: 60_000 },
      full: { warmupPairs: 2, pairs: 60, minPairs: 20, budgetMs: 300_000 },
    },
    targets: [
      {
        target: 'first command of a new kubernetes task from the warm pool: ≥ 2× faster than a cold pod (p50, stand-in)',
        judge: (r) => {
          const speedup = r.latency!.b.p50 / r.latency!.a.p50;
          return { measured: `${speedup.toFixed(1)}× (${formatMs(r.latency!.a.p50)} vs ${formatMs(r.latency!.b.p50)})`, met: speedup >= 2 };
        },
      },
    ],
    async setup(context) {
      ctx = context;
      const c = await startCluster(context);
      if ('skip' in c) return c;
      cluster = c;
      warm = await server(context, c, 'bench-pool', WARM_POOL);
      cold = await server(context, c, 'bench-cold', 0);
      return undefined;
    },
    async runA() {
      await waitForPool();
      const before = await runningPods(cluster!, 'bench-pool', 'berth.dev/pool=warm');
      const ms = await firstCall(warm!, 'warm');
      // A claimed pod is relabelled: one pod fewer in the pool than before (or refilled already), never more started cold.
      const after = await runningPods(cluster!, 'bench-pool', 'berth.dev/pool=warm');
      if (before.every((p) => after.includes(p))) misses += 1;
      return ms;
    },
    runB: () => firstCall(cold!, 'cold'),
    async teardown() {
      if (misses > 0) ctx?.note(`kubernetes new task: ${misses} of ${n} warm-side first calls may not have claimed a pool pod`);
      await warm?.stop().catch(() => undefined);
      await cold?.stop().catch(() => undefined);
      await stopCluster(cluster);
    },
  };
}

export default function cases(): BenchCase[] {
  return [warmTaskCase(), newTaskCase()];
}
