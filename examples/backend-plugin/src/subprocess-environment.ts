/**
 * One task's environment: a directory of its own (`work/` where commands
 * start, `state/` for the shell state and the agent's socket, `tmp/` as
 * TMPDIR) and Berth's exec agent running in it as a subprocess, spoken to
 * over its stdin and stdout. Everything else (readiness, a new agent when
 * the old one is lost, exec with retry and notices, files, background
 * processes) is the kit's ChannelEnvironment: this class supplies only how
 * to make and let go of the link.
 */
import type { ChildProcess } from 'node:child_process';
import { rm } from 'node:fs/promises';
import {
  ChannelEnvironment,
  newAgentReplacement,
  type AgentChannel,
  type ChannelLink,
  type Logger,
  type ReplaceCause,
  type Replacement,
  type RpcRelay,
} from 'berth/backend-kit';

/** The task's directories. */
export interface TaskDirs {
  /** Holds the others; removed on release. */
  readonly root: string;
  readonly work: string;
  readonly state: string;
}

export interface SubprocessEnvironmentSetup {
  readonly description: string;
  readonly dirs: TaskDirs;
  readonly killGraceMs: number;
  readonly logger: Logger | undefined;
  /** Starts an agent in the task's directory. */
  readonly connect: () => Promise<AgentChannel>;
  /** The agent processes started for this task that have not exited yet. */
  readonly children: ReadonlySet<ChildProcess>;
  /** Told once the environment is released. */
  readonly onReleased: () => void;
}

/** How long a released agent has to exit after its goodbye before it is killed. */
const AGENT_EXIT_MS = 5000;

export class SubprocessEnvironment extends ChannelEnvironment<ChannelLink<AgentChannel>> {
  readonly description: string;
  readonly homeDir: string;
  readonly initialCwd: string;
  readonly stateDir: string;
  /** execute_code's socket, under the task's state directory, relayed by the agent. */
  readonly rpcRelay: RpcRelay;
  readonly #setup: SubprocessEnvironmentSetup;

  constructor(setup: SubprocessEnvironmentSetup, channel: AgentChannel) {
    super({ channel }, setup);
    this.#setup = setup;
    this.description = setup.description;
    this.homeDir = setup.dirs.work;
    this.initialCwd = setup.dirs.work;
    this.stateDir = setup.dirs.state;
    this.rpcRelay = this.relayIn(setup.dirs.state);
  }

  /** The current agent's channel (the conformance suite drops its stream, as a broken connection would). */
  get agentChannel(): AgentChannel {
    return this.link.channel;
  }

  /** The agent went away for good: a new one in the same directory; files stay, what the old one ran is not tracked. */
  protected async replaceLink(_lost: ChannelLink<AgentChannel>, cause: ReplaceCause): Promise<Replacement<ChannelLink<AgentChannel>>> {
    this.assertLive();
    return newAgentReplacement(this.description, await this.#setup.connect(), cause);
  }

  protected async discardLink(link: ChannelLink<AgentChannel>): Promise<void> {
    link.channel.close();
  }

  /** Says goodbye to the agent (it ends everything it started), waits for it to exit, removes the task's directory. */
  protected async releaseLink(link: ChannelLink<AgentChannel>): Promise<void> {
    link.channel.close();
    await Promise.all([...this.#setup.children].map((child) => exited(child)));
    await rm(this.#setup.dirs.root, { recursive: true, force: true });
    this.#setup.onReleased();
  }
}

/** Resolves once `child` exited; SIGKILL after {@link AGENT_EXIT_MS}. */
function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), AGENT_EXIT_MS);
    child.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}
