/**
 * One task's environment on the singularity backend when its image can run
 * the exec agent: one long-lived `apptainer exec instance://NAME python3
 * /berth/agent/berth_agent.pyz --stdio` per task, and every command, file
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
import type { RpcRelay } from '../../backend.js';
import type { AgentChannel } from '../shared/agent/agent-channel.js';
import {
  ChannelEnvironment,
  newAgentReplacement,
  type ChannelLink,
  type ReplaceCause,
  type Replacement,
} from '../shared/channel-environment.js';
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

export class SingularityAgentEnvironment extends ChannelEnvironment<ChannelLink<AgentChannel>> {
  /** How commands reach the instance (berth doctor says it). */
  readonly transport = 'agent' as const;
  readonly description: string;
  readonly homeDir = WORKSPACE_DIR;
  readonly initialCwd = WORKSPACE_DIR;
  readonly stateDir = STATE_DIR;
  /** execute_code's socket inside the instance (under the task's private state dir), relayed by the agent. */
  readonly rpcRelay: RpcRelay = this.relayIn(STATE_DIR);
  readonly #setup: AgentEnvironmentSetup;

  constructor(setup: AgentEnvironmentSetup, channel: AgentChannel) {
    super({ channel }, setup);
    this.#setup = setup;
    this.description = setup.description;
  }

  /** The current agent's process id inside the instance. */
  get agentPid(): number {
    return this.link.channel.hello.pid;
  }

  /** The current agent's channel (tests drop it to act out a lost stream). */
  get agentChannel(): AgentChannel {
    return this.link.channel;
  }

  /** A new agent in the same instance: the instance (and its files) stays, what the old agent ran is not tracked. */
  protected async replaceLink(lost: ChannelLink<AgentChannel>, cause: ReplaceCause): Promise<Replacement<ChannelLink<AgentChannel>>> {
    this.#setup.logger?.warn({ pid: lost.channel.hello.pid }, 'lost the exec agent of the instance; starting a new one');
    this.assertLive();
    return newAgentReplacement(this.description, await this.#setup.connect(), cause);
  }

  protected async discardLink(next: ChannelLink<AgentChannel>): Promise<void> {
    next.channel.close();
  }

  protected async releaseLink(link: ChannelLink<AgentChannel>): Promise<void> {
    // Its stdin ends: the agent kills what it started and exits; stopping the instance ends the rest.
    link.channel.close();
    await this.#setup.release();
  }
}
