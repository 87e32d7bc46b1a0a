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
import { ChannelOperations, awaitForeground } from '../shared/channel-commands.js';
import { createHash, randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import type { Duplex } from 'node:stream';
import type * as ModalSdk from 'modal';
import { FailedPreconditionError, InvalidArgumentError, ResourceExhaustedError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type {
  Backend,
  BackendCapabilities,
  BackendEnvironment,
  BackgroundHandle,
  BackgroundOptions,
  ExecOptions,
  ExecResult,
  FileStat,
  RelayedSocket,
  RpcRelay,
  TaskKey,
} from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import type { AgentChannel } from '../shared/agent/agent-channel.js';
import { loadAgentScript } from '../shared/agent/agent-script.js';
import { AgentUnavailableError, startStdioAgent } from '../shared/agent/stdio-agent.js';
import { interruptedBeforeStart } from '../shared/exec-deadline.js';
import { assertNotReleased, deliverOutput } from '../shared/guards.js';
import { SandboxLostError, type SandboxChannel, type SandboxProcess } from '../shared/sandbox-channel.js';
import { spawnModalAgent, type ModalAgentProcess } from './modal-agent.js';
import { modalNetwork, tenantModalPolicy, type ModalNetworkPolicy } from './modal-network.js';
import { SnapshotStore } from './snapshot-store.js';

type Sdk = typeof ModalSdk;
type ModalClient = InstanceType<Sdk['ModalClient']>;

/** Modal's sandbox timeout for Berth's sandboxes. */
export const SANDBOX_TIMEOUT_MS = 3600_000;
export const DEFAULT_APP_NAME = 'berth';
/**
 * Where execute_code's run dirs go inside the sandbox (one sandbox per task,
 * so private to the task); emptied when the agent starts in a sandbox, which
 * drops run dirs a snapshot or an earlier executor's sandbox still held.
 */
export const SANDBOX_CODE_DIR = '/tmp/berth-code';

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

/** What a user reads when Modal (or the SDK) says no: the provider, what failed, and the fix. */
export function modalError(err: unknown, doing: string, image?: string): Error {
  const e = err as { code?: unknown; details?: unknown; message?: unknown; name?: unknown };
  const message = typeof e.details === 'string' && e.details ? e.details : String(e.message ?? err);
  const name = typeof e.name === 'string' ? e.name : '';
  if (/Profile is missing credentials/.test(message)) {
    return new FailedPreconditionError(
      'Modal credentials are missing: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET in the executor\'s environment ' +
        '(create a token with `modal token new`)',
      { cause: err },
    );
  }
  if (e.code === 16 || e.code === 7) {
    return new FailedPreconditionError(
      `Modal refused the credentials while ${doing} (${message}): check MODAL_TOKEN_ID and MODAL_TOKEN_SECRET ` +
        'in the executor\'s environment (create a token with `modal token new`)',
      { cause: err },
    );
  }
  if (e.code === 8 || name === 'ResourceExhaustedError') {
    return new ResourceExhaustedError(`Modal has no capacity or quota left while ${doing}: ${message}`, { cause: err });
  }
  if (/^Image build for .* failed/.test(message)) {
    return new FailedPreconditionError(
      `Modal could not build terminal.modal_image ${JSON.stringify(image ?? '')} while ${doing}: ${message.replace(/\s+/g, ' ')}; ` +
        'check the image name and that Modal can pull it',
      { cause: err },
    );
  }
  if (e.code === 14) {
    return new UnavailableError(`cannot reach Modal while ${doing}: ${message}`, { cause: err });
  }
  return new UnavailableError(`Modal failed while ${doing}: ${message}`, { cause: err });
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
  readonly #environments = new Map<string, ModalEnvironment>();
  #baseImage: ModalSdk.Image | undefined;
  #closed = false;

  private constructor(options: ModalBackendOptions, sdk: Sdk, client: ModalClient, app: ModalSdk.App) {
    this.#o = options;
    this.#sdk = sdk;
    this.#client = client;
    this.#app = app;
    this.#store = new SnapshotStore(options.stateDir);
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
    return new ModalBackend(options, sdk, client, app);
  }

  get capabilities(): BackendCapabilities {
    // Every environment runs execute_code itself (its agent relays rpc.sock; an image without python3 cannot run
    // on modal at all, so there is no agent-less fallback): the executor needs no code containers.
    return { name: 'modal', pty: true, hostFilesystem: false, sharesRpcDir: true };
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

  get sandboxTimeoutMs(): number {
    return this.#o.sandboxTimeoutMs ?? SANDBOX_TIMEOUT_MS;
  }

  async createEnvironment(key: TaskKey): Promise<BackendEnvironment> {
    if (this.#closed) throw new UnavailableError('the modal backend is closed');
    const id = taskKeyString(key);
    if (this.#environments.has(id)) throw new FailedPreconditionError(`an environment for task ${id} already exists on this executor`);
    const logger = this.#o.logger?.child({ backend: 'modal', task: id });
    let opened = await this.openSandbox(key, true, logger);
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

  /** Starts the agent in `sandbox` and prepares the task's state directory. */
  async attach(sandbox: ModalSdk.Sandbox, key: TaskKey, logger: Logger | undefined, createdAt: number): Promise<LiveSandbox> {
    const description = `modal:${sandboxName(key)} (${sandbox.sandboxId})`;
    const agent = await loadAgentScript();
    // The task's private directory in the sandbox (made 0700 below); the agent waits in it after a dropped stream.
    const stateDir = `/tmp/berth-state-${randomBytes(8).toString('hex')}`;
    let previous: ModalAgentProcess | undefined;
    let channel: AgentChannel;
    try {
      channel = await startStdioAgent({
        spawn: (argv) => {
          // A resume starts once the dropped exec's stdin is closed: its agent is then on its way to the linger socket.
          previous = spawnModalAgent(sandbox, argv, agent.content, previous?.stdinEnded);
          return previous;
        },
        agentPath: 'berth_agent.py',
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
      const out = await runSmall(
        channel,
        `rm -rf ${SANDBOX_CODE_DIR} && mkdir -p -m 700 ${stateDir} ${SANDBOX_CODE_DIR} && printf '%s\\n%s\\n' "$HOME" "$BERTH_SANDBOX_WORKDIR"`,
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

/** Runs a short helper command on the channel; its stdout (at most 8 KiB), or an error. */
async function runSmall(channel: SandboxChannel, script: string): Promise<string> {
  let out = '';
  const proc = await channel.spawn({
    script,
    cwd: '/',
    onOutput: (chunk) => {
      if (out.length < 8192) out += chunk.toString('utf8');
    },
  });
  const timer = setTimeout(() => void proc.kill(1000).catch(() => undefined), 60_000);
  try {
    const exit = await proc.exited;
    if (exit.code !== 0) throw new UnavailableError(`a setup command in the Modal sandbox failed (exit ${exit.code ?? exit.signal}): ${out.slice(0, 500)}`);
  } finally {
    clearTimeout(timer);
  }
  return out.slice(0, 8192);
}

/** A task's sandbox, found or made, before its agent runs. */
interface OpenedSandbox {
  readonly sandbox: ModalSdk.Sandbox;
  /** When it was created (an estimate for one found running); its timeout runs from then. */
  readonly createdAt: number;
  /** Found running (an earlier executor's), not created now. */
  readonly reattached?: boolean;
  readonly notice?: string;
}

/** One running sandbox of a task and the agent in it. */
interface LiveSandbox {
  readonly sandbox: ModalSdk.Sandbox;
  readonly channel: AgentChannel;
  readonly description: string;
  readonly stateDir: string;
  readonly homeDir: string;
  readonly initialCwd: string;
  /** When the sandbox was created: its timeout runs from then. */
  readonly startedAt: number;
}

interface EnvironmentSettings {
  readonly persistent: boolean;
  readonly killGraceMs: number;
  readonly logger: Logger | undefined;
  readonly onDisposed: () => void;
}

/** How long before the sandbox's timeout a task in use gets a new sandbox. */
function renewMarginMs(timeoutMs: number): number {
  return Math.min(5 * 60_000, Math.floor(timeoutMs / 4));
}

export class ModalEnvironment implements BackendEnvironment {
  readonly #backend: ModalBackend;
  readonly #key: TaskKey;
  readonly #s: EnvironmentSettings;
  readonly #ops = new ChannelOperations({
    withChannel: (fn) => this.#withChannel(fn),
    cwd: () => this.initialCwd,
    killGraceMs: () => this.#s.killGraceMs,
    logger: () => this.#s.logger,
  });
  #live: LiveSandbox;
  #replacing: Promise<LiveSandbox> | undefined;
  #notices: string[] = [];
  #recreated = false;
  #disposing: Promise<void> | undefined;
  /**
   * execute_code runs in the sandbox itself: the agent makes the run dir and
   * rpc.sock there and relays each connection over its stream, so the
   * script's open() sees the files its terminal() calls wrote.
   */
  readonly rpcRelay: RpcRelay;

  constructor(backend: ModalBackend, key: TaskKey, live: LiveSandbox, settings: EnvironmentSettings) {
    this.#backend = backend;
    this.#key = key;
    this.#live = live;
    this.#s = settings;
    this.rpcRelay = {
      sandboxDir: SANDBOX_CODE_DIR,
      listen: (socketPath: string, onConnection: (socket: Duplex) => void): Promise<RelayedSocket> => {
        assertNotReleased(this, this.#disposing);
        return this.#withChannel((channel) => channel.listen(socketPath, onConnection));
      },
    };
  }

  get description(): string {
    return this.#live.description;
  }
  get homeDir(): string {
    return this.#live.homeDir;
  }
  get initialCwd(): string {
    return this.#live.initialCwd;
  }
  get stateDir(): string {
    return this.#live.stateDir;
  }
  /** The current sandbox's exec agent (tests drop its stream). */
  get agentChannel(): AgentChannel {
    return this.#live.channel;
  }
  /** The current sandbox (tests look at it). */
  get sandboxId(): string {
    return this.#live.sandbox.sandboxId;
  }

  takeNotices(): string[] {
    return this.#notices.splice(0);
  }

  /** Whether a new sandbox replaced the old one (lost or renewed) since the last call. */
  takeRecreated(): boolean {
    const recreated = this.#recreated;
    this.#recreated = false;
    return recreated;
  }

  addNotice(text: string): void {
    this.#notices.push(text);
  }

  /** The current sandbox: replaced first if it was lost, or renewed if its timeout is near. */
  async #ready(): Promise<LiveSandbox> {
    assertNotReleased(this, this.#disposing);
    if (this.#replacing) return this.#replacing;
    const live = this.#live;
    if (live.channel.isLost) return this.#replace(live, 'lost');
    const timeout = this.#backend.sandboxTimeoutMs;
    if (Date.now() >= live.startedAt + timeout - renewMarginMs(timeout)) return this.#replace(live, 'renew');
    return live;
  }

  /**
   * A new sandbox for the task: after a loss, from its recorded snapshot
   * (persistent) or the image; to renew, from a snapshot of the old one.
   */
  #replace(old: LiveSandbox, why: 'lost' | 'renew', during = ''): Promise<LiveSandbox> {
    if (this.#live !== old && !this.#replacing) return Promise.resolve(this.#live);
    this.#replacing ??= (async () => {
      // A dropped stream whose agent was found again (it lingered): same sandbox, background processes kept.
      if (why === 'lost' && (await old.channel.recover())) return old;
      const logger = this.#s.logger;
      let image: ModalSdk.Image | undefined;
      let what: string;
      if (why === 'renew') {
        image = await old.sandbox.snapshotFilesystem().catch((err: unknown) => {
          logger?.warn({ err }, 'snapshot for the renewal failed; the new sandbox starts without the files');
          return undefined;
        });
        what =
          `The task's Modal sandbox reached the end of its ${this.#backend.sandboxTimeoutMs / 1000}-second ` +
          `lifetime; a new sandbox was started from a snapshot of its files${image ? '' : ' (the snapshot failed: files are gone)'}: ` +
          'background processes were stopped.';
      } else {
        const code = await old.sandbox.poll().catch(() => null);
        const fate = code === null ? 'lost its exec agent' : code === 124 ? 'reached its timeout' : `ended (exit ${code})`;
        what =
          `The task's Modal sandbox ${fate}${during}; a new sandbox was started: background processes were stopped and ` +
          (this.#s.persistent ? 'files written since the last release are gone.' : 'files written in the old sandbox are gone.');
      }
      old.channel.close();
      await old.sandbox.terminate().catch((err: unknown) => logger?.warn({ err }, 'terminating the old sandbox failed'));
      old.sandbox.detach();
      assertNotReleased(this, this.#disposing);
      const opened = await this.#backend.openSandbox(this.#key, false, logger, image);
      let next: LiveSandbox;
      try {
        next = await this.#backend.attach(opened.sandbox, this.#key, logger, opened.createdAt);
      } catch (err) {
        await opened.sandbox.terminate().catch(() => undefined);
        throw err;
      }
      if (this.#disposing) {
        next.channel.close();
        await next.sandbox.terminate().catch(() => undefined);
        assertNotReleased(this, this.#disposing);
      }
      this.#live = next;
      this.#recreated = true;
      logger?.warn({ sandbox: next.sandbox.sandboxId, why }, 'task sandbox replaced');
      this.#notices.push(what);
      if (opened.notice) this.#notices.push(opened.notice);
      return next;
    })().finally(() => {
      this.#replacing = undefined;
    });
    return this.#replacing;
  }

  async #withChannel<T>(fn: (channel: AgentChannel) => Promise<T>): Promise<T> {
    const live = await this.#ready();
    try {
      return await fn(live.channel);
    } catch (err) {
      if (!(err instanceof SandboxLostError) || this.#disposing) throw err;
      const next = await this.#replace(live, 'lost');
      return fn(next.channel);
    }
  }

  async exec(options: ExecOptions): Promise<ExecResult> {
    assertNotReleased(this, this.#disposing);
    const early = interruptedBeforeStart(options);
    if (early) return early;
    let live = await this.#ready();
    const spawn = (l: LiveSandbox) =>
      l.channel.spawn({
        script: options.script,
        cwd: l.initialCwd,
        ...(options.env ? { env: options.env } : {}),
        ...(options.pty ? { pty: true } : {}),
        ...(options.stdin !== undefined ? { stdin: options.stdin } : {}),
        onOutput: (chunk) => deliverOutput(options.onOutput, chunk, this.#s.logger),
      });
    let proc: SandboxProcess;
    try {
      proc = await spawn(live);
    } catch (err) {
      if (!(err instanceof SandboxLostError) || this.#disposing) throw err;
      live = await this.#replace(live, 'lost');
      proc = await spawn(live);
    }
    const outcome = await awaitForeground(proc, options, this.#s.killGraceMs);
    if (!outcome.exit) {
      if (this.#disposing) throw outcome.lost;
      if (await live.channel.recover()) {
        this.#notices.push(
          `The connection to the exec agent in ${live.description} dropped while the command ran; the command was stopped ` +
            '(the sandbox and its background processes were kept).',
        );
        return outcome.deadline.result(137);
      }
      // The sandbox went away under the command: nothing of it runs any more.
      await this.#replace(live, 'lost', ' while the command ran');
      return outcome.deadline.result(137);
    }
    return outcome.result;
  }

  startBackground(options: BackgroundOptions): Promise<BackgroundHandle> {
    assertNotReleased(this, this.#disposing);
    return this.#ops.startBackground(options);
  }

  readFile(absPath: string): Promise<Buffer> {
    return this.#ops.readFile(absPath);
  }

  writeFile(absPath: string, data: Uint8Array): Promise<void> {
    return this.#ops.writeFile(absPath, data);
  }

  stat(absPath: string): Promise<FileStat> {
    return this.#ops.stat(absPath);
  }

  /** Stops the agent (and what it runs), snapshots in persistent mode, terminates the sandbox. */
  dispose(): Promise<void> {
    this.#disposing ??= (async () => {
      await this.#replacing?.catch(() => undefined);
      const live = this.#live;
      const logger = this.#s.logger;
      live.channel.close();
      if (this.#s.persistent) {
        try {
          const image = await live.sandbox.snapshotFilesystem();
          await this.#backend.recordSnapshot(this.#key, image.imageId);
          logger?.info({ image: image.imageId }, 'task files snapshotted for its next sandbox');
        } catch (err) {
          logger?.warn({ err: modalError(err, 'snapshotting the sandbox').message }, 'the task\'s files could not be snapshotted');
        }
      } else {
        await this.#backend.recordSnapshot(this.#key, undefined).catch(() => undefined);
      }
      await live.sandbox.terminate().catch((err: unknown) => {
        logger?.warn({ err: modalError(err, 'terminating the sandbox').message }, 'terminating the task sandbox failed');
      });
      live.sandbox.detach();
      this.#s.onDisposed();
    })();
    return this.#disposing;
  }
}

