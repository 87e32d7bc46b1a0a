/**
 * The `kubernetes` backend: a pod per task in the configured namespace,
 * scheduled by the cluster, driven through the official
 * `@kubernetes/client-node` (loaded only by this backend).
 *
 * - The pod (pod-spec.ts) is hardened and limited from config and labelled
 *   with the executor, the tenant and the task (keyed hashes), so a
 *   restarted executor finds a task's pod again by label. It runs as a uid
 *   of its own (pod-uids.ts) unless `kubernetes.run_as_user` fixes one.
 * - The exec agent runs in it through one `pods/exec` WebSocket
 *   (pod-exec.ts): the agent's source goes over stdin to `python3 -I -S -c`,
 *   and every command, file operation and kill after that is a message on
 *   that stream. A dropped stream is resumed in the same pod; an evicted or
 *   deleted pod is replaced (kubernetes-environment.ts). execute_code runs
 *   in the pod through the agent's relay.
 * - An image without python3 (3.8 or newer): each command and file
 *   operation is a `pods/exec` of its own (pod-exec-channel.ts), said once
 *   in the log and by `berth doctor`; execute_code is refused there.
 * - `container_persistent`: two PersistentVolumeClaims per task
 *   (`/workspace` and the home directory), kept across releases and
 *   executor restarts; EndTask deletes them with the pod.
 * - `kubernetes.warm_pool`: pods started ahead, claimed by relabelling
 *   (warm-pool.ts).
 * - Failures (pod-start.ts, kube-errors.ts) are errors naming the pod and
 *   what to do; a pod that did not start is deleted.
 */
import { randomBytes } from 'node:crypto';
import path, { posix } from 'node:path';
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type {
  Backend,
  BackendCapabilities,
  BackendEnvironment,
  BackendSnapshot,
  CreateEnvironmentOptions,
  DiagnosisPhase,
  DiagnosticFinding,
  TaskKey,
} from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import type { AgentChannel } from '../shared/agent/agent-channel.js';
import { bootstrapCode } from '../shared/agent/agent-bootstrap.js';
import { AGENT_FILE_NAME, loadAgentScript } from '../shared/agent/agent-script.js';
import { AgentUnavailableError, startStdioAgent } from '../shared/agent/stdio-agent.js';
import { tenantPolicy, type NetworkPolicy, type TenantNetworkOverride } from '../shared/network-policy.js';
import { runSetupCommand } from '../shared/channel-commands.js';
import { KubeApi } from './kube-api.js';
import { DEFAULT_SNAPSHOT_MAX_BYTES, KubeSnapshots } from './kube-snapshots.js';
import { KubernetesEnvironment, SANDBOX_CODE_DIR, type LivePod, type PodFate, type TaskPods } from './kubernetes-environment.js';
import { checkNetworkPolicies, ensureNetworkPolicies, policyLabelValue } from './network-policy.js';
import { PodExecProcess } from './pod-exec.js';
import { PodExecChannel } from './pod-exec-channel.js';
import {
  LABEL,
  WORKSPACE_DIR,
  buildClaim,
  buildPod,
  claimNames,
  executorLabels,
  fixedIdentity,
  podLabels,
  selectorOf,
  taskLabelValues,
  taskPodName,
  type PodIdentity,
  type PodSettings,
} from './pod-spec.js';
import { fateOf, waitForRunning } from './pod-start.js';
import { PodUids, podUidRange } from './pod-uids.js';
import { WarmPool } from './warm-pool.js';

