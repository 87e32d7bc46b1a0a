/**
 * The `modal` backend: one Modal sandbox per task, driven through Modal's
 * own JavaScript SDK (`modal`, pinned), loaded only by this backend.
 *
 * - The sandbox lives in the app `berth` (created if missing), is named by
 *   a hash of tenant and task (so a restarted executor finds it again by
 *   name) and tagged with both (`berth_tenant`, `berth_task`); image
 *   `terminal.modal_image`, cpu and memory from `container_cpu` /
 *   `container_memory`, entrypoint `sleep infinity`, timeout 3600 s. A task still in use when its sandbox nears that limit
 *   gets a new sandbox started from a snapshot of the old one's files
 *   (Modal cannot extend a running sandbox's timeout), with a notice.
 * - The exec agent runs in it through one SDK exec (stdin/stdout), so each
 *   command, file operation and kill is a message on that stream, not an
 *   exec of its own; interrupt and timeout kill the command's process group
 *   inside the sandbox. execute_code scripts run in the sandbox too: the
 *   agent makes their run dir and rpc.sock under /tmp/berth-code and relays
 *   each connection over the same stream.
 * - Release: persistent mode (`container_persistent`) snapshots the
 *   sandbox's filesystem and records the image in the executor's state root;
 *   the task's next sandbox starts from it. Then the sandbox is terminated.
 * - Network policy: see modal-network.ts.
 * - Credentials: the SDK's own (MODAL_TOKEN_ID / MODAL_TOKEN_SECRET,
 *   MODAL_SERVER_URL, ~/.modal.toml) from the executor's environment; the
 *   sandbox's environment never gets them.
 */
