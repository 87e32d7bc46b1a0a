/**
 * The `ssh` backend: runs tasks on a remote host over ssh (ssh2, in-process).
 *
 * - One multiplexed connection per (tenant, host, user), shared by that
 *   tenant's tasks, re-established transparently when it drops.
 * - Each task gets its own directory on the host,
 *   `~/.berth/tasks/<hash>/{work,state,bg}`; a preflight at task start checks
 *   the connection, bash and setsid, and says exactly what failed.
 * - Each task runs the exec agent (its archive, copied once to
 *   `~/.berth/agent-<hash>.pyz`) on one channel of the connection: a command
 *   is one message, killed by process group inside the host; files go
 *   through it too. A host without a usable python3 (3.8+) gets a channel
 *   per command instead (ssh-channel-exec.ts) and SFTP for files; said once
 *   in the log. A lost agent stream stops what runs through it (the agent
 *   ends its processes when its stream ends) and the next call starts a new
 *   agent.
 * - Background processes are detached (nohup/log/exit/pid files), survive a
 *   dropped connection (and a dropped agent stream), and are polled over
 *   SFTP; their helper commands go through the agent when there is one.
 */
import { posix } from 'node:path';
import { FailedPreconditionError, InvalidArgumentError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type { Backend, BackendCapabilities, BackendEnvironment, DiagnosisPhase, DiagnosticFinding, TaskKey } from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import { loadAgentScript, type AgentScript } from '../shared/agent/agent-script.js';
import { AgentUnavailableError } from '../shared/agent/stdio-agent.js';
import { KnownHostsFile } from './known-hosts.js';
import { AGENT_DIR, buildAgentCopyCommand, remoteAgentPath, sshAgentFinding, startSshAgent } from './ssh-agent.js';
import { runShort } from './ssh-background.js';
import { SshConnection, type HostKeyPolicy } from './ssh-connection.js';
import { SshEnvironment, type EnvironmentSetup } from './ssh-environment.js';
import { buildPreflightCommand, DEFAULT_TASKS_DIR, PREFLIGHT_EXIT, taskDirName } from './ssh-scripts.js';


export interface SshBackendOptions {
  readonly host: string;
  /** Default 22. */
  readonly port?: number;
  readonly user: string;
  /** The private key (OpenSSH or PEM text). */
  readonly privateKey: Buffer | string;
  readonly passphrase?: string;
  /** Where the key came from, for error messages (a path); default "the configured key". */
  readonly keyName?: string;
  /** known_hosts file holding the pinned host keys. */
  readonly knownHostsPath: string;
  /** Default accept-new: pin on first contact, refuse a changed key. */
  readonly hostKeyPolicy?: HostKeyPolicy;
  /** Default 10,000 ms. */
  readonly connectTimeoutMs?: number;
  /** Default 15,000 ms; a connection is dropped after `keepaliveCountMax` (3) unanswered ones. */
  readonly keepaliveIntervalMs?: number;
  readonly keepaliveCountMax?: number;
  /** The host's sshd MaxSessions (channels per connection); default 10. */
  readonly maxSessions?: number;
  /** Between SIGTERM and SIGKILL of a process group; default 1000 ms. */
  readonly killGraceMs?: number;
  /** After a kill, how long to wait for the channel to close before closing it ourselves; default 1000 ms. */
  readonly pipeDrainMs?: number;
  /** How often background processes are polled; default 250 ms. */
  readonly pollIntervalMs?: number;
  /** Task directories, relative to the remote home; default `.berth/tasks`. */
  readonly tasksDir?: string;
  /** A tenant's connection is closed this long after its last task is released; default 60,000 ms. */
  readonly connectionIdleMs?: number;
  /**
   * `auto` (default): run commands through the exec agent where the host has
   * python3 3.8+, else a channel per command. `off`: always a channel per
   * command (the agent is never copied).
   */
  readonly agent?: 'auto' | 'off';
  /** The agent's archive to copy; default: the one of this installation. */
  readonly agentScriptPath?: string;
  readonly logger?: Logger;
}

/**
 * Channels a connection keeps for other work than agents (helper commands,
 * the control slot, SFTP): agents take at most MaxSessions minus this many;
 * the tenant's next task opens another connection.
 */
const SESSIONS_KEPT_FROM_AGENTS = 4;

interface PooledConnection {
  readonly connection: SshConnection;
  refs: number;
  /** Tasks running an agent on this connection (each holds a channel). */
  agents: number;
  idleTimer: NodeJS.Timeout | undefined;
}

/** Runs tasks on one ssh host. */
export class SshBackend implements Backend {
  readonly #options: SshBackendOptions;
  readonly #port: number;
  readonly #knownHosts: KnownHostsFile;
  /** A tenant's connections: the first one, and more once sshd's MaxSessions leaves no channel for another agent. */
  readonly #pool = new Map<string, PooledConnection[]>();
  readonly #environments = new Map<string, SshEnvironment>();
  /** Why the host cannot run the agent, once known (then no task tries again). */
  #agentUnusable: string | undefined;
  /** Set once the agent's copy on the host was seen or made. */
  #agentCopied = false;
  #closed = false;

  constructor(options: SshBackendOptions) {
    if (!options.host) throw new InvalidArgumentError('the ssh backend needs a host (terminal.ssh_host)');
    if (!options.user) throw new InvalidArgumentError('the ssh backend needs a user (terminal.ssh_user)');
    const tasksDir = options.tasksDir ?? DEFAULT_TASKS_DIR;
    if (tasksDir.startsWith('/') || tasksDir.split('/').includes('..') || tasksDir === '') {
      throw new InvalidArgumentError(`the ssh tasks directory must be relative to the home directory: ${tasksDir}`);
    }
    this.#options = options;
    this.#port = options.port ?? 22;
    this.#knownHosts = new KnownHostsFile(options.knownHostsPath);
  }

  get capabilities(): BackendCapabilities {
    // The host is a real machine, not a throwaway container: approval is never skipped.
    return { name: 'ssh', pty: true, hostFilesystem: true, sharesRpcDir: false };
  }

  /** The (first) connection a tenant's tasks share (created on first use). Exposed for tests and the bench. */
  connectionFor(tenant: string): SshConnection {
    const first = this.#pool.get(this.#poolKey(tenant))?.[0];
    return (first ?? this.#newConnection(tenant)).connection;
  }

  /** How many connections a tenant has open now (tests). */
  connectionCount(tenant: string): number {
    return this.#pool.get(this.#poolKey(tenant))?.length ?? 0;
  }

  /** A task's environment on this executor (the doctor looks at it). */
  environmentOf(key: TaskKey): SshEnvironment | undefined {
    return this.#environments.get(taskKeyString(key));
  }

  /** Why the host cannot run the exec agent, once a task found out; undefined while it can (or nobody tried). */
  get agentUnusable(): string | undefined {
    return this.#agentUnusable;
  }

  /** How the task's commands reach the host: through the exec agent, or one channel each. */
  async diagnose(key: TaskKey, phase: DiagnosisPhase): Promise<DiagnosticFinding[]> {
    const finding = phase === 'live' ? sshAgentFinding(this.environmentOf(key)?.usesAgent, this.#agentUnusable) : undefined;
    return finding ? [finding] : [];
  }

  async createEnvironment(key: TaskKey): Promise<BackendEnvironment> {
    if (this.#closed) throw new UnavailableError('the ssh backend is closed');
    const id = taskKeyString(key);
    if (this.#environments.has(id)) {
      throw new FailedPreconditionError(`an environment for task ${id} already exists on this executor`);
    }
    // The agent's channel is reserved before the first await, so tasks created at once never overfill a connection.
    const forAgent = this.#agentWanted() && this.#maxAgents() > 0;
    const pooled = this.#acquire(key.tenant, forAgent);
    let environment: SshEnvironment;
    try {
      environment = await this.#preflight(pooled, key, forAgent);
    } catch (err) {
      if (forAgent) pooled.agents -= 1;
      this.#releaseConnection(key.tenant, pooled);
      throw err;
    }
    const counted = environment.usesAgent;
    if (forAgent && !counted) pooled.agents -= 1;
    environment.onDisposed = () => {
      this.#environments.delete(id);
      if (counted) pooled.agents -= 1;
      this.#releaseConnection(key.tenant, pooled);
    };
    this.#environments.set(id, environment);
    return environment;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#environments.values()].map((e) => e.dispose()));
    await Promise.all(
      [...this.#pool.values()].flat().map(async (p) => {
        clearTimeout(p.idleTimer);
        await p.connection.close();
      }),
    );
    this.#pool.clear();
  }

  #poolKey(tenant: string): string {
    return `${tenant}\0${this.#options.user}@${this.#options.host}:${this.#port}`;
  }

  /** A new connection for `tenant`, added to its list (not connected yet: that happens on first use). */
  #newConnection(tenant: string): PooledConnection {
    const o = this.#options;
    const pooled: PooledConnection = {
      connection: new SshConnection({
        host: o.host,
        port: this.#port,
        user: o.user,
        privateKey: o.privateKey,
        ...(o.passphrase !== undefined ? { passphrase: o.passphrase } : {}),
        keyName: o.keyName ?? 'the configured key',
        knownHosts: this.#knownHosts,
        hostKeyPolicy: o.hostKeyPolicy ?? 'accept-new',
        connectTimeoutMs: o.connectTimeoutMs ?? 10_000,
        keepaliveIntervalMs: o.keepaliveIntervalMs ?? 15_000,
        keepaliveCountMax: o.keepaliveCountMax ?? 3,
        ...(o.maxSessions !== undefined ? { maxSessions: o.maxSessions } : {}),
        ...(o.logger ? { logger: o.logger.child({ backend: 'ssh', tenant }) } : {}),
      }),
      refs: 0,
      agents: 0,
      idleTimer: undefined,
    };
    const poolKey = this.#poolKey(tenant);
    this.#pool.set(poolKey, [...(this.#pool.get(poolKey) ?? []), pooled]);
    return pooled;
  }

  /**
   * A connection for a new task of `tenant`, referenced: the first one, or
   * with `forAgent` the first with a channel to spare for one more agent
   * (its slot is taken here), else a new connection.
   */
  #acquire(tenant: string, forAgent: boolean): PooledConnection {
    const list = this.#pool.get(this.#poolKey(tenant)) ?? [];
    const max = this.#maxAgents();
    const pooled = (forAgent ? list.find((p) => p.agents < max) : list[0]) ?? this.#newConnection(tenant);
    pooled.refs += 1;
    if (forAgent) pooled.agents += 1;
    clearTimeout(pooled.idleTimer);
    pooled.idleTimer = undefined;
    return pooled;
  }

  #releaseConnection(tenant: string, pooled: PooledConnection): void {
    pooled.refs = Math.max(0, pooled.refs - 1);
    if (pooled.refs > 0 || this.#closed) return;
    clearTimeout(pooled.idleTimer);
    pooled.idleTimer = setTimeout(() => {
      const poolKey = this.#poolKey(tenant);
      const list = this.#pool.get(poolKey) ?? [];
      if (pooled.refs > 0 || !list.includes(pooled)) return;
      const rest = list.filter((p) => p !== pooled);
      if (rest.length > 0) this.#pool.set(poolKey, rest);
      else this.#pool.delete(poolKey);
      void pooled.connection.close();
    }, this.#options.connectionIdleMs ?? 60_000);
    pooled.idleTimer.unref();
  }

  /** Connects (if needed), checks the host, makes the task's directories and starts its agent. */
  async #preflight(pooled: PooledConnection, key: TaskKey, forAgent: boolean): Promise<SshEnvironment> {
    const connection = pooled.connection;
    const tasksDir = this.#options.tasksDir ?? DEFAULT_TASKS_DIR;
    const dirName = taskDirName(key);
    const script = forAgent ? await loadAgentScript(this.#options.agentScriptPath) : undefined;
    const agentRel = script && !this.#agentCopied ? posix.join(AGENT_DIR, script.fileName) : undefined;
    const { exitCode, output } = await runShort(connection, buildPreflightCommand(tasksDir, dirName, agentRel, script !== undefined), {
      timeoutMs: (this.#options.connectTimeoutMs ?? 10_000) + 20_000,
    });
    const where = `${this.#options.user}@${this.#options.host}:${this.#port}`;
    const message = output.trim();
    switch (exitCode) {
      case 0:
        break;
      case PREFLIGHT_EXIT.noBash:
      case PREFLIGHT_EXIT.noSetsid:
      case PREFLIGHT_EXIT.cannotCreateDirs:
        throw new FailedPreconditionError(`ssh host ${where} cannot run tasks: ${message.replace(/^berth: /, '')}`);
      default:
        throw new UnavailableError(`ssh preflight on ${where} failed (exit ${exitCode ?? 'none'}): ${message || 'no output'}`);
    }
    const home = /^berth-home:(.*)$/m.exec(output)?.[1];
    if (!home || !home.startsWith('/')) {
      throw new UnavailableError(`ssh preflight on ${where} did not report a home directory: ${message || 'no output'}`);
    }
    const taskDir = posix.join(home, tasksDir, dirName);
    const rpcBaseDir = /^berth-rpc:(\/.*)$/m.exec(output)?.[1];
    const logger = this.#options.logger?.child({ backend: 'ssh', task: taskKeyString(key) });
    const setup: EnvironmentSetup = {
      connection,
      description: `ssh:${where}:${taskDir}`,
      homeDir: home,
      taskDir,
      killGraceMs: this.#options.killGraceMs ?? 1000,
      pipeDrainMs: this.#options.pipeDrainMs ?? 1000,
      pollIntervalMs: this.#options.pollIntervalMs ?? 250,
      logger,
      ...(rpcBaseDir ? { rpcBaseDir } : {}),
    };
    // The host was found unable to run the agent by another task in the meantime.
    if (!script || this.#agentUnusable !== undefined) return new SshEnvironment(setup);
    if (agentRel !== undefined && !/^berth-agent:yes$/m.test(output)) await this.#copyAgent(connection, home, script, where);
    this.#agentCopied = true;
    const startAgent = () =>
      startSshAgent({
        connection,
        agentPath: remoteAgentPath(home, script),
        description: `ssh host ${where}`,
        fallbackLogKey: `ssh host ${where}`,
        ...(this.#options.logger ? { logger: this.#options.logger.child({ backend: 'ssh' }) } : {}),
      });
    try {
      const agent = await startAgent();
      return new SshEnvironment(setup, { channel: agent, startAnother: startAgent });
    } catch (err) {
      if (!(err instanceof AgentUnavailableError) || !err.canFallBack) throw err;
      // Logged once per host by the agent starter; no later task tries again.
      this.#agentUnusable = err.message;
      return new SshEnvironment(setup);
    }
  }

  #agentWanted(): boolean {
    return this.#options.agent !== 'off' && this.#agentUnusable === undefined;
  }

  #maxAgents(): number {
    return Math.max(0, (this.#options.maxSessions ?? 10) - SESSIONS_KEPT_FROM_AGENTS);
  }

  /** Copies the agent to its content-addressed path on the host. */
  async #copyAgent(connection: SshConnection, home: string, script: AgentScript, where: string): Promise<void> {
    const copied = await runShort(connection, buildAgentCopyCommand(home, script), { stdin: script.content, timeoutMs: 60_000 });
    if (copied.exitCode !== 0) {
      throw new UnavailableError(
        `cannot copy the exec agent to ${remoteAgentPath(home, script)} on ${where} (exit ${copied.exitCode ?? 'none'}): ` +
          (copied.output.trim().slice(0, 500) || 'no output'),
      );
    }
    this.#options.logger?.info({ host: where, path: remoteAgentPath(home, script) }, 'copied the exec agent to the ssh host');
  }
}
