/**
 * The `ssh` backend: runs tasks on a remote host over ssh (ssh2, in-process).
 *
 * - One multiplexed connection per (tenant, host, user), shared by that
 *   tenant's tasks, re-established transparently when it drops; a channel
 *   per command.
 * - Each task gets its own directory on the host,
 *   `~/.berth/tasks/<hash>/{work,state,bg}`; a preflight at task start checks
 *   the connection, bash and setsid, and says exactly what failed.
 * - Foreground commands run under `setsid`; a timeout or interrupt kills the
 *   remote process group over a fresh channel (TERM, grace, KILL).
 * - Background processes are detached (nohup/log/exit/pid files), survive a
 *   dropped connection, and are polled over SFTP.
 * - Files go over SFTP.
 */
import { randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import type { ClientChannel } from 'ssh2';
import { FailedPreconditionError, InvalidArgumentError, UnavailableError } from '../../../common/errors.js';
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
  TaskKey,
} from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import { ExecDeadline, interruptedBeforeStart } from '../shared/exec-deadline.js';
import { assertNotReleased, deliverOutput } from '../shared/guards.js';
import { signalExitCode } from '../shared/process-group.js';
import { KnownHostsFile } from './known-hosts.js';
import { PgidLineFilter } from '../shared/pgid-line-filter.js';
import { BackgroundProcesses, runShort } from './ssh-background.js';
import { SshConnection, type HostKeyPolicy } from './ssh-connection.js';
import { sftpReadFile, sftpStat, sftpWriteFile } from './ssh-files.js';
import {
  buildExecCommand,
  buildKillCommand,
  buildPreflightCommand,
  buildRemoveCommand,
  DEFAULT_TASKS_DIR,
  pgidLinePrefix,
  PREFLIGHT_EXIT,
  taskDirName,
} from './ssh-scripts.js';

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
  readonly logger?: Logger;
}

interface PooledConnection {
  readonly connection: SshConnection;
  refs: number;
  idleTimer: NodeJS.Timeout | undefined;
}

/** Runs tasks on one ssh host. */
export class SshBackend implements Backend {
  readonly #options: SshBackendOptions;
  readonly #port: number;
  readonly #knownHosts: KnownHostsFile;
  readonly #pool = new Map<string, PooledConnection>();
  readonly #environments = new Map<string, SshEnvironment>();
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

  /** The connection a tenant's tasks share (created on first use). Exposed for tests and the bench. */
  connectionFor(tenant: string): SshConnection {
    return this.#acquire(tenant, false).connection;
  }

  async createEnvironment(key: TaskKey): Promise<BackendEnvironment> {
    if (this.#closed) throw new UnavailableError('the ssh backend is closed');
    const id = taskKeyString(key);
    if (this.#environments.has(id)) {
      throw new FailedPreconditionError(`an environment for task ${id} already exists on this executor`);
    }
    const pooled = this.#acquire(key.tenant, true);
    try {
      const environment = await this.#preflight(pooled.connection, key);
      environment.onDisposed = () => {
        this.#environments.delete(id);
        this.#releaseConnection(key.tenant);
      };
      this.#environments.set(id, environment);
      return environment;
    } catch (err) {
      this.#releaseConnection(key.tenant);
      throw err;
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#environments.values()].map((e) => e.dispose()));
    await Promise.all(
      [...this.#pool.values()].map(async (p) => {
        clearTimeout(p.idleTimer);
        await p.connection.close();
      }),
    );
    this.#pool.clear();
  }

  #poolKey(tenant: string): string {
    return `${tenant}\0${this.#options.user}@${this.#options.host}:${this.#port}`;
  }

