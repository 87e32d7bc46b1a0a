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
 *
 * A tenant's snapshot is a Daytona snapshot of the sandbox's filesystem
 * (daytona-snapshots.ts); the sandbox runs on meanwhile.
 *
 * Suspension (docs/suspend.md) stops the sandbox through Daytona (no CPU or
 * memory held; Daytona keeps its filesystem, so the runner's state under
 * {@link SANDBOX_STATE_DIR} stays too) and resuming starts it again and
 * opens a new channel; background processes end with the stop.
 */
import { FailedPreconditionError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type { RpcRelay } from '../../backend.js';
import {
  ChannelEnvironment,
  type RelayingChannel,
  type ReplaceCause,
  type Replacement,
} from '../shared/channel-environment.js';
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
export type PingableChannel = RelayingChannel & {
  ping(): Promise<void>;
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
  /** Stops the sandbox, keeping it (a suspension). */
  readonly stop: () => Promise<void>;
  /** Makes a Daytona snapshot called `name` of the sandbox's filesystem (a tenant's snapshot). */
  readonly snapshot: (name: string) => Promise<void>;
  readonly killGraceMs: number;
  /** {@link KEEPALIVE_MS} unless set. */
  readonly keepaliveMs?: number;
  readonly logger: Logger | undefined;
}

export class DaytonaEnvironment extends ChannelEnvironment<Connection> {
  readonly description: string;
  readonly homeDir: string;
  readonly initialCwd: string;
  readonly stateDir = SANDBOX_STATE_DIR;
  /**
   * execute_code runs in the sandbox itself: the agent makes the run dir and
   * rpc.sock there and relays each connection over its PTY stream, so the
   * script's open() sees the files its terminal() calls wrote.
   */
  readonly rpcRelay: RpcRelay = this.relayIn(SANDBOX_CODE_DIR);
  readonly #o: DaytonaEnvironmentOptions;
  readonly #keepalive: NodeJS.Timeout;

  constructor(connection: Connection, options: DaytonaEnvironmentOptions) {
    super(connection, options);
    this.#o = options;
    this.description = options.description;
    this.homeDir = connection.dirs.home || '/';
    this.initialCwd = connection.dirs.cwd || this.homeDir;
    this.#keepalive = setInterval(() => {
      const channel = this.link.channel;
      if (!channel.isLost) channel.ping().catch(() => undefined);
    }, options.keepaliveMs ?? KEEPALIVE_MS);
    this.#keepalive.unref();
  }

  /** Empties the state and code directories (a stopped-and-started sandbox still holds the last task's). */
  async init(): Promise<void> {
    const dirs = `${SANDBOX_STATE_DIR} ${SANDBOX_CODE_DIR}`;
    const proc = await this.link.channel.spawn({
      script: `rm -rf ${dirs} && mkdir -m 700 ${dirs}`,
      cwd: '/',
      onOutput: () => undefined,
    });
    const exit = await proc.exited;
    if (exit.code !== 0) throw new FailedPreconditionError(`cannot create ${dirs} in ${this.description}`);
  }

  /** Snapshots the sandbox's files as the Daytona snapshot `name` (the sandbox goes on running). */
  async snapshotFiles(name: string): Promise<void> {
    this.assertLive();
    await this.#o.snapshot(name);
  }

  /** The current exec agent's channel (tests drop its stream). */
  get agentChannel(): PingableChannel {
    return this.link.channel;
  }

  /**
   * A new exec agent (starting the sandbox again if it stopped). Only a new
   * sandbox in place of a deleted one counts as recreated: the backend's
   * notice then says so.
   */
  protected async replaceLink(lost: Connection, cause: ReplaceCause): Promise<Replacement<Connection>> {
    this.#o.logger?.warn({ sandbox: this.description }, 'lost the exec agent of a Daytona sandbox; opening a new one');
    lost.channel.close();
    this.assertLive();
    const next = await this.#o.reconnect();
    if (next.notice) return { link: next, recreated: true, notices: [next.notice] };
    const during = cause.kind === 'lost' && cause.duringCommand ? ' while the command ran' : '';
    return {
      link: next,
      recreated: false,
      notices: [
        `The task's Daytona sandbox lost its exec agent${during}; a new one was started: ` +
          'background processes were stopped; files were kept.',
      ],
    };
  }

  /** A new sandbox still holds the last task's directories. */
  protected override async adopted(replacement: Replacement<Connection>): Promise<void> {
    if (replacement.recreated) await this.init();
  }

  /** Stops the sandbox (Daytona keeps its files); its background processes end. */
  async suspend(): Promise<{ readonly processesKept: boolean }> {
    await this.suspendLink(async (connection) => {
      connection.channel.close();
      await this.#o.stop();
    });
    return { processesKept: false };
  }

  /**
   * Starts the sandbox again and opens a new channel. A sandbox deleted
   * meanwhile (outside Berth) comes back as a new one, with the backend's
   * notice that its files are gone and its directories made anew.
   */
  async resume(): Promise<void> {
    let recreated = false;
    await this.resumeLink(async () => {
      const next = await this.#o.reconnect();
      if (next.notice) {
        recreated = true;
        this.addNotice(next.notice);
      }
      return next;
    });
    if (recreated) await this.init();
  }

  protected async discardLink(next: Connection): Promise<void> {
    next.channel.close();
  }

  protected async releaseLink(connection: Connection): Promise<void> {
    connection.channel.close();
    await this.#o.release();
  }

  override dispose(): Promise<void> {
    clearInterval(this.#keepalive);
    return super.dispose();
  }
}
