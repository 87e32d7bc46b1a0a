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
 * - Snapshots: a Daytona snapshot of the sandbox's filesystem, recorded in
 *   the executor's state root (daytona-snapshots.ts); a fork is a new
 *   sandbox made from it.
 *
 * Credentials come from the executor's environment (DAYTONA_API_KEY,
 * DAYTONA_API_URL, DAYTONA_TARGET), read by the SDK itself; none of them is
 * passed into a sandbox.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
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
  NotFoundError,
  ResourceExhaustedError,
  UnauthenticatedError,
  UnavailableError,
} from '../../../common/errors.js';
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
  LifecycleCapabilities,
  TaskKey,
} from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import { agentScriptFrom, findAgentScript } from '../shared/agent/agent-script.js';
import { startStdioAgent } from '../shared/agent/stdio-agent.js';
import { executorStateDir } from '../shared/state-root.js';
import { DaytonaEnvironment, SANDBOX_STATE_DIR, type Connection } from './daytona-environment.js';
import { DaytonaSnapshotRecords, daytonaSnapshotName } from './daytona-snapshots.js';
import { ptyAgentSpawn, type SandboxDirs } from './pty-agent.js';

/** Where the agent's file goes in the sandbox. */
const AGENT_DIR = '/tmp/berth-agent';

/**
 * Suspension stops the sandbox through Daytona and resuming starts it again
 * (daytona-environment.ts). A snapshot is a Daytona snapshot of the
 * sandbox's filesystem (files and the shell state, never processes or
 * memory: the SDK asks for none), and a fork a new sandbox made from it.
 */
