/**
 * The `daytona` backend: one Daytona sandbox per task, through Daytona's
 * official SDK (@daytonaio/sdk; loaded only by this backend).
 *
 * - The sandbox is named from tenant and task (so a restarted executor finds
 *   a persistent one again) and labelled `berth.tenant` / `berth.task`;
 *   image `terminal.daytona_image`, cpu and memory from the container keys,
 *   network policy as `networkBlockAll` / `networkAllowList`.
 * - Commands, background processes, PTYs and files go through the exec
 *   agent, over one PTY session per sandbox (pty-agent.ts): one message per
 *   command, process-group kills inside the sandbox, 124 / 130. execute_code
 *   scripts run in the sandbox too: the agent relays their rpc.sock.
 * - Release: persistent mode stops the sandbox (the next use of the task
 *   starts it again, files kept); otherwise it is deleted.
 *
 * Credentials come from the executor's environment (DAYTONA_API_KEY,
 * DAYTONA_API_URL, DAYTONA_TARGET), read by the SDK itself; none of them is
 * passed into a sandbox.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import {
  Daytona,
  DaytonaAuthenticationError,
  DaytonaConflictError,
  DaytonaError,
  DaytonaForbiddenError,
  DaytonaNotFoundError,
  type Sandbox,
} from '@daytonaio/sdk';
import {
  BerthError,
  FailedPreconditionError,
  ResourceExhaustedError,
  UnauthenticatedError,
  UnavailableError,
} from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type {
  Backend,
  BackendCapabilities,
  BackendEnvironment,
  DiagnosisPhase,
  DiagnosticFinding,
  LifecycleCapabilities,
  TaskKey,
} from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import { agentScriptFrom, findAgentScript } from '../shared/agent/agent-script.js';
import { startStdioAgent } from '../shared/agent/stdio-agent.js';
import { DaytonaEnvironment, SANDBOX_STATE_DIR, type Connection } from './daytona-environment.js';
import { ptyAgentSpawn, type SandboxDirs } from './pty-agent.js';

/** Where the agent's file goes in the sandbox. */
const AGENT_DIR = '/tmp/berth-agent';

/**
 * Suspension stops the sandbox through Daytona and resuming starts it again
 * (daytona-environment.ts). Snapshots are not wired in: the SDK's
 * `sandbox.createSnapshot(name)` makes a named Daytona snapshot (an image for
 * new sandboxes) of a sandbox's filesystem, but Berth does not yet map a
 * tenant's snapshots onto those names, list, size or delete them.
 */
const DAYTONA_LIFECYCLE: LifecycleCapabilities = {
  snapshot: false,
  processes: false,
  suspend: true,
  notes: [
    "suspend stops the sandbox through Daytona (no CPU or memory held): its files and the shell state are kept, background processes end",
    'snapshots are not available on daytona yet',
  ],
};

/** A sandbox's network settings as the SDK takes them. */
export interface DaytonaNetwork {
  readonly networkBlockAll?: boolean;
  /** Comma-separated CIDR ranges. */
  readonly networkAllowList?: string;
}

export interface DaytonaBackendOptions {
  /** Image of new sandboxes (terminal.daytona_image). */
  readonly image: string;
  /** Stop on release and start on next use (true), or delete on release. */
  readonly persistent: boolean;
  readonly cpus: number;
  readonly memoryMiB: number;
  /** Environment of every sandbox (passthrough variables, already free of provider secrets). */
  readonly env: Readonly<Record<string, string>>;
  /** The network settings of a tenant's sandboxes. */
  readonly network: (tenant: string) => DaytonaNetwork;
  /** What `berth doctor` says of the network policy of the configured tenants. */
  readonly networkFindings?: () => DiagnosticFinding[];
  /** Given to the SDK; unset keys fall back to DAYTONA_API_KEY, DAYTONA_API_URL, DAYTONA_TARGET. */
  readonly apiKey?: string;
  readonly apiUrl?: string;
  readonly target?: string;
  /** Between SIGTERM and SIGKILL of a process group; default 1000 ms. */
  readonly killGraceMs?: number;
  /** Limit of sandbox create and start, seconds; default 180. */
  readonly startTimeoutSeconds?: number;
  /** The agent's archive; default: this installation's (findAgentScript). */
  readonly agentScriptPath?: string;
  readonly logger?: Logger;
}

/** The sandbox name of a task: stable, so a restarted executor finds a persistent sandbox again. */
export function sandboxName(key: TaskKey): string {
  return `berth-${createHash('sha256').update(`${key.tenant}\0${key.taskId}`).digest('hex').slice(0, 32)}`;
}