export interface KubernetesBackendOptions {
  readonly pod: Omit<PodSettings, 'namespace'>;
  /** kubeconfig context; empty: the current one. */
  readonly context?: string;
  /** Empty: the context's namespace. */
  readonly namespace?: string;
  readonly persistent: boolean;
  readonly storageClass?: string;
  readonly warmPool?: number;
  readonly pendingTimeoutMs: number;
  /** `kubernetes.task_uids`: the uids pods get one of each when `pod.runAsUser` is unset; empty: the default. */
  readonly taskUids?: string;
  /** Keys the label hashes of tenants and tasks (`executor.shared_secret`). */
  readonly labelSecret: string;
  /** The operator's network policy (`docker.egress`, `docker.egress_allow`); egress open when absent. */
  readonly network?: NetworkPolicy;
  /** `tenants[].network`: narrows the operator's policy per tenant. */
  readonly tenantNetworks?: Readonly<Record<string, TenantNetworkOverride>>;
  /** `terminal.cwd`: where tasks start; /workspace when empty. */
  readonly initialCwd?: string;
  readonly killGraceMs?: number;
  /** `executor.state_root`: snapshots (copies of a task's workspace and home) are kept under it; unset: no snapshots. */
  readonly stateRoot?: string;
  /** Largest snapshot archive; default {@link DEFAULT_SNAPSHOT_MAX_BYTES}. */
  readonly snapshotMaxBytes?: number;
  readonly logger?: Logger;
}

/**
 * The policy label of an unclaimed warm pod: no egress object selects it,
 * so only the namespace's `berth-default-deny` does (no traffic at all)
 * until a task claims it and it takes that task's policy label.
 */
export const WARM_POLICY_LABEL = 'warm';

export class KubernetesBackend implements Backend, TaskPods {
  readonly #o: KubernetesBackendOptions;
  readonly #api: KubeApi;
  readonly #pod: PodSettings;
  readonly #environments = new Map<string, KubernetesEnvironment>();
  readonly #pool: WarmPool | undefined;
  /** Each pod's own uid; undefined under a fixed `kubernetes.run_as_user`. */
  readonly #uids: PodUids | undefined;
  /** Why the image cannot run the exec agent, once a pod said so: later pods go straight to per-command exec. */
  #noAgent: string | undefined;
  readonly #snapshots: KubeSnapshots | undefined;
  #closed = false;

  private constructor(options: KubernetesBackendOptions, api: KubeApi) {
    this.#o = options;
    this.#api = api;
    this.#pod = { ...options.pod, namespace: api.namespace };
    this.#uids = fixedIdentity(this.#pod)
      ? undefined
      : new PodUids({ api, ...(options.taskUids ? { configured: options.taskUids } : {}), userNamespace: options.pod.userNamespace ?? false });
    const size = options.warmPool ?? 0;
    if (size > 0 && options.persistent) {
      options.logger?.warn(
        { backend: 'kubernetes' },
        'kubernetes.warm_pool is not used with terminal.container_persistent: true: a warm pod starts before its task is known, and a running pod cannot mount the task\'s claims',
      );
    }
    this.#pool =
      size > 0 && !options.persistent
        ? new WarmPool({
            api,
            settings: this.#pod,
            size,
            policy: WARM_POLICY_LABEL,
            pendingTimeoutMs: options.pendingTimeoutMs,
            withIdentity: (name, create) => this.#withIdentity(name, undefined, undefined, create),
            ...(options.logger ? { logger: options.logger } : {}),
          })
        : undefined;
    this.#snapshots = options.stateRoot
      ? new KubeSnapshots({
          api,
          root: path.join(options.stateRoot, 'kubernetes-snapshots'),
          ownerOf: (tenant) => taskLabelValues(options.labelSecret, { tenant, taskId: '' }).tenant,
          maxBytes: options.snapshotMaxBytes ?? DEFAULT_SNAPSHOT_MAX_BYTES,
        })
      : undefined;
  }