const DAYTONA_LIFECYCLE: LifecycleCapabilities = {
  snapshot: true,
  processes: false,
  suspend: true,
  notes: [
    "suspend stops the sandbox through Daytona (no CPU or memory held): its files and the shell state are kept, background processes end",
    "a snapshot is a Daytona snapshot of the sandbox's files (with the shell state): a fork runs none of the source's processes",
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
  /** Where snapshot records live (`<state_root>/daytona`); default under the default state root. */
  readonly stateDir?: string;
  /** Keys the names of Daytona snapshots (executor.shared_secret); default empty. */
  readonly nameSecret?: string;
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
  readonly #snapshots: DaytonaSnapshotRecords;
  #closed = false;

  private constructor(options: DaytonaBackendOptions, daytona: Daytona, agentSource: Buffer) {
    this.#o = options;
    this.#daytona = daytona;
    this.#snapshots = new DaytonaSnapshotRecords(options.stateDir ?? path.join(executorStateDir(), 'daytona'));
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

  /**
   * The task's sandbox, running: found again (persistent) or created; a
   * fork's is always created, from the Daytona snapshot `fromSnapshot`.
   */
  async #sandboxFor(key: TaskKey, fromSnapshot?: string): Promise<Sandbox> {
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
    // A fork starts from its snapshot: a sandbox of that name left behind is not its own.
    const broken = existing !== undefined && (fromSnapshot !== undefined || ['error', 'build_failed'].includes(existing.state ?? ''));
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
    const common = {
      name,
      labels: sandboxLabels(key),
      envVars: { ...this.#o.env },
      // Berth reaps idle tasks itself; Daytona's auto-stop would stop a sandbox under a background process.
      autoStopInterval: 0,
      ...(network.networkBlockAll ? { networkBlockAll: true } : {}),
      ...(network.networkAllowList ? { networkAllowList: network.networkAllowList } : {}),
    };
    const resources = { cpu: Math.max(1, Math.ceil(this.#o.cpus)), memory: Math.max(1, Math.ceil(this.#o.memoryMiB / 1024)) };
    let created: Sandbox;
    try {
      // A sandbox made from a snapshot gets the snapshot's resources (those of the source's sandbox).
      created = fromSnapshot
        ? await this.#daytona.create({ ...common, snapshot: fromSnapshot }, { timeout: this.#startTimeout })
        : await this.#daytona.create({ ...common, image: this.#o.image, resources }, { timeout: this.#startTimeout });
    } catch (err) {
      // A sandbox that was made but did not start must not be left behind; one that held the name already is not ours.
      if (!(err instanceof DaytonaConflictError)) await this.#deleteByName(name);
      throw daytonaError(err, `creating a sandbox of ${fromSnapshot ? 'a snapshot' : this.#o.image} for task ${id}`);
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

  async createEnvironment(key: TaskKey, options?: CreateEnvironmentOptions): Promise<BackendEnvironment> {
    if (this.#closed) throw new UnavailableError('the daytona backend is closed');
    const id = taskKeyString(key);
    if (this.#environments.has(id)) throw new FailedPreconditionError(`an environment for task ${id} already exists on this executor`);
    let fromSnapshot: string | undefined;
    if (options?.fromSnapshot) {
      const record = await this.#snapshots.get(key.tenant, options.fromSnapshot.id);
      if (!record) throw new NotFoundError(unknownSnapshotMessage(options.fromSnapshot.id));
      fromSnapshot = record.daytonaSnapshot;
    }
    let sandbox = await this.#sandboxFor(key, fromSnapshot);
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
      snapshot: (name) => sandbox.createSnapshot(name, this.#startTimeout),
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

  /**
   * Snapshots task `key`'s sandbox as a Daytona snapshot (files only; the
   * executor supplied the shell state) and records it. Marked under way
   * first, so one the executor does not live to record is deleted later.
   */
  async snapshot(
    key: TaskKey,
    env: BackendEnvironment,
    snapshot: Omit<BackendSnapshot, 'sizeBytes' | 'includesProcesses'>,
  ): Promise<BackendSnapshot> {
    const id = taskKeyString(key);
    if (!(env instanceof DaytonaEnvironment)) throw new FailedPreconditionError(`task ${id} has no daytona environment`);
    const name = daytonaSnapshotName(this.#o.nameSecret ?? '', key.tenant, snapshot.id);
    // Daytona's size of a snapshot is not mapped onto bytes: listed as 0, as on modal.
    const full: BackendSnapshot = { ...snapshot, sizeBytes: 0, includesProcesses: false };
    await this.#snapshots.begin(name);
    try {
      await env.snapshotFiles(name);
      await this.#waitUntilActive(name);
      await this.#snapshots.put({ snapshot: full, daytonaSnapshot: name });
    } catch (err) {
      await this.#removeSnapshot(name).then(
        () => this.#snapshots.end(name),
        (again: unknown) => this.#o.logger?.warn({ err: again, snapshot: name }, 'removing a failed Daytona snapshot failed; the next listing tries again'),
      );
      throw daytonaError(err, `snapshotting the sandbox of task ${id}`);
    }
    await this.#snapshots.end(name);
    return full;
  }

  /** Waits until Daytona can make sandboxes from the snapshot `name`; bounded by the start timeout. */
  async #waitUntilActive(name: string): Promise<void> {
    const deadline = Date.now() + this.#startTimeout * 1000;
    for (let delay = 100; ; delay = Math.min(delay * 2, 1000)) {
      const found = await this.#daytona.snapshot.get(name);
      if (found.state === 'active') return;
      if (['error', 'build_failed'].includes(found.state)) {
        throw new UnavailableError(`Daytona's snapshot ${name} failed (${found.state}: ${found.errorReason ?? 'no reason given'})`);
      }
      if (Date.now() > deadline) throw new UnavailableError(`Daytona's snapshot ${name} was not ready within ${this.#startTimeout} s (${found.state})`);
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }

  /** Deletes the Daytona snapshot `name`; one already gone is no error. */
  async #removeSnapshot(name: string): Promise<void> {
    try {
      await this.#daytona.snapshot.delete(name);
    } catch (err) {
      if (!(err instanceof DaytonaNotFoundError)) throw daytonaError(err, `deleting the Daytona snapshot ${name}`);
    }
  }

  /** `tenant`'s recorded snapshots; first deletes Daytona snapshots that an executor died before recording. */
  async listSnapshots(tenant: string): Promise<BackendSnapshot[]> {
    for (const name of await this.#snapshots.abandoned()) {
      await this.#removeSnapshot(name).then(
        () => this.#snapshots.end(name),
        (err: unknown) => this.#o.logger?.warn({ err, snapshot: name }, 'removing an abandoned Daytona snapshot failed'),
      );
    }
    return (await this.#snapshots.list(tenant)).map((r) => r.snapshot);
  }

  /** Deletes the Daytona snapshot, then the record; sandboxes made from it keep their files. */
  async deleteSnapshot(tenant: string, id: string): Promise<boolean> {
    const record = await this.#snapshots.get(tenant, id);
    if (!record) return false;
    await this.#removeSnapshot(record.daytonaSnapshot);
    return (await this.#snapshots.delete(tenant, id)) !== undefined;
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