  #acquire(tenant: string, ref: boolean): PooledConnection {
    const poolKey = this.#poolKey(tenant);
    let pooled = this.#pool.get(poolKey);
    if (!pooled) {
      const o = this.#options;
      pooled = {
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
        idleTimer: undefined,
      };
      this.#pool.set(poolKey, pooled);
    }
    if (ref) {
      pooled.refs += 1;
      clearTimeout(pooled.idleTimer);
      pooled.idleTimer = undefined;
    }
    return pooled;
  }

  #releaseConnection(tenant: string): void {
    const poolKey = this.#poolKey(tenant);
    const pooled = this.#pool.get(poolKey);
    if (!pooled) return;
    pooled.refs = Math.max(0, pooled.refs - 1);
    if (pooled.refs > 0 || this.#closed) return;
    clearTimeout(pooled.idleTimer);
    pooled.idleTimer = setTimeout(() => {
      if (pooled.refs > 0 || this.#pool.get(poolKey) !== pooled) return;
      this.#pool.delete(poolKey);
      void pooled.connection.close();
    }, this.#options.connectionIdleMs ?? 60_000);
    pooled.idleTimer.unref();
  }

  /** Connects (if needed), checks the host and makes the task's directories. */
  async #preflight(connection: SshConnection, key: TaskKey): Promise<SshEnvironment> {
    const tasksDir = this.#options.tasksDir ?? DEFAULT_TASKS_DIR;
    const dirName = taskDirName(key);
    const { exitCode, output } = await runShort(connection, buildPreflightCommand(tasksDir, dirName), {
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
    return new SshEnvironment({
      connection,
      description: `ssh:${where}:${taskDir}`,
      homeDir: home,
      taskDir,
      killGraceMs: this.#options.killGraceMs ?? 1000,
      pipeDrainMs: this.#options.pipeDrainMs ?? 1000,
      pollIntervalMs: this.#options.pollIntervalMs ?? 250,
      logger: this.#options.logger?.child({ backend: 'ssh', task: taskKeyString(key) }),
    });
  }
}

interface EnvironmentSetup {
  readonly connection: SshConnection;
  readonly description: string;
  readonly homeDir: string;
  readonly taskDir: string;
  readonly killGraceMs: number;
  readonly pipeDrainMs: number;
  readonly pollIntervalMs: number;
  readonly logger: Logger | undefined;
}


/** One task's directory on the ssh host. */
class SshEnvironment implements BackendEnvironment {
  readonly description: string;
  readonly homeDir: string;
  readonly initialCwd: string;
  readonly stateDir: string;
  onDisposed: (() => void) | undefined;

  readonly #setup: EnvironmentSetup;
  readonly #connection: SshConnection;
  readonly #background: BackgroundProcesses;
  /** Kill functions of foreground commands still running. */
  readonly #running = new Set<() => Promise<void>>();
  #disposing: Promise<void> | undefined;

  constructor(setup: EnvironmentSetup) {
    this.#setup = setup;
    this.#connection = setup.connection;
    this.description = setup.description;
    this.homeDir = setup.homeDir;
    this.initialCwd = posix.join(setup.taskDir, 'work');
    this.stateDir = posix.join(setup.taskDir, 'state');
    this.#background = new BackgroundProcesses(
      {
        connection: setup.connection,
        logger: setup.logger,
        killGraceMs: setup.killGraceMs,
        pollIntervalMs: setup.pollIntervalMs,
      },
      posix.join(setup.taskDir, 'bg'),
    );
  }

  #where(): string {
    const e = this.#connection.endpoint;
    return `${e.host}:${e.port}`;
  }

  async exec(options: ExecOptions): Promise<ExecResult> {
    assertNotReleased(this, this.#disposing);
    const early = interruptedBeforeStart(options);
    if (early) return early;
    const nonce = randomBytes(8).toString('hex');
    const command = buildExecCommand({
      script: options.script,
      cwd: this.initialCwd,
      nonce,
      ...(options.env ? { env: options.env } : {}),
    });
    // Aborts the wait for a channel when the command ends before it starts.
    const opening = new AbortController();
    let stop: () => void = () => opening.abort();
    const deadline = new ExecDeadline(options, () => stop());

    let channel: ClientChannel;
    try {
      ({ channel } = await this.#connection.exec(command, { ...(options.pty ? { pty: true } : {}), signal: opening.signal }));
    } catch (err) {
      deadline.dispose();
      if (deadline.ended) return deadline.result(0);
      throw err;
    }

    return new Promise<ExecResult>((resolve, reject) => {
      const filter = new PgidLineFilter(pgidLinePrefix(nonce));
      let exitCode: number | null = null;
      let exitSignal: string | undefined;
      let killing: Promise<void> | undefined;
      let killWanted = false;
      let closed = false;
      let drainTimer: NodeJS.Timeout | undefined;

      const emit = (chunk: Buffer) => deliverOutput(options.onOutput, chunk, this.#setup.logger);
      const kill = (): Promise<void> => {
        const pgid = filter.pgid;
        if (pgid === undefined) {
          // Not started yet: kill as soon as its group id arrives.
          killWanted = true;
          return Promise.resolve();
        }
        const graceMs = options.killGraceMs ?? this.#setup.killGraceMs;
        killing ??= runShort(this.#connection, buildKillCommand(pgid, graceMs), {
          control: true,
          timeoutMs: graceMs + 30_000,
        })
          .then(
            () => undefined,
            (err: unknown) => this.#setup.logger?.warn({ err, pgid }, 'killing a remote process group failed'),
          )
          .then(() => {
            if (closed) return;
            // Whoever still holds the channel's output is outside the group; stop waiting for them.
            drainTimer = setTimeout(() => channel.close(), this.#setup.pipeDrainMs);
          });
        return killing;
      };
      stop = () => void kill();
      this.#running.add(kill);

      const sendStdin = () => {
        const bytes = options.stdin === undefined ? Buffer.alloc(0) : Buffer.from(options.stdin);
        if (options.pty) {
          // A terminal has no half-close: type the input, then EOF (^D; twice after an unterminated line).
          if (bytes.length > 0) channel.write(bytes);
          channel.write(bytes.length === 0 || bytes[bytes.length - 1] === 0x0a ? '\x04' : '\x04\x04');
        } else {
          channel.end(bytes.length > 0 ? bytes : undefined);
        }
      };

      channel.on('data', (chunk: Buffer) =>
        emit(
          filter.push(chunk, () => {
            sendStdin();
            if (killWanted || deadline.ended) void kill();
          }),
        ),
      );
      channel.stderr.on('data', (chunk: Buffer) => emit(chunk));
      // The exit status comes with 'close': an 'exit' event may fire before our listener is attached.
      channel.once('close', (code?: number | null, signal?: string) => {
        exitCode = typeof code === 'number' ? code : null;
        exitSignal = signal;
        closed = true;
        deadline.dispose();
        if (drainTimer) clearTimeout(drainTimer);
        const settle = () => {
          this.#running.delete(kill);
          if (deadline.ended) {
            resolve(deadline.result(0));
          } else if (exitCode !== null) {
            resolve(deadline.result(exitCode));
          } else if (exitSignal !== undefined) {
            resolve(deadline.result(signalExitCode(exitSignal)));
          } else {
            // The connection dropped: the command may still run; kill it once the host is back.
            if (filter.pgid !== undefined) void this.#killAfterDrop(filter.pgid);
            reject(
              new UnavailableError(
                `the ssh connection to ${this.#where()} was lost while the command ran; it was stopped`,
              ),
            );
          }
        };
        if (killing) void killing.then(settle);
        else settle();
      });
    });
  }

  /**
   * Kills a group whose channel was lost with the connection. The host may
   * be restarting sshd or briefly unreachable, so this keeps trying (with
   * back-off, up to about a minute) until the kill command runs.
   */
  async #killAfterDrop(pgid: number): Promise<void> {
    const command = buildKillCommand(pgid, this.#setup.killGraceMs);
    const done = (async () => {
      for (let delayMs = 250, waitedMs = 0; waitedMs < 60_000; waitedMs += delayMs, delayMs = Math.min(delayMs * 2, 5000)) {
        try {
          const r = await runShort(this.#connection, command, { control: true, timeoutMs: this.#setup.killGraceMs + 30_000 });
          if (r.exitCode === 0) return;
        } catch (err) {
          this.#setup.logger?.debug({ err, pgid }, 'killing an orphaned remote group failed; retrying');
        }
        await new Promise((resolve) => setTimeout(resolve, delayMs));
      }
      this.#setup.logger?.warn({ pgid }, 'gave up killing a remote process group after the connection dropped');
    })();
    const entry = () => done;
    this.#running.add(entry);
    await done;
    this.#running.delete(entry);
  }

  async startBackground(options: BackgroundOptions): Promise<BackgroundHandle> {
    assertNotReleased(this, this.#disposing);
    return this.#background.start(options, this.initialCwd);
  }

  #assertAbsolute(absPath: string): void {
    if (!posix.isAbsolute(absPath)) throw new InvalidArgumentError(`path must be absolute: ${absPath}`);
  }

  async readFile(absPath: string): Promise<Buffer> {
    this.#assertAbsolute(absPath);
    return sftpReadFile(await this.#connection.sftp(), absPath, this.#where());
  }

  async writeFile(absPath: string, data: Uint8Array): Promise<void> {
    this.#assertAbsolute(absPath);
    await sftpWriteFile(await this.#connection.sftp(), absPath, data, this.#where());
  }

  async stat(absPath: string): Promise<FileStat> {
    this.#assertAbsolute(absPath);
    return sftpStat(await this.#connection.sftp(), absPath, this.#where());
  }

  dispose(): Promise<void> {
    this.#disposing ??= (async () => {
      await Promise.all([...this.#running].map((kill) => kill().catch(() => undefined)));
      await this.#background.killAll();
      this.#background.stop();
      try {
        const removed = await runShort(this.#connection, buildRemoveCommand(this.#setup.taskDir), { timeoutMs: 30_000 });
        if (removed.exitCode !== 0) {
          this.#setup.logger?.warn({ output: removed.output, dir: this.#setup.taskDir }, 'removing the task directory failed');
        }
      } catch (err) {
        this.#setup.logger?.warn({ err, dir: this.#setup.taskDir }, 'cannot remove the task directory (host unreachable?)');
      }
      this.onDisposed?.();
    })();
    return this.#disposing;
  }
}