import { createHash, randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import type * as ModalSdk from 'modal';
import { FailedPreconditionError, InvalidArgumentError, NotFoundError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { unknownSnapshotMessage } from '../../../common/snapshot-ids.js';
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
import { AGENT_FILE_NAME, loadAgentScript } from '../shared/agent/agent-script.js';
import { AgentUnavailableError, startStdioAgent } from '../shared/agent/stdio-agent.js';
import { runSetupCommand } from '../shared/channel-commands.js';
import { spawnModalAgent, type ModalAgentProcess } from './modal-agent.js';
import { ModalEnvironment, SANDBOX_CODE_DIR, type LiveSandbox, type OpenedSandbox } from './modal-environment.js';
import { modalError } from './modal-errors.js';
import { modalNetwork, tenantModalPolicy, type ModalNetworkPolicy } from './modal-network.js';
import { SnapshotStore } from './snapshot-store.js';
import { TenantSnapshots } from './tenant-snapshots.js';

type Sdk = typeof ModalSdk;
type ModalClient = InstanceType<Sdk['ModalClient']>;

/** Modal's sandbox timeout for Berth's sandboxes. */
export const SANDBOX_TIMEOUT_MS = 3600_000;
export const DEFAULT_APP_NAME = 'berth';

export interface ModalBackendOptions {
  /** `terminal.modal_image`: a registry image with python3 (3.8+) and bash. */
  readonly image: string;
  /** Default {@link DEFAULT_APP_NAME}. */
  readonly appName?: string;
  readonly cpu?: number;
  readonly memoryMiB?: number;
  /** Snapshot on release and start the next sandbox from it; default true. */
  readonly persistent?: boolean;
  /** Where the snapshot record lives (`<state_root>/modal`). */
  readonly stateDir: string;
  /** `terminal.cwd`: where tasks start; the sandbox's working directory when empty. */
  readonly initialCwd?: string;
  /** Default {@link SANDBOX_TIMEOUT_MS}; a multiple of 1000. */
  readonly sandboxTimeoutMs?: number;
  /** Network policy (docker.egress / egress_allow); open when absent. */
  readonly network?: ModalNetworkPolicy;
  readonly tenantNetworks?: Readonly<Record<string, { egress?: ModalNetworkPolicy['egress']; egress_allow?: readonly string[] }>>;
  /** Between SIGTERM and SIGKILL of a process group; default 1000 ms. */
  readonly killGraceMs?: number;
  readonly logger?: Logger;
}

/** Modal's name for a task's sandbox: stable, and valid whatever characters tenant and task ids hold. */
export function sandboxName(key: TaskKey): string {
  return `berth-${createHash('sha256').update(taskKeyString(key)).digest('hex').slice(0, 40)}`;
}

/** The SDK's logger as Berth's: its key/value argument pairs become fields. */
function sdkLogger(logger: Logger | undefined): ModalSdk.Logger {
  const fields = (args: unknown[]) => {
    const out: Record<string, unknown> = { sdk: 'modal' };
    for (let i = 0; i + 1 < args.length; i += 2) out[String(args[i])] = args[i + 1];
    return out;
  };
  return {
    debug: (msg: string, ...args: unknown[]) => logger?.debug(fields(args), msg),
    info: (msg: string, ...args: unknown[]) => logger?.debug(fields(args), msg),
    warn: (msg: string, ...args: unknown[]) =>
      logger?.warn(
        fields(args),
        // Said at each sandbox's first exec; in Berth's words, so it is understood where it lands (logs, berth doctor).
        /insecure TLS.*command router/i.test(msg)
          ? 'the Modal SDK reaches the command router without TLS because MODAL_SERVER_URL is a loopback address (a local stand-in or proxy)'
          : msg,
      ),
    error: (msg: string, ...args: unknown[]) => logger?.error(fields(args), msg),
  };
}

export class ModalBackend implements Backend {
  readonly #o: ModalBackendOptions;
  readonly #sdk: Sdk;
  readonly #client: ModalClient;
  readonly #app: ModalSdk.App;
  readonly #store: SnapshotStore;
  readonly #tenantSnapshots: TenantSnapshots;
  readonly #environments = new Map<string, ModalEnvironment>();
  #baseImage: ModalSdk.Image | undefined;
  #closed = false;

  private constructor(options: ModalBackendOptions, sdk: Sdk, client: ModalClient, app: ModalSdk.App) {
    this.#o = options;
    this.#sdk = sdk;
    this.#client = client;
    this.#app = app;
    this.#store = new SnapshotStore(options.stateDir);
    this.#tenantSnapshots = new TenantSnapshots(options.stateDir);
  }

  /** Loads the SDK, checks the credentials by looking up (or creating) the app. */
  static async start(options: ModalBackendOptions): Promise<ModalBackend> {
    if (!options.image) {
      throw new FailedPreconditionError('terminal.modal_image: the modal backend needs an image with python3 (e.g. python:3.12-slim)');
    }
    const timeout = options.sandboxTimeoutMs ?? SANDBOX_TIMEOUT_MS;
    if (timeout < 10_000 || timeout % 1000 !== 0) throw new InvalidArgumentError('the Modal sandbox timeout must be whole seconds, at least 10');
    const sdk = await import('modal');
    let client: ModalClient;
    let app: ModalSdk.App;
    try {
      client = new sdk.ModalClient({ logger: sdkLogger(options.logger) });
      app = await client.apps.fromName(options.appName ?? DEFAULT_APP_NAME, { createIfMissing: true });
    } catch (err) {
      throw modalError(err, `looking up the app ${options.appName ?? DEFAULT_APP_NAME}`);
    }
    const operator = options.network ?? { egress: 'open' as const, egressAllow: [] };
    const network = modalNetwork(operator);
    if (network.unmapped) options.logger?.warn({ backend: 'modal' }, `network policy: ${network.unmapped}`);
    for (const [tenant, override] of Object.entries(options.tenantNetworks ?? {})) {
      const unmapped = modalNetwork(tenantModalPolicy(operator, override)).unmapped;
      if (unmapped && unmapped !== network.unmapped) options.logger?.warn({ backend: 'modal', tenant }, `network policy of tenant ${tenant}: ${unmapped}`);
    }
    options.logger?.info({ backend: 'modal', app: app.appId, image: options.image }, 'modal backend ready');
    const backend = new ModalBackend(options, sdk, client, app);
    // What a killed executor's snapshot left in the state directory, once too old to be a write under way.
    const swept = await backend.#tenantSnapshots.sweep().catch((err: unknown) => {
      options.logger?.warn({ backend: 'modal', err }, 'removing leftovers of interrupted snapshots failed');
      return [];
    });
    if (swept.length) options.logger?.info({ backend: 'modal', files: swept }, 'removed leftovers of interrupted snapshots');
    return backend;
  }

  get capabilities(): BackendCapabilities {
    // Every environment runs execute_code itself (its agent relays rpc.sock; an image without python3 cannot run
    // on modal at all, so there is no agent-less fallback): the executor needs no code containers.
    return {
      name: 'modal',
      pty: true,
      hostFilesystem: false,
      sharesRpcDir: true,
      // Files only: a Modal filesystem snapshot keeps no memory or processes.
      lifecycle: {
        snapshot: true,
        processes: false,
        suspend: true,
        notes: ["suspend snapshots the sandbox's files and terminates it; resuming starts a new sandbox from that snapshot: background processes end"],
      },
    };
  }

  /**
   * How the network policy applies to `tenant`'s sandboxes, for `berth
   * doctor`: `ok` with the SDK option used, or `warn` with what cannot apply.
   */
  networkFinding(tenant: string): { readonly verdict: 'ok' | 'warn'; readonly text: string } {
    const policy = tenantModalPolicy(this.#o.network ?? { egress: 'open', egressAllow: [] }, this.#o.tenantNetworks?.[tenant]);
    const mapped = modalNetwork(policy);
    if (mapped.unmapped) return { verdict: 'warn', text: `network policy: ${mapped.unmapped}` };
    if (mapped.options.blockNetwork) return { verdict: 'ok', text: 'network policy: egress none is applied as Modal\'s blockNetwork' };
    if (mapped.options.outboundCidrAllowlist) {
      return {
        verdict: 'ok',
        text: `network policy: egress none with egress_allow is applied as Modal's outboundCidrAllowlist (${mapped.options.outboundCidrAllowlist.join(', ')})`,
      };
    }
    return { verdict: 'ok', text: 'network policy: egress open: Modal sandboxes get open egress' };
  }

  /** Whether the task's sandbox still runs in Modal (`berth doctor` checks that release terminated it). */
  async sandboxRunning(key: TaskKey): Promise<boolean> {
    try {
      await this.#client.sandboxes.fromName(this.#app.name ?? DEFAULT_APP_NAME, sandboxName(key));
      return true;
    } catch (err) {
      if (err instanceof this.#sdk.NotFoundError) return false;
      throw modalError(err, 'looking up a sandbox');
    }
  }

  /** How commands reach the sandbox and the network policy; after release, that the sandbox was terminated. */
  async diagnose(key: TaskKey, phase: DiagnosisPhase): Promise<DiagnosticFinding[]> {
    if (phase === 'released') {
      return this.sandboxRunning(key).then(
        (running): DiagnosticFinding[] => [
          running
            ? { verdict: 'fail', text: "the doctor's Modal sandbox still runs after its release; terminate it in Modal's dashboard (app berth)" }
            : { verdict: 'ok', text: 'release terminated the Modal sandbox' },
        ],
        (err: unknown) => [
          { verdict: 'warn', text: `could not check that the doctor's Modal sandbox was terminated: ${(err as Error).message}` },
        ],
      );
    }
    const findings: DiagnosticFinding[] = [
      { verdict: 'ok', text: "commands reach the Modal sandbox through the exec agent, on one exec of Modal's SDK; execute_code runs in the sandbox" },
    ];
    const network = this.networkFinding(key.tenant);
    // A policy that cannot apply was logged at start-up too: it arrives as that warning.
    if (network.verdict === 'ok') findings.push(network);
    return findings;
  }

  get sandboxTimeoutMs(): number {
    return this.#o.sandboxTimeoutMs ?? SANDBOX_TIMEOUT_MS;
  }

  async createEnvironment(key: TaskKey, options?: CreateEnvironmentOptions): Promise<BackendEnvironment> {
    if (this.#closed) throw new UnavailableError('the modal backend is closed');
    const id = taskKeyString(key);
    if (this.#environments.has(id)) throw new FailedPreconditionError(`an environment for task ${id} already exists on this executor`);
    const logger = this.#o.logger?.child({ backend: 'modal', task: id });
    const fork = options?.fromSnapshot ? await this.#forkImage(key.tenant, options.fromSnapshot.id) : undefined;
    let opened = await this.openSandbox(key, !fork, logger, fork);
    let live: LiveSandbox;
    try {
      live = await this.attach(opened.sandbox, key, logger, opened.createdAt);
    } catch (err) {
      await opened.sandbox.terminate().catch(() => undefined);
      if (!opened.reattached) throw err;
      // An earlier executor's sandbox that does not take the agent (finishing, or changed by its commands): a new one.
      logger?.warn({ err: (err as Error).message }, 'the running sandbox of this task cannot run the exec agent; starting a new one');
      opened = await this.openSandbox(key, false, logger);
      opened = {
        ...opened,
        notice: 'The task\'s Modal sandbox was still running but could not run the exec agent; a new sandbox was started.',
      };
      try {
        live = await this.attach(opened.sandbox, key, logger, opened.createdAt);
      } catch (again) {
        await opened.sandbox.terminate().catch(() => undefined);
        throw again;
      }
    }
    const env = new ModalEnvironment(this, key, live, {
      persistent: this.#o.persistent ?? true,
      killGraceMs: this.#o.killGraceMs ?? 1000,
      logger,
      onDisposed: () => this.#environments.delete(id),
    });
    if (opened.notice) env.addNotice(opened.notice);
    this.#environments.set(id, env);
    return env;
  }

  #sandboxParams(key: TaskKey): ModalSdk.SandboxCreateParams {
    const policy = tenantModalPolicy(this.#o.network ?? { egress: 'open', egressAllow: [] }, this.#o.tenantNetworks?.[key.tenant]);
    return {
      name: sandboxName(key),
      command: ['sleep', 'infinity'],
      timeoutMs: this.sandboxTimeoutMs,
      ...(this.#o.cpu !== undefined ? { cpu: this.#o.cpu } : {}),
      ...(this.#o.memoryMiB !== undefined ? { memoryMiB: this.#o.memoryMiB } : {}),
      // For people looking at Modal's dashboard; restricted to name characters, since the name is what identifies.
      tags: { berth_tenant: tagValue(key.tenant), berth_task: tagValue(key.taskId) },
      ...modalNetwork(policy).options,
    };
  }

  /**
   * The task's sandbox: the running one of that name when `reattach` (an
   * earlier executor's), else a new one, from the task's snapshot in
   * persistent mode, or from `image`.
   */
  async openSandbox(
    key: TaskKey,
    reattach: boolean,
    logger: Logger | undefined,
    image?: ModalSdk.Image,
  ): Promise<OpenedSandbox> {
    const name = sandboxName(key);
    const id = taskKeyString(key);
    const findRunning = async () => {
      try {
        return await this.#client.sandboxes.fromName(this.#app.name ?? DEFAULT_APP_NAME, name);
      } catch (err) {
        if (err instanceof this.#sdk.NotFoundError) return undefined;
        throw modalError(err, `looking up the sandbox of task ${id}`);
      }
    };
    if (reattach) {
      const running = await findRunning();
      if (running) {
        logger?.info({ sandbox: running.sandboxId }, 'reusing the running Modal sandbox of this task');
        return {
          sandbox: running,
          reattached: true,
          // Its age is unknown: count it as half way through its lifetime, so it is renewed early rather than late.
          createdAt: Date.now() - this.sandboxTimeoutMs / 2,
          notice: 'The task\'s Modal sandbox was still running (an earlier executor started it) and is used again.',
        };
      }
    }
    let notice: string | undefined;
    let from = image;
    if (!from && (this.#o.persistent ?? true)) {
      const snapshot = await this.#store.get(id);
      if (snapshot) {
        try {
          from = await this.#client.images.fromId(snapshot);
          logger?.info({ image: snapshot }, 'starting the task\'s sandbox from its snapshot');
        } catch (err) {
          logger?.warn({ err, image: snapshot }, 'the task\'s snapshot is gone; starting from the image');
          notice = `The snapshot of this task's files (${snapshot}) could not be used; the sandbox starts from ${this.#o.image}.`;
        }
      }
    }
    if (!from) from = this.#baseImage ??= this.#client.images.fromRegistry(this.#o.image);
    const createdAt = Date.now();
    try {
      const sandbox = await this.#client.sandboxes.create(this.#app, from, this.#sandboxParams(key));
      logger?.info({ sandbox: sandbox.sandboxId, name }, 'Modal sandbox created');
      return notice ? { sandbox, createdAt, notice } : { sandbox, createdAt };
    } catch (err) {
      if (err instanceof this.#sdk.AlreadyExistsError) {
        // Another executor made it between our lookup and our create: use theirs.
        const running = await findRunning();
        if (running) return { sandbox: running, createdAt };
      }
      throw modalError(err, `creating the sandbox of task ${id}`, this.#o.image);
    }
  }

  /**
   * Starts the agent in `sandbox` and prepares the task's state directory:
   * a new one, or `stateDir` as the image holds it (a resumed suspension).
   */
  async attach(sandbox: ModalSdk.Sandbox, key: TaskKey, logger: Logger | undefined, createdAt: number, keptStateDir?: string): Promise<LiveSandbox> {
    const description = `modal:${sandboxName(key)} (${sandbox.sandboxId})`;
    const agent = await loadAgentScript();
    // The task's private directory in the sandbox (made 0700 below); the agent waits in it after a dropped stream.
    const stateDir = keptStateDir ?? `/tmp/berth-state-${randomBytes(8).toString('hex')}`;
    let previous: ModalAgentProcess | undefined;
    let channel: AgentChannel;
    try {
      channel = await startStdioAgent({
        spawn: (argv) => {
          // A resume starts once the dropped exec's stdin is closed: its agent is then on its way to the linger socket.
          previous = spawnModalAgent(sandbox, argv, agent.content, previous?.stdinEnded);
          return previous;
        },
        agentPath: AGENT_FILE_NAME,
        lingerPath: `${stateDir}/agent/linger.sock`,
        description,
        fallbackLogKey: `modal image ${this.#o.image}`,
        ...(logger ? { logger } : {}),
      });
    } catch (err) {
      if (err instanceof AgentUnavailableError && err.canFallBack) {
        throw new FailedPreconditionError(
          `terminal.modal_image ${JSON.stringify(this.#o.image)} cannot run Berth's exec agent (${err.message}); ` +
            'the modal backend needs python3 (3.8 or newer) and bash in the image, e.g. python:3.12-slim',
        );
      }
      if (err instanceof AgentUnavailableError) throw new UnavailableError(`Modal: ${err.message}`, { cause: err });
      throw modalError(err, `starting the exec agent in ${description}`, this.#o.image);
    }
    try {
      const out = await runSetupCommand(
        channel,
        `rm -rf ${SANDBOX_CODE_DIR} && mkdir -p -m 700 ${stateDir} ${SANDBOX_CODE_DIR} && printf '%s\\n%s\\n' "$HOME" "$BERTH_SANDBOX_WORKDIR"`,
        'the Modal sandbox',
      );
      const [home, cwd] = out.split('\n');
      const homeDir = saneDir(home) ?? '/';
      const initialCwd = this.#o.initialCwd || (saneDir(cwd) && cwd !== '/' ? cwd! : homeDir);
      return { sandbox, channel, description, stateDir, homeDir, initialCwd, startedAt: createdAt };
    } catch (err) {
      channel.close();
      throw err;
    }
  }

  async #forkImage(tenant: string, snapshotId: string): Promise<ModalSdk.Image> {
    const record = await this.#tenantSnapshots.get(tenant, snapshotId);
    if (!record) throw new NotFoundError(unknownSnapshotMessage(snapshotId));
    try {
      return await this.#client.images.fromId(record.imageId);
    } catch (err) {
      throw modalError(err, `opening the image of snapshot ${snapshotId}`);
    }
  }

  async snapshot(
    key: TaskKey,
    env: BackendEnvironment,
    snapshot: Omit<BackendSnapshot, 'sizeBytes' | 'includesProcesses'>,
  ): Promise<BackendSnapshot> {
    if (!(env instanceof ModalEnvironment)) throw new FailedPreconditionError(`task ${taskKeyString(key)} has no modal environment`);
    const imageId = await env.snapshotFiles();
    // Modal does not report an image's size.
    const full: BackendSnapshot = { ...snapshot, sizeBytes: 0, includesProcesses: false };
    await this.#tenantSnapshots.put({ snapshot: full, imageId });
    return full;
  }

  async listSnapshots(tenant: string): Promise<BackendSnapshot[]> {
    return (await this.#tenantSnapshots.list(tenant)).map((r) => r.snapshot);
  }

  async deleteSnapshot(tenant: string, id: string): Promise<boolean> {
    return (await this.#tenantSnapshots.delete(tenant, id)) !== undefined;
  }

  /** Remembers (or forgets) the snapshot a persistent task's next sandbox starts from. */
  recordSnapshot(key: TaskKey, imageId: string | undefined): Promise<void> {
    return imageId === undefined ? this.#store.delete(taskKeyString(key)) : this.#store.set(taskKeyString(key), imageId);
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#environments.values()].map((e) => e.dispose()));
  }
}

/** `text` as a tag value: Modal name characters only, at most 63 of them. */
function tagValue(text: string): string {
  return text.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 63);
}

/** A directory path a sandbox reported, if it is a sane absolute path. */
function saneDir(text: string | undefined): string | undefined {
  return text && text.length < 4096 && posix.isAbsolute(text) && !text.includes('\0') ? text : undefined;
}