/** Daytona's labels of a task's sandbox. */
export function sandboxLabels(key: TaskKey): Record<string, string> {
  return { 'berth.managed': 'true', 'berth.tenant': key.tenant, 'berth.task': key.taskId };
}

/**
 * What a user sees when Daytona says no: the provider, what it said, and
 * the fix. `doing`: what Berth was doing (`creating a sandbox for task t`).
 */
export function daytonaError(err: unknown, doing: string): BerthError {
  if (err instanceof BerthError) return err;
  const said = err instanceof Error ? err.message : String(err);
  if (err instanceof DaytonaAuthenticationError) {
    return new UnauthenticatedError(
      `Daytona refused the API key while ${doing} (${said}): set DAYTONA_API_KEY in the executor's environment ` +
        'to a valid key (and DAYTONA_API_URL if you use your own Daytona)',
      { cause: err },
    );
  }
  if (err instanceof DaytonaForbiddenError) {
    return new FailedPreconditionError(`Daytona denied ${doing} (${said}): check the API key's permissions and the organization`, {
      cause: err,
    });
  }
  if (err instanceof DaytonaError && err.statusCode === 429) {
    return new ResourceExhaustedError(`Daytona's rate limit or quota stopped ${doing} (${said}); try again later or raise the quota`, {
      cause: err,
    });
  }
  // The organization's limits come back as a 400: "Total CPU limit exceeded. Maximum allowed: 10."
  if (err instanceof DaytonaError && /limit exceeded|quota exceeded/i.test(said)) {
    return new ResourceExhaustedError(
      `Daytona's organization limits stopped ${doing} (${said}): end idle tasks, lower terminal.container_cpu / ` +
        'container_memory, or raise the limits in Daytona',
      { cause: err },
    );
  }
  if (/build_failed|failed to start with status: build_failed/i.test(said)) {
    return new FailedPreconditionError(
      `Daytona could not build the sandbox image while ${doing} (${said}): check terminal.daytona_image`,
      { cause: err },
    );
  }
  if (err instanceof DaytonaError && err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500) {
    return new FailedPreconditionError(`Daytona refused ${doing} (${said})`, { cause: err });
  }
  return new UnavailableError(`Daytona failed while ${doing}: ${said}`, { cause: err });
}

export class DaytonaBackend implements Backend {
  readonly #o: DaytonaBackendOptions;
  readonly #daytona: Daytona;
  readonly #agentSource: Buffer;
  readonly #agentPath: string;
  readonly #environments = new Map<string, DaytonaEnvironment>();
  #closed = false;

  private constructor(options: DaytonaBackendOptions, daytona: Daytona, agentSource: Buffer) {
    this.#o = options;
    this.#daytona = daytona;
    this.#agentSource = agentSource;
    this.#agentPath = `${AGENT_DIR}/${agentScriptFrom(agentSource).fileName}`;
  }

  /** Makes the SDK client (it reads DAYTONA_* for what the options leave out). */
  static async start(options: DaytonaBackendOptions): Promise<DaytonaBackend> {
    if (options.image === '') throw new FailedPreconditionError('terminal.daytona_image: the daytona backend needs it');
    const agentSource = readFileSync(options.agentScriptPath ?? findAgentScript());
    let daytona: Daytona;
    try {
      daytona = new Daytona({
        ...(options.apiKey ? { apiKey: options.apiKey } : {}),
        ...(options.apiUrl ? { apiUrl: options.apiUrl } : {}),
        ...(options.target ? { target: options.target } : {}),
      });
    } catch (err) {
      if (err instanceof DaytonaAuthenticationError) {
        throw new FailedPreconditionError(
          "the daytona backend has no Daytona credentials: set DAYTONA_API_KEY in the executor's environment " +
            '(and DAYTONA_API_URL, DAYTONA_TARGET when not using Daytona Cloud defaults)',
          { cause: err },
        );
      }
      throw daytonaError(err, 'configuring the Daytona client');
    }
    // Fails fast on a bad key or an unreachable API: the first page of Berth's own sandboxes.
    try {
      const pages = daytona.list({ labels: { 'berth.managed': 'true' }, limit: 1 });
      await pages.next();
      await pages.return?.(undefined);
    } catch (err) {
      await daytona[Symbol.asyncDispose]().catch(() => undefined);
      throw daytonaError(err, 'listing sandboxes (checking the credentials)');
    }
    return new DaytonaBackend(options, daytona, agentSource);
  }

