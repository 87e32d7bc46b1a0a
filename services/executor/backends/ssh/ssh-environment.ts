/**
 * One task's directory on an ssh host, and how its commands, files and
 * execute_code socket reach it: through the task's exec agent (one channel
 * of the tenant's connection), or a channel per command and SFTP on a host
 * that cannot run the agent. See ssh-backend.ts for the whole picture.
 */
import { posix } from 'node:path';
import type { Logger } from '../../../common/logging.js';
import type {
  BackendEnvironment,
  BackgroundHandle,
  BackgroundOptions,
  ExecOptions,
  ExecResult,
  FileStat,
  RpcRelay,
} from '../../backend.js';
import type { AgentChannel } from '../shared/agent/agent-channel.js';
import { awaitForeground } from '../shared/channel-commands.js';
import { interruptedBeforeStart } from '../shared/exec-deadline.js';
import { assertAbsolute, assertNotReleased } from '../shared/guards.js';
import { LiveLink, type ChannelLink } from '../shared/live-link.js';
import { SandboxLostError } from '../shared/sandbox-channel.js';
import { BackgroundProcesses, runShort, type ShortResult } from './ssh-background.js';
import { execOnChannel, killAfterDrop, lostWhileRunning, type ChannelExecHost } from './ssh-channel-exec.js';
import type { SshConnection } from './ssh-connection.js';
import { sftpReadFile, sftpStat, sftpWriteFile } from './ssh-files.js';
import { buildRemoveCommand } from './ssh-scripts.js';

export interface EnvironmentSetup {
  readonly connection: SshConnection;
  readonly description: string;
  readonly homeDir: string;
  readonly taskDir: string;
  readonly killGraceMs: number;
  readonly pipeDrainMs: number;
  readonly pollIntervalMs: number;
  readonly logger: Logger | undefined;
  /** Where execute_code's run dirs go when the task directory is too long a base for a socket path. */
  readonly rpcBaseDir?: string;
}

/** The task's exec agent: the one started for it, and how to start another when it is lost. */
export interface TaskAgent {
  readonly channel: AgentChannel;
  readonly startAnother: () => Promise<AgentChannel>;
}

/** One task's directory on the ssh host. */
export class SshEnvironment implements BackendEnvironment {
  readonly description: string;
  readonly homeDir: string;
  readonly initialCwd: string;
  readonly stateDir: string;
  /** execute_code's socket inside the task directory, relayed by the agent; absent without one. */
  readonly rpcRelay?: RpcRelay;
  onDisposed: (() => void) | undefined;

  readonly #setup: EnvironmentSetup;
  readonly #connection: SshConnection;
  readonly #background: BackgroundProcesses;
  readonly #channelHost: ChannelExecHost;
  /** Kill functions of foreground commands still running. */
  readonly #running = new Set<() => Promise<void>>();
  /** The exec agent, started anew when lost; absent: the host cannot run it, commands use a channel each. */
  readonly #agent: LiveLink<ChannelLink<AgentChannel>> | undefined;
  #disposing: Promise<void> | undefined;