  /** Loads the client, reads the kubeconfig and checks that the namespace answers. */
  static async start(options: KubernetesBackendOptions): Promise<KubernetesBackend> {
    if (!options.pod.image) throw new FailedPreconditionError('terminal.kubernetes_image: the kubernetes backend needs an image with bash (and python3 for the exec agent)');
    // A range that cannot be used stops the executor before it reaches the cluster.
    if (!fixedIdentity(options.pod)) podUidRange(options.taskUids, options.pod.userNamespace ?? false);
    const api = await KubeApi.load({ ...(options.context ? { context: options.context } : {}), ...(options.namespace ? { namespace: options.namespace } : {}) });
    // One cheap call that needs the namespace and the list verb: an unreachable server or missing RBAC shows at start.
    await api.listPods(selectorOf(executorLabels({ executorId: options.pod.executorId })));
    const backend = new KubernetesBackend(options, api);
    // What a killed executor's snapshot or suspension left under the state root, once too old to be a write under way.
    const swept = await backend.#snapshots?.sweep().catch((err: unknown) => {
      options.logger?.warn({ backend: 'kubernetes', err }, 'removing leftovers of interrupted snapshots failed');
      return [];
    });
    if (swept?.length) options.logger?.info({ backend: 'kubernetes', files: swept }, 'removed leftovers of interrupted snapshots');
    options.logger?.info({ backend: 'kubernetes', server: api.server, namespace: api.namespace, via: api.source, image: options.pod.image }, 'kubernetes backend ready');
    await backend.#pool?.fill();
    return backend;
  }

  get capabilities(): BackendCapabilities {
    // Every pod runs execute_code itself (the agent relays rpc.sock): the executor needs no code containers.
    return {
      name: 'kubernetes',
      pty: true,
      hostFilesystem: false,
      sharesRpcDir: true,
      lifecycle: {
        snapshot: this.#snapshots !== undefined,
        processes: false,
        suspend: this.#snapshots !== undefined,
        notes: this.#snapshots
          ? [
              "snapshots are copies of the task's workspace and home (tar in the pod, kept under executor.state_root); running processes are not kept",
              "suspend keeps the task's files (workspace, home, /tmp) and shell state under executor.state_root and deletes its pod; resuming starts a new pod with them: background processes end",
            ]
          : ['snapshots and suspension need executor.state_root, where the kubernetes backend keeps them'],
      },
    };
  }

  get persistent(): boolean {
    return this.#o.persistent;
  }

  get namespace(): string {
    return this.#api.namespace;
  }

  /** `kubernetes.executor_id`: the `berth.dev/executor` label of this executor's pods. */
  get executorId(): string {
    return this.#pod.executorId;
  }

  /** The client this backend uses (tests look at the cluster through it). */
  get api(): KubeApi {
    return this.#api;
  }

  /** The tenant's network policy: the operator's, narrowed by the tenant's override. */
  policyOf(tenant: string): NetworkPolicy {
    return tenantPolicy(this.#o.network ?? { egress: 'open', egressAllow: [] }, this.#o.tenantNetworks?.[tenant]);
  }

  /** Makes (or puts back) the NetworkPolicy objects of `policy`; returns the label value that selects them. */
  async #ensurePolicy(policy: NetworkPolicy): Promise<string> {
    try {
      await ensureNetworkPolicies(this.#api.networking, this.#api.namespace, policy);
    } catch (err) {
      const status = (err as { cause?: { code?: unknown } }).cause?.code;
      // No pod without its policy: a task never gets more network than its tenant's.
      if (status === 403) throw new FailedPreconditionError((err as Error).message, { cause: err });
      throw new UnavailableError((err as Error).message, { cause: err });
    }
    return policyLabelValue(policy);
  }

  #taskLabels(key: TaskKey): Record<string, string> {
    const { tenant, task } = taskLabelValues(this.#o.labelSecret, key);
    return { ...executorLabels(this.#pod), [LABEL.tenant]: tenant, [LABEL.task]: task };
  }

  /** The label selector of the task's pods and claims. */
  taskSelector(key: TaskKey): string {
    return selectorOf(this.#taskLabels(key));
  }

  async createEnvironment(key: TaskKey, options?: CreateEnvironmentOptions): Promise<BackendEnvironment> {
    if (this.#closed) throw new UnavailableError('the kubernetes backend is closed');
    const id = taskKeyString(key);
    if (this.#environments.has(id)) throw new FailedPreconditionError(`an environment for task ${id} already exists on this executor`);
    const logger = this.#o.logger?.child({ backend: 'kubernetes', task: id });
    const { live, notice } = options?.fromSnapshot ? { live: await this.#startFork(key, options.fromSnapshot, logger) } : await this.#reuseOrStart(key, logger);
    const env = new KubernetesEnvironment(this, key, live, {
      killGraceMs: this.#o.killGraceMs ?? 1000,
      logger,
      onDisposed: () => this.#environments.delete(id),
    });
    if (notice) env.addNotice(notice);
    this.#environments.set(id, env);
    return env;
  }

  /** A new pod for a fork with its snapshot's files extracted in it (before its first command); nothing is left behind on failure. */
  async #startFork(key: TaskKey, snapshot: BackendSnapshot, logger: Logger | undefined): Promise<LivePod> {
    if (!this.#snapshots) throw new FailedPreconditionError('the kubernetes backend keeps no snapshots without executor.state_root');
    for (const pod of await this.#api.listPods(this.taskSelector(key))) await this.#api.deletePod(pod.metadata!.name!);
    const live = await this.startPod(key, logger);
    try {
      await this.#snapshots.restore(live.pod, snapshot);
    } catch (err) {
      live.channel.close();
      await this.#api.deletePod(live.pod, 0).catch(() => undefined);
      throw err;
    }
    return live;
  }

  async snapshot(key: TaskKey, _env: BackendEnvironment, snapshot: Omit<BackendSnapshot, 'sizeBytes' | 'includesProcesses'>): Promise<BackendSnapshot> {
    if (!this.#snapshots) throw new FailedPreconditionError('the kubernetes backend keeps no snapshots without executor.state_root');
    const env = this.#environments.get(taskKeyString(key));
    if (!env) throw new FailedPreconditionError(`task ${taskKeyString(key)} has no pod on this executor to snapshot`);
    return this.#snapshots.take(env.podName, [WORKSPACE_DIR, env.homeDir], snapshot);
  }

  listSnapshots(tenant: string): Promise<BackendSnapshot[]> {
    return this.#snapshots ? this.#snapshots.list(tenant) : Promise.resolve([]);
  }

  deleteSnapshot(tenant: string, id: string): Promise<boolean> {
    return this.#snapshots ? this.#snapshots.delete(tenant, id) : Promise.resolve(false);
  }

  /** The task's running pod of an earlier executor (with this executor id) if there is one, else a new pod. */
  async #reuseOrStart(key: TaskKey, logger: Logger | undefined): Promise<{ live: LivePod; notice?: string }> {
    const pods = await this.#api.listPods(this.taskSelector(key));
    let reused: LivePod | undefined;
    for (const pod of pods) {
      const name = pod.metadata!.name!;
      if (!reused && !pod.metadata?.deletionTimestamp && pod.status?.phase === 'Running') {
        try {
          reused = await this.#attach(name, logger);
          logger?.info({ pod: name }, 'using the running pod of this task again');
          continue;
        } catch (err) {
          logger?.warn({ pod: name, err: (err as Error).message }, 'the running pod of this task cannot run the exec agent; it is replaced');
        }
      }
      await this.#api.deletePod(name);
    }
    if (reused) return { live: reused, notice: `The task's pod ${reused.pod} was still running (an earlier executor started it) and is used again.` };
    return { live: await this.startPod(key, logger) };
  }

  /**
   * Suspends the task: keeps what its next pod needs (/tmp, with the
   * runner's state directory, and without claims the workspace and home)
   * under the state root, then deletes the pod at once and waits until it
   * is gone, so a suspended task holds nothing in the cluster.
   */
  async suspendPod(key: TaskKey, live: LivePod): Promise<void> {
    if (!this.#snapshots) throw new FailedPreconditionError('the kubernetes backend suspends tasks only with executor.state_root');
    const dirs = this.#o.persistent ? ['/tmp'] : [WORKSPACE_DIR, live.homeDir, '/tmp'];
    await this.#snapshots.suspend(taskLabelValues(this.#o.labelSecret, key).task, live.pod, dirs);
    await this.#api.deletePod(live.pod, 0);
    await this.podGone(live.pod);
  }

  /** A new pod for a suspended task, its kept files extracted before the agent starts on the same state directory. */
  resumePod(key: TaskKey, suspended: LivePod, logger: Logger | undefined): Promise<LivePod> {
    const snapshots = this.#snapshots;
    if (!snapshots) throw new FailedPreconditionError('the kubernetes backend suspends tasks only with executor.state_root');
    const task = taskLabelValues(this.#o.labelSecret, key).task;
    return this.startPod(key, logger, { stateDir: suspended.stateDir, prepare: (pod) => snapshots.resumeInto(task, pod) });
  }

  /** Forgets what a suspension of the task kept (it was released). */
  async forgetSuspension(key: TaskKey): Promise<void> {
    await this.#snapshots?.forgetSuspension(taskLabelValues(this.#o.labelSecret, key).task);
  }

  /**
   * A new running pod for the task (claimed from the warm pool, else created) with its agent; nothing is left behind on failure.
   * `resume`: the state directory to use, and what to put in the pod before the agent starts (a resumed suspension).
   */
  async startPod(
    key: TaskKey,
    logger: Logger | undefined,
    resume?: { readonly stateDir: string; readonly prepare: (pod: string) => Promise<void> },
  ): Promise<LivePod> {
    if (this.#closed) throw new UnavailableError('the kubernetes backend is closed');
    const { tenant, task } = taskLabelValues(this.#o.labelSecret, key);
    const policy = await this.#ensurePolicy(this.policyOf(key.tenant));
    let name = await this.#pool?.take(podLabels(this.#pod, { kind: 'task', tenant, task, policy }));
    if (name) {
      logger?.info({ pod: name }, 'claimed a warm-pool pod');
    } else {
      const podName = taskPodName(task);
      name = podName;
      // Persistent: the uid the claims record, whose files they hold; else the task's first free candidate.
      const recorded = this.#o.persistent ? (await this.#api.readClaim(claimNames(task).workspace))?.metadata?.labels?.[LABEL.uid] : undefined;
      await this.#withIdentity(task, task, recorded, async (identity) => {
        const claims = this.#o.persistent ? await this.#ensureClaims(tenant, task, identity) : undefined;
        await this.#api.createPod(buildPod(this.#pod, podName, { kind: 'task', tenant, task, policy, ...(claims ? { claims } : {}) }, identity));
      });
      try {
        await waitForRunning(this.#api, name, this.#pod.image, this.#o.pendingTimeoutMs);
      } catch (err) {
        await this.#api.deletePod(name, 0).catch(() => undefined);
        throw err;
      }
      logger?.info({ pod: name }, 'task pod started');
    }
    try {
      await resume?.prepare(name);
      return await this.#attach(name, logger, resume?.stateDir);
    } catch (err) {
      await this.#api.deletePod(name, 0).catch(() => undefined);
      throw err;
    }
  }

  /** Runs `create` with the identity of a new pod: the fixed `kubernetes.run_as_user`, else a uid of its own (pod-uids.ts). */
  #withIdentity<T>(seed: string, task: string | undefined, recorded: string | undefined, create: (identity: PodIdentity) => Promise<T>): Promise<T> {
    const fixed = fixedIdentity(this.#pod);
    return fixed ? create(fixed) : this.#uids!.with(seed, task, recorded, create);
  }

  /** The task's two claims, made unless they exist. */
  async #ensureClaims(tenant: string, task: string, identity: PodIdentity): Promise<{ workspace: string; home: string }> {
    const names = claimNames(task);
    for (const role of ['workspace', 'home'] as const) {
      if (await this.#api.readClaim(names[role])) continue;
      await this.#api.createClaim(buildClaim(this.#pod, names[role], { tenant, task }, role, this.#o.storageClass ?? '', identity)).catch(async (err: unknown) => {
        // Made meanwhile by another start of the same task: fine.
        if (!(await this.#api.readClaim(names[role]))) throw err;
      });
    }
    return names;
  }

  /** Why the image cannot run the exec agent (commands then run one pods/exec each); undefined while it can. */
  get perCommandReason(): string | undefined {
    return this.#noAgent;
  }

  /** Starts the agent in `pod` (or the per-command channel, for an image without python3) and prepares the task's directories there. */
  async #attach(pod: string, logger: Logger | undefined, keptStateDir?: string): Promise<LivePod> {
    const description = `pod ${pod} (namespace ${this.#api.namespace})`;
    const stateDir = keptStateDir ?? `/tmp/berth-state-${randomBytes(8).toString('hex')}`;
    const channel = this.#noAgent === undefined ? await this.#startAgent(pod, description, stateDir, logger) : undefined;
    return this.#prepare(pod, description, stateDir, channel ?? new PodExecChannel(this.#api, pod, description, logger));
  }

  /** The exec agent in `pod`; undefined when the image cannot run it (no usable python3: per-command exec instead). */
  async #startAgent(pod: string, description: string, stateDir: string, logger: Logger | undefined): Promise<AgentChannel | undefined> {
    const agent = await loadAgentScript();
    let previous: PodExecProcess | undefined;
    try {
      return await startStdioAgent({
        spawn: (argv) => {
          const python = argv[0] ?? 'python3';
          const command = [python, '-I', '-S', '-c', bootstrapCode(agent.content.length), ...argv.slice(2)];
          // A resume starts once the dropped exec's stdin was ended: its agent is then on its way to the linger socket.
          previous = new PodExecProcess(this.#api, pod, command, agent.content, previous?.stdinEnded);
          return previous;
        },
        agentPath: AGENT_FILE_NAME,
        lingerPath: `${stateDir}/agent/linger.sock`,
        description,
        fallbackLogKey: `kubernetes image ${this.#pod.image}`,
        ...(logger ? { logger } : {}),
      });
    } catch (err) {
      if (previous?.startError) throw previous.startError;
      if (err instanceof AgentUnavailableError && err.canFallBack) {
        // startStdioAgent said it once in the log (per image); the doctor says it too.
        this.#noAgent = err.message;
        return undefined;
      }
      if (err instanceof AgentUnavailableError) throw new UnavailableError(`Kubernetes: ${err.message}`, { cause: err });
      throw err;
    }
  }

  /** Empties the pod's execute_code dir, makes the task's state dir and reads the home directory. */
  async #prepare(pod: string, description: string, stateDir: string, channel: AgentChannel | PodExecChannel): Promise<LivePod> {
    try {
      const out = await runSetupCommand(
        channel,
        `rm -rf ${SANDBOX_CODE_DIR} && mkdir -p -m 700 ${stateDir} ${SANDBOX_CODE_DIR} && printf '%s\\n' "$HOME"`,
        "the task's pod",
      );
      const home = out.split('\n')[0];
      const homeDir = home && home.length < 4096 && posix.isAbsolute(home) ? home : this.#pod.homeDir;
      return { pod, channel, description, stateDir, homeDir, initialCwd: this.#o.initialCwd || WORKSPACE_DIR };
    } catch (err) {
      channel.close();
      throw err;
    }
  }

  async podFate(pod: string): Promise<PodFate> {
    return fateOf(await this.#api.readPod(pod));
  }

  deletePod(pod: string): Promise<void> {
    return this.#api.deletePod(pod);
  }

  async podGone(pod: string): Promise<void> {
    for (let i = 0; i < 300; i++) {
      if (!(await this.#api.readPod(pod))) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async deleteClaims(key: TaskKey): Promise<void> {
    const claims = await this.#api.listClaims(this.taskSelector(key));
    await Promise.all(claims.map((c) => this.#api.deleteClaim(c.metadata!.name!)));
  }

  /** How commands reach the pod and what it is limited by; after release, that nothing of the task is left. */
  async diagnose(key: TaskKey, phase: DiagnosisPhase): Promise<DiagnosticFinding[]> {
    if (phase === 'released') {
      try {
        // The doctor's task was released as at shutdown: its claims are kept by design; they go here.
        if (this.#o.persistent) await this.deleteClaims(key);
        const pods = (await this.#api.listPods(this.taskSelector(key))).filter((p) => !p.metadata?.deletionTimestamp);
        // A claim deleted while its pod terminates goes with the pod (pvc-protection): not left behind.
        const claims = (await this.#api.listClaims(this.taskSelector(key))).filter((c) => !c.metadata?.deletionTimestamp);
        const left = [...pods.map((p) => `pod ${p.metadata?.name}`), ...claims.map((c) => `claim ${c.metadata?.name}`)];
        return [
          left.length === 0
            ? { verdict: 'ok', text: `release deleted the task's pod${this.#o.persistent ? ' (and its claims were removed)' : ''}` }
            : { verdict: 'fail', text: `the doctor's task left ${left.join(', ')} in namespace ${this.#api.namespace}; delete them with kubectl` },
        ];
      } catch (err) {
        return [{ verdict: 'warn', text: `could not check that the doctor's pod was deleted: ${(err as Error).message}` }];
      }
    }
    const env = this.#environments.get(taskKeyString(key));
    const where = `${env ? `pod ${env.podName}` : 'the task\'s pod'} in namespace ${this.#api.namespace}`;
    const findings: DiagnosticFinding[] = [
      env?.transport === 'pod-exec'
        ? {
            verdict: 'warn',
            text:
              `terminal.kubernetes_image ${JSON.stringify(this.#pod.image)} cannot run the exec agent (${this.#noAgent ?? 'no usable python3'}): ` +
              `commands reach ${where} one pods/exec each (${this.#api.server}, ${this.#api.source}), slower, and execute_code cannot run; ` +
              'use an image with python3 3.8 or newer (e.g. berth-sandbox)',
          }
        : {
            verdict: 'ok',
            text:
              `commands reach ${where} through the exec agent, ` +
              `on one pods/exec WebSocket (${this.#api.server}, ${this.#api.source}); execute_code runs in the pod`,
          },
      {
        verdict: 'ok',
        text:
          `task pods run ${this.#identityText()} (non-root), no service-account token, seccomp RuntimeDefault, all capabilities dropped, ` +
          `${this.#pod.readOnlyRoot ? 'read-only root, ' : ''}limits cpu ${this.#pod.cpu}, memory ${this.#pod.memoryMiB} MiB, ephemeral-storage ${this.#pod.diskMiB} MiB` +
          (this.#pod.runtimeClass ? `, RuntimeClass ${this.#pod.runtimeClass}` : ''),
      },
      {
        verdict: 'warn',
        text: 'Kubernetes sets no per-pod process limit: the pids limit is the kubelet\'s (podPidsLimit of the nodes), not terminal.container_pids',
      },
    ];
    findings.push(...(await checkNetworkPolicies(this.#api.networking, this.#api.namespace, [this.policyOf(key.tenant)])));
    return findings;
  }

  /** Which uid pods run as, for the doctor. */
  #identityText(): string {
    const fixed = fixedIdentity(this.#pod);
    const ids = fixed
      ? `as uid ${fixed.uid}`
      : `each as a uid of its own from kubernetes.task_uids (${this.#uids!.range.first}-${this.#uids!.range.last})`;
    return this.#pod.userNamespace ? `${ids}, in a user namespace of their own` : ids;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#environments.values()].map((e) => e.dispose('shutdown')));
    await this.#pool?.close();
  }
}
