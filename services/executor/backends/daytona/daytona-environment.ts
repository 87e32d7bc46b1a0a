/**
 * One task's environment on the daytona backend: a sandbox and the exec
 * agent's channel into it (over a PTY session, see pty-agent.ts). Exec
 * semantics are the agent's, as on docker: each command is `bash -c` in its
 * own process group; on timeout or interrupt the whole group gets SIGTERM,
 * then SIGKILL after the grace period; 124 / 130 exit codes.
 *
 * When the channel is lost (the PTY session ended, the sandbox was stopped
 * by Daytona's auto-stop or by hand), the next operation opens a new one
 * (starting the sandbox again if it stopped) and says so in a notice.
 */
import { ChannelOperations, awaitForeground } from '../shared/channel-commands.js';
import type { Duplex } from 'node:stream';
import { FailedPreconditionError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type {
  BackendEnvironment,
  BackgroundHandle,
  BackgroundOptions,
  ExecOptions,
  ExecResult,
  FileStat,
  RelayedSocket,
  RpcRelay,
} from '../../backend.js';
import { interruptedBeforeStart } from '../shared/exec-deadline.js';
import { assertNotReleased, deliverOutput } from '../shared/guards.js';
import { SandboxLostError, type SandboxChannel, type SandboxProcess } from '../shared/sandbox-channel.js';
import type { SandboxDirs } from './pty-agent.js';

/** The runner's state files inside the sandbox; emptied when an environment begins. */
export const SANDBOX_STATE_DIR = '/tmp/berth-state';

/**
 * Where execute_code's run dirs go inside the sandbox (one sandbox per task,
 * so private to the task); emptied when an environment begins, which also
 * drops run dirs a killed executor left.
 */
export const SANDBOX_CODE_DIR = '/tmp/berth-code';

/** The agent's channel: pinged while idle, and relaying execute_code's socket. */
export type PingableChannel = SandboxChannel & {
  ping(): Promise<void>;
  listen(socketPath: string, onConnection: (socket: Duplex) => void): Promise<RelayedSocket>;
};

/** A connected agent and what the sandbox's shell said about its directories. */
export interface Connection {
  readonly channel: PingableChannel;
  readonly dirs: SandboxDirs;
  /** What to tell the task about how this connection came about (a replaced sandbox). */
  readonly notice?: string;
}

/**
 * How often an idle channel is pinged: proxies in front of the toolbox close
 * WebSockets that carry nothing for a while, and a closed one costs the
 * task its foreground command and a resume (the agent is found again).
 */
export const KEEPALIVE_MS = 30_000;

export interface DaytonaEnvironmentOptions {
  readonly description: string;
  /** Opens a new channel (starting the sandbox first if it is not running). */
  readonly reconnect: () => Promise<Connection>;
  /** Stops or deletes the sandbox. */
  readonly release: () => Promise<void>;
  readonly killGraceMs: number;
  /** {@link KEEPALIVE_MS} unless set. */
  readonly keepaliveMs?: number;
  readonly logger: Logger | undefined;
}

export class DaytonaEnvironment implements BackendEnvironment {
  readonly description: string;
  readonly homeDir: string;
  readonly initialCwd: string;
  readonly stateDir = SANDBOX_STATE_DIR;
  /**
   * execute_code runs in the sandbox itself: the agent makes the run dir and
   * rpc.sock there and relays each connection over its PTY stream, so the
   * script's open() sees the files its terminal() calls wrote.
   */
  readonly rpcRelay: RpcRelay;
  readonly #o: DaytonaEnvironmentOptions;
  readonly #ops = new ChannelOperations({
    withChannel: (fn) => this.#withChannel(fn),
    cwd: () => this.initialCwd,
    killGraceMs: () => this.#o.killGraceMs,
    logger: () => this.#o.logger,
  });
  #channel: PingableChannel;
  #reconnecting: Promise<PingableChannel> | undefined;
  #notices: string[] = [];
  #recreated = false;
  #disposing: Promise<void> | undefined;
  readonly #keepalive: NodeJS.Timeout;

  constructor(connection: Connection, options: DaytonaEnvironmentOptions) {
    this.#o = options;
    this.#channel = connection.channel;
    this.description = options.description;
    this.homeDir = connection.dirs.home || '/';
    this.initialCwd = connection.dirs.cwd || this.homeDir;
    this.#keepalive = setInterval(() => {
      if (!this.#channel.isLost) this.#channel.ping().catch(() => undefined);
    }, options.keepaliveMs ?? KEEPALIVE_MS);
    this.#keepalive.unref();
    this.rpcRelay = {
      sandboxDir: SANDBOX_CODE_DIR,
      listen: (socketPath, onConnection) => {
        assertNotReleased(this, this.#disposing);
        return this.#withChannel((channel) => channel.listen(socketPath, onConnection));
      },
    };
  }

  /** Empties the state and code directories (a stopped-and-started sandbox still holds the last task's). */
  async init(): Promise<void> {
    const dirs = `${SANDBOX_STATE_DIR} ${SANDBOX_CODE_DIR}`;
    const proc = await this.#channel.spawn({
      script: `rm -rf ${dirs} && mkdir -m 700 ${dirs}`,
      cwd: '/',
      onOutput: () => undefined,
    });
    const exit = await proc.exited;
    if (exit.code !== 0) throw new FailedPreconditionError(`cannot create ${dirs} in ${this.description}`);
  }

  /** The current exec agent's channel (tests drop its stream). */
  get agentChannel(): PingableChannel {
    return this.#channel;
  }

  takeNotices(): string[] {
    return this.#notices.splice(0);
  }

  /** Whether a new sandbox replaced a deleted one since the last call (a new exec agent alone does not count). */
  takeRecreated(): boolean {
    const recreated = this.#recreated;
    this.#recreated = false;
    return recreated;
  }

  async #ready(): Promise<PingableChannel> {
    assertNotReleased(this, this.#disposing);
    if (this.#reconnecting) return this.#reconnecting;
    return this.#channel.isLost ? this.#reconnect(this.#channel, '') : this.#channel;
  }

  #reconnect(lost: SandboxChannel, during: string): Promise<PingableChannel> {
    if (this.#channel !== lost && !this.#reconnecting) return Promise.resolve(this.#channel);
    this.#reconnecting ??= (async () => {
      // A dropped stream whose agent was found again (it lingered): same agent, background processes kept.
      if (lost === this.#channel && (await lost.recover?.())) return this.#channel;
      this.#o.logger?.warn({ sandbox: this.description }, 'lost the exec agent of a Daytona sandbox; opening a new one');
      lost.close();
      const next = await this.#o.reconnect();
      if (this.#disposing) {
        next.channel.close();
        assertNotReleased(this, this.#disposing);
      }
      this.#channel = next.channel;
      if (next.notice) {
        this.#recreated = true;
        this.#notices.push(next.notice);
        await this.init();
      } else {
        this.#notices.push(
          `The task's Daytona sandbox lost its exec agent${during}; a new one was started: ` +
            'background processes were stopped; files were kept.',
        );
      }
      return next.channel;
    })().finally(() => {
      this.#reconnecting = undefined;
    });
    return this.#reconnecting;
  }

  /** Runs `fn` on the live channel; once more on a new one when the stream was lost before `fn` got anywhere. */
  async #withChannel<T>(fn: (channel: PingableChannel) => Promise<T>): Promise<T> {
    const channel = await this.#ready();
    try {
      return await fn(channel);
    } catch (err) {
      if (!(err instanceof SandboxLostError) || this.#disposing) throw err;
      return fn(await this.#reconnect(channel, ''));
    }
  }

  async exec(options: ExecOptions): Promise<ExecResult> {
    assertNotReleased(this, this.#disposing);
    const early = interruptedBeforeStart(options);
    if (early) return early;
    let channel = await this.#ready();
    const spawn = (c: SandboxChannel) =>
      c.spawn({
        script: options.script,
        cwd: this.initialCwd,
        ...(options.env ? { env: options.env } : {}),
        ...(options.pty ? { pty: true } : {}),
        ...(options.stdin !== undefined ? { stdin: options.stdin } : {}),
        onOutput: (chunk) => deliverOutput(options.onOutput, chunk, this.#o.logger),
      });
    let proc: SandboxProcess;
    try {
      proc = await spawn(channel);
    } catch (err) {
      if (!(err instanceof SandboxLostError) || this.#disposing) throw err;
      channel = await this.#reconnect(channel, '');
      proc = await spawn(channel);
    }
    const outcome = await awaitForeground(proc, options, this.#o.killGraceMs);
    if (!outcome.exit) {
      // The agent went away under the command: the command went with it.
      if (this.#disposing) throw outcome.lost;
      if (await channel.recover?.()) {
        this.#notices.push(
          `The connection to the exec agent in ${this.description} dropped while the command ran; the command was stopped ` +
            '(background processes were kept).',
        );
        return outcome.deadline.result(137);
      }
      await this.#reconnect(channel, ' while the command ran');
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

  dispose(): Promise<void> {
    this.#disposing ??= (async () => {
      clearInterval(this.#keepalive);
      await this.#reconnecting?.catch(() => undefined);
      this.#channel.close();
      await this.#o.release();
    })();
    return this.#disposing;
  }
}