  constructor(setup: EnvironmentSetup, agent?: TaskAgent) {
    this.#setup = setup;
    this.#connection = setup.connection;
    this.description = setup.description;
    this.homeDir = setup.homeDir;
    this.initialCwd = posix.join(setup.taskDir, 'work');
    this.stateDir = posix.join(setup.taskDir, 'state');
    if (agent) {
      this.#agent = new LiveLink(this, { channel: agent.channel }, {
        replace: async () => {
          setup.logger?.info('the exec agent stream was lost; starting a new one');
          return { link: { channel: await agent.startAnother() }, notices: [], recreated: false };
        },
        discard: async (next) => next.channel.close(),
      });
      this.rpcRelay = this.#agent.relay(setup.rpcBaseDir ?? setup.taskDir, () => assertNotReleased(this, this.#disposing));
    }
    this.#channelHost = {
      connection: setup.connection,
      cwd: this.initialCwd,
      killGraceMs: setup.killGraceMs,
      pipeDrainMs: setup.pipeDrainMs,
      logger: setup.logger,
      running: this.#running,
    };
    this.#background = new BackgroundProcesses(
      {
        connection: setup.connection,
        logger: setup.logger,
        killGraceMs: setup.killGraceMs,
        pollIntervalMs: setup.pollIntervalMs,
        run: (command, options) => this.#runShort(command, options),
      },
      posix.join(setup.taskDir, 'bg'),
    );
  }

  /** True when commands go through the exec agent (false: a channel per command, the host has no usable python3). */
  get usesAgent(): boolean {
    return this.#agent !== undefined;
  }

  /** The agent's channel now (tests). */
  get agentChannel(): AgentChannel | undefined {
    return this.#agent?.link.channel;
  }

  #where(): string {
    const e = this.#connection.endpoint;
    return `${e.host}:${e.port}`;
  }

  async exec(options: ExecOptions): Promise<ExecResult> {
    assertNotReleased(this, this.#disposing);
    if (!this.#agent) return interruptedBeforeStart(options) ?? execOnChannel(this.#channelHost, options);
    // Starting a new agent (the last one was lost) takes a round trip or more: an interrupt meanwhile ends the call.
    const start = await this.#agent.startCommand(options, this.initialCwd, this.#setup.logger);
    if ('ended' in start) return start.ended;
    const outcome = await awaitForeground(start.proc, options, this.#setup.killGraceMs, this.#running);
    if (outcome.exit) return outcome.result;
    // The agent ends what it started when its stream ends; in case the host never noticed, kill the group too.
    void killAfterDrop(this.#channelHost, start.proc.pid);
    this.#setup.logger?.warn({ err: outcome.lost.message }, 'the exec agent stream was lost while a command ran');
    throw lostWhileRunning(this.#connection);
  }

  /** A helper command (background start, stdin, kill, cleanup): through the agent when there is one. */
  async #runShort(
    command: string,
    options: { readonly stdin?: Uint8Array | string; readonly control?: boolean; readonly timeoutMs?: number } = {},
  ): Promise<ShortResult> {
    const agent = this.#agent;
    // Without an agent, or when none can be started again (or while releasing, when it is gone): a channel.
    if (!agent || !(await agent.ready().catch(() => undefined))) return runShort(this.#connection, command, options);
    const chunks: Buffer[] = [];
    const proc = await agent.withLink(({ channel }) =>
      channel.spawn({
        script: command,
        cwd: this.initialCwd,
        ...(options.stdin !== undefined ? { stdin: options.stdin } : {}),
        onOutput: (chunk) => chunks.push(chunk),
      }),
    );
    const timer = setTimeout(() => void proc.kill(1000).catch(() => undefined), options.timeoutMs ?? 30_000);
    try {
      const exit = await proc.exited;
      return {
        exitCode: exit.code,
        ...(exit.signal !== null ? { signal: String(exit.signal) } : {}),
        output: Buffer.concat(chunks).toString('utf8'),
      };
    } catch (err) {
      throw err instanceof SandboxLostError ? lostWhileRunning(this.#connection) : err;
    } finally {
      clearTimeout(timer);
    }
  }

  async startBackground(options: BackgroundOptions): Promise<BackgroundHandle> {
    assertNotReleased(this, this.#disposing);
    return this.#background.start(options, this.initialCwd);
  }

  async readFile(absPath: string): Promise<Buffer> {
    assertAbsolute(absPath);
    if (this.#agent) return this.#agent.withLink(({ channel }) => channel.readFile(absPath));
    return sftpReadFile(await this.#connection.sftp(), absPath, this.#where());
  }

  async writeFile(absPath: string, data: Uint8Array): Promise<void> {
    assertAbsolute(absPath);
    if (this.#agent) return this.#agent.withLink(({ channel }) => channel.writeFile(absPath, data));
    await sftpWriteFile(await this.#connection.sftp(), absPath, data, this.#where());
  }

  async stat(absPath: string): Promise<FileStat> {
    assertAbsolute(absPath);
    if (this.#agent) {
      const s = await this.#agent.withLink(({ channel }) => channel.stat(absPath));
      return { exists: s.exists, isDirectory: s.isDirectory, sizeBytes: s.sizeBytes };
    }
    return sftpStat(await this.#connection.sftp(), absPath, this.#where());
  }

  dispose(): Promise<void> {
    this.#disposing ??= (async () => {
      this.#agent?.release();
      await Promise.all([...this.#running].map((kill) => kill().catch(() => undefined)));
      await this.#background.killAll();
      this.#background.stop();
      try {
        for (const dir of [this.#setup.taskDir, ...(this.#setup.rpcBaseDir ? [this.#setup.rpcBaseDir] : [])]) {
          const removed = await this.#runShortForRelease(buildRemoveCommand(dir));
          if (removed.exitCode !== 0) this.#setup.logger?.warn({ output: removed.output, dir }, 'removing a task directory failed');
        }
      } catch (err) {
        this.#setup.logger?.warn({ err, dir: this.#setup.taskDir }, 'cannot remove the task directory (host unreachable?)');
      }
      (await this.#agent?.settled())?.channel.close();
      this.onDisposed?.();
    })();
    return this.#disposing;
  }

  /** The agent if it is up (no new one is started while releasing), else a channel. */
  #runShortForRelease(command: string): Promise<ShortResult> {
    if (this.#agent && !this.#agent.link.channel.isLost) return this.#runShort(command, { timeoutMs: 30_000 });
    return runShort(this.#connection, command, { timeoutMs: 30_000 });
  }
}