  get capabilities(): BackendCapabilities {
    // The sandbox is the boundary; no directory is shared with the executor. Every environment runs
    // execute_code itself (its agent relays rpc.sock; there is no agent-less fallback), so no code containers.
    return { name: 'daytona', pty: true, hostFilesystem: false, sharesRpcDir: true, lifecycle: DAYTONA_LIFECYCLE };
  }

  get #startTimeout(): number {
    return this.#o.startTimeoutSeconds ?? 180;
  }

  /** The task's sandbox, running: found again (persistent) or created. */
  async #sandboxFor(key: TaskKey): Promise<Sandbox> {
    const id = taskKeyString(key);
    const name = sandboxName(key);
    let existing: Sandbox | undefined;
    try {
      existing = await this.#daytona.get(name);
    } catch (err) {
      if (!(err instanceof DaytonaNotFoundError)) throw daytonaError(err, `looking up the sandbox of task ${id}`);
    }
    if (existing && existing.state === 'destroyed') existing = undefined;
    // A sandbox that cannot start again (its build failed, it is in error) is replaced, persistent or not.
    const broken = existing !== undefined && ['error', 'build_failed'].includes(existing.state ?? '');
    if (existing && (!this.#o.persistent || broken) && existing.state !== 'destroying') {
      // Left by an executor that died before deleting it: not this task's to reuse.
      await existing.delete().catch((err: unknown) => {
        throw daytonaError(err, `deleting the old sandbox ${existing!.id} of task ${id}`);
      });
    }
    if (existing && (existing.state === 'destroying' || !this.#o.persistent || broken)) {
      // Deletion finishes after Daytona answers; the name is free only then.
      await this.#waitUntilGone(name, id);
      existing = undefined;
    }
    if (existing) {
      if (existing.state !== 'started') {
        try {
          await existing.start(this.#startTimeout);
        } catch (err) {
          throw daytonaError(err, `starting the sandbox ${existing.id} of task ${id}`);
        }
      }
      return existing;
    }
    const network = this.#o.network(key.tenant);
    let created: Sandbox;
    try {
      created = await this.#daytona.create(
        {
          name,
          image: this.#o.image,
          labels: sandboxLabels(key),
          envVars: { ...this.#o.env },
          resources: {
            cpu: Math.max(1, Math.ceil(this.#o.cpus)),
            memory: Math.max(1, Math.ceil(this.#o.memoryMiB / 1024)),
          },
          // Berth reaps idle tasks itself; Daytona's auto-stop would stop a sandbox under a background process.
          autoStopInterval: 0,
          ...(network.networkBlockAll ? { networkBlockAll: true } : {}),
          ...(network.networkAllowList ? { networkAllowList: network.networkAllowList } : {}),
        },
        { timeout: this.#startTimeout },
      );
    } catch (err) {
      // A sandbox that was made but did not start must not be left behind; one that held the name already is not ours.
      if (!(err instanceof DaytonaConflictError)) await this.#deleteByName(name);
      throw daytonaError(err, `creating a sandbox of ${this.#o.image} for task ${id}`);
    }
    return created;
  }

  /** Waits until no sandbox is called `name` (or it is destroyed); bounded by the start timeout. */
  async #waitUntilGone(name: string, id: string): Promise<void> {
    const deadline = Date.now() + this.#startTimeout * 1000;
    for (let delay = 100; ; delay = Math.min(delay * 2, 1000)) {
      try {
        const sandbox = await this.#daytona.get(name);
        if (sandbox.state === 'destroyed') return;
      } catch (err) {
        if (err instanceof DaytonaNotFoundError) return;
        throw daytonaError(err, `waiting for the old sandbox of task ${id} to be deleted`);
      }
      if (Date.now() > deadline) {
        throw new UnavailableError(`Daytona did not finish deleting the old sandbox ${name} of task ${id} within ${this.#startTimeout} s`);
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }

  async #deleteByName(name: string): Promise<void> {
    try {
      const sandbox = await this.#daytona.get(name);
      await sandbox.delete();
    } catch (err) {
      if (!(err instanceof DaytonaNotFoundError)) this.#o.logger?.warn({ err, sandbox: name }, 'deleting a failed Daytona sandbox failed');
    }
  }

  /** Opens the agent in `sandbox` over a new PTY session. */
  async #connect(sandbox: Sandbox, description: string): Promise<Connection> {
    let dirs: SandboxDirs | undefined;
    const spawn = ptyAgentSpawn(
      (o) => sandbox.process.createPty({ id: o.id, cols: o.cols, rows: o.rows, onData: o.onData }),
      this.#agentSource,
      (d) => (dirs = d),
      this.#o.logger,
    );
    try {
      const channel = await startStdioAgent({
        spawn,
        agentPath: this.#agentPath,
        // The task's state dir (0700; one sandbox per task): the agent waits there when its stream drops.
        lingerPath: `${SANDBOX_STATE_DIR}/agent/linger.sock`,
        description,
        fallbackLogKey: `daytona:${this.#o.image}`,
        ...(this.#o.logger ? { logger: this.#o.logger } : {}),
      });
      return { channel, dirs: dirs ?? { home: '/', cwd: '/' } };
    } catch (err) {
      throw daytonaError(err, `starting the exec agent in ${description}`);
    }
  }

  async createEnvironment(key: TaskKey): Promise<BackendEnvironment> {
    if (this.#closed) throw new UnavailableError('the daytona backend is closed');
    const id = taskKeyString(key);
    if (this.#environments.has(id)) throw new FailedPreconditionError(`an environment for task ${id} already exists on this executor`);
    let sandbox = await this.#sandboxFor(key);
    const description = `daytona sandbox ${sandbox.name}`;
    const release = async () => {
      this.#environments.delete(id);
      try {
        if (this.#o.persistent) await sandbox.stop();
        else await sandbox.delete();
      } catch (err) {
        if (err instanceof DaytonaNotFoundError) return;
        this.#o.logger?.warn({ err: daytonaError(err, 'releasing'), sandbox: sandbox.id }, 'releasing a Daytona sandbox failed');
      }
    };
    let connection: Connection;
    try {
      connection = await this.#connect(sandbox, description);
    } catch (err) {
      await release();
      throw err;
    }
    const environment = new DaytonaEnvironment(connection, {
      description,
      reconnect: async () => {
        let gone = false;
        try {
          await sandbox.refreshData();
        } catch (err) {
          if (!(err instanceof DaytonaNotFoundError)) throw daytonaError(err, `looking up ${description}`);
          gone = true;
        }
        if (gone || sandbox.state === 'destroyed') {
          // Deleted outside Berth: the task goes on in a new sandbox, and is told its files are gone.
          sandbox = await this.#sandboxFor(key);
          const next = await this.#connect(sandbox, description);
          return { ...next, notice: `The task's Daytona sandbox was deleted; a new sandbox was started: files written in the old one are gone.` };
        }
        if (sandbox.state !== 'started') {
          try {
            await sandbox.start(this.#startTimeout);
          } catch (err) {
            throw daytonaError(err, `starting ${description} again`);
          }
        }
        return this.#connect(sandbox, description);
      },
      release,
      stop: async () => {
        try {
          await sandbox.stop();
        } catch (err) {
          throw daytonaError(err, `stopping ${description}`);
        }
      },
      killGraceMs: this.#o.killGraceMs ?? 1000,
      logger: this.#o.logger?.child({ backend: 'daytona', task: id, sandbox: sandbox.id }),
    });
    this.#environments.set(id, environment);
    try {
      await environment.init();
    } catch (err) {
      await environment.dispose();
      throw err;
    }
    return environment;
  }

  /** How commands reach the sandbox and the network policy; after release, the doctor's sandbox is deleted. */
  async diagnose(key: TaskKey, phase: DiagnosisPhase): Promise<DiagnosticFinding[]> {
    if (phase === 'released') {
      return this.removeTaskSandbox(key).then(
        () => [],
        (err: unknown) => [
          {
            verdict: 'warn',
            text: `deleting the doctor's Daytona sandbox failed: ${(err as Error).message}; delete sandboxes labelled berth.tenant=${key.tenant}`,
          },
        ],
      );
    }
    return [
      { verdict: 'ok', text: 'commands reach the Daytona sandbox through the exec agent, over one PTY session' },
      ...(this.#o.networkFindings?.() ?? []),
    ];
  }

  /** Deletes the task's sandbox if there is one (a persistent one stays after release otherwise). */
  async removeTaskSandbox(key: TaskKey): Promise<void> {
    try {
      await (await this.#daytona.get(sandboxName(key))).delete();
    } catch (err) {
      if (!(err instanceof DaytonaNotFoundError)) throw daytonaError(err, `deleting the sandbox of task ${taskKeyString(key)}`);
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#environments.values()].map((e) => e.dispose()));
    await this.#daytona[Symbol.asyncDispose]();
  }
}
