/**
 * One task's environment on the singularity backend when its image can run
 * the exec agent: one long-lived `apptainer exec instance://NAME python3
 * /berth/agent/berth_agent.py --stdio` per task, and every command, file
 * operation and kill is a message on its stdin/stdout (the same agent and
 * client as the other backends: shared/agent/). A command is `bash -c` in
 * its own session inside the instance; a timeout or interrupt makes the
 * agent SIGTERM, then SIGKILL, its whole process group there.
 *
 * When only the stream to the agent drops (EOF, reset: no protocol fault),
 * the agent keeps its background processes and waits on a private socket;
 * the channel starts a bridge to it and binds them again (stdio-agent.ts), so
 * they are still polled, fed and killed; a foreground command that was
 * running ends (137, with a notice). When the agent itself goes away (a
 * command killed it, or it cannot be found again), the next operation
 * starts a new one and says so in a notice; a command that was running when
 * it went away reports 137.
 *
 * execute_code runs its script here too ({@link rpcRelay}): the agent makes
 * the run dir and `rpc.sock` under the task's state directory inside the
 * instance and relays each connection over its stream to the executor, as
 * on ssh; the script's open() sees what terminal() wrote.
 */
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
import { ChannelOperations, awaitForeground, spawnOptionsOf } from '../shared/channel-commands.js';
import { interruptedBeforeStart } from '../shared/exec-deadline.js';
import { assertNotReleased } from '../shared/guards.js';
import { SandboxLostError, type SandboxProcess } from '../shared/sandbox-channel.js';
import { STATE_DIR, WORKSPACE_DIR } from './singularity-argv.js';

export interface AgentEnvironmentSetup {
  readonly description: string;
  readonly killGraceMs: number;
  readonly logger: Logger | undefined;
  /** Starts a new agent in the instance (after the first was lost). */
  readonly connect: () => Promise<AgentChannel>;
  /** Stops the instance and removes the task's directories. */
  readonly release: () => Promise<void>;
}

export class SingularityAgentEnvironment implements BackendEnvironment {
  /** How commands reach the instance (berth doctor says it). */
  readonly transport = 'agent' as const;
  readonly description: string;
  readonly homeDir = WORKSPACE_DIR;
  readonly initialCwd = WORKSPACE_DIR;
  readonly stateDir = STATE_DIR;
  /** execute_code's socket inside the instance (under the task's private state dir), relayed by the agent. */
  readonly rpcRelay: RpcRelay;

  readonly #setup: AgentEnvironmentSetup;
  readonly #ops = new ChannelOperations({
    withChannel: (fn) => this.#withChannel(fn),
    cwd: () => this.initialCwd,
    killGraceMs: () => this.#setup.killGraceMs,
    logger: () => this.#setup.logger,
  });
  #channel: AgentChannel;
  #reconnecting: Promise<AgentChannel> | undefined;
  readonly #notices: string[] = [];
  #disposing: Promise<void> | undefined;

  constructor(setup: AgentEnvironmentSetup, channel: AgentChannel) {
    this.#setup = setup;
    this.description = setup.description;
    this.#channel = channel;
    this.rpcRelay = {
      sandboxDir: STATE_DIR,
      listen: async (socketPath, onConnection) => {
        assertNotReleased(this, this.#disposing);
        return this.#withChannel((c) => c.listen(socketPath, onConnection));
      },
    };
  }

  /** The current agent's process id inside the instance. */
  get agentPid(): number {
    return this.#channel.hello.pid;
  }

  /** The current agent's channel (tests drop it to act out a lost stream). */
  get agentChannel(): AgentChannel {
    return this.#channel;
  }

  takeNotices(): string[] {
    return this.#notices.splice(0);
  }

  async #ready(): Promise<AgentChannel> {
    assertNotReleased(this, this.#disposing);
    if (this.#reconnecting) return this.#reconnecting;
    return this.#channel.isLost ? this.#reconnect(this.#channel, '') : this.#channel;
  }

  /** Starts a new agent in place of `lost` (once, however many callers noticed). */
  #reconnect(lost: AgentChannel, during: string): Promise<AgentChannel> {
    if (this.#channel !== lost && !this.#reconnecting) return Promise.resolve(this.#channel);
    this.#reconnecting ??= (async () => {
      // A dropped stream whose agent was found again: same agent, nothing to start.
      if (await lost.recover()) return lost;
      this.#setup.logger?.warn({ pid: lost.hello.pid }, 'lost the exec agent of the instance; starting a new one');
      const next = await this.#setup.connect();
      if (this.#disposing) {
        next.close();
        assertNotReleased(this, this.#disposing);
      }
      this.#channel = next;
      this.#notices.push(
        `The exec agent in ${this.description} went away${during}; a new one was started: ` +
          'background processes started before are no longer tracked.',
      );
      return next;
    })().finally(() => {
      this.#reconnecting = undefined;
    });
    return this.#reconnecting;
  }

  /** Runs `fn` on the agent; once more on a new agent if the old one was lost. */
  async #withChannel<T>(fn: (channel: AgentChannel) => Promise<T>): Promise<T> {
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
    const spawn = spawnOptionsOf(options, this.initialCwd, this.#setup.logger, options.stdin !== undefined ? { stdin: options.stdin } : {});
    let channel = await this.#ready();
    let proc: SandboxProcess;
    try {
      proc = await channel.spawn(spawn);
    } catch (err) {
      if (!(err instanceof SandboxLostError) || this.#disposing) throw err;
      channel = await this.#reconnect(channel, '');
      proc = await channel.spawn(spawn);
    }
    const outcome = await awaitForeground(proc, options, this.#setup.killGraceMs);
    if (outcome.exit) return outcome.result;
    // The agent went away under the command: its process group went with it (or is no longer ours to see).
    if (this.#disposing) throw outcome.lost;
    if (await channel.recover()) {
      this.#notices.push(
        `The connection to the exec agent in ${this.description} dropped while the command ran; the command was stopped ` +
          '(background processes were kept).',
      );
      return outcome.deadline.result(137);
    }
    await this.#reconnect(channel, ' while a command ran');
    return outcome.deadline.result(137);
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
      await this.#reconnecting?.catch(() => undefined);
      // Its stdin ends: the agent kills what it started and exits; stopping the instance ends the rest.
      this.#channel.close();
      await this.#setup.release();
    })();
    return this.#disposing;
  }
}

