/**
 * One task's environment on the kubernetes backend: its pod and the exec
 * agent in it (one long-lived `pods/exec`), on the kit's channel
 * environment. A dropped exec stream is resumed in the same pod; a pod that
 * was evicted, deleted or ended is replaced by a new one, with the usual
 * environment-recreated notice. Release deletes the pod; the task's claims
 * (persistent mode) are kept, except on EndTask, which deletes them too.
 */
import { FailedPreconditionError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type { DisposeReason, RpcRelay, TaskKey } from '../../backend.js';
import type { AgentChannel } from '../shared/agent/agent-channel.js';
import {
  PlacedChannelEnvironment,
  type DroppedStreamWords,
  type ReplaceCause,
  type Replacement,
} from '../shared/channel-environment.js';
import type { PodExecChannel } from './pod-exec-channel.js';

/**
 * Where execute_code's run dirs go inside the pod (one pod per task, so
 * private to the task); emptied when the agent starts in a pod.
 */
export const SANDBOX_CODE_DIR = '/tmp/berth-code';

/** One running pod of a task and the agent in it (or, for an image without python3, the per-command channel). */
export interface LivePod {
  readonly pod: string;
  readonly channel: AgentChannel | PodExecChannel;
  readonly description: string;
  readonly stateDir: string;
  readonly homeDir: string;
  readonly initialCwd: string;
}

/** What happened to a pod that stopped answering, in words for the task. */
export interface PodFate {
  /** e.g. `was evicted (The node was low on resource: memory.)`, `was deleted`. */
  readonly words: string;
  /** The pod object still exists (it is then deleted before a new one starts). */
  readonly exists: boolean;
}

/** What an environment asks of its backend. */
export interface TaskPods {
  readonly persistent: boolean;
  /** What became of `pod` (it is not asked to run anything). */
  podFate(pod: string): Promise<PodFate>;
  /** A new running pod for the task, with its agent. */
  startPod(key: TaskKey, logger: Logger | undefined): Promise<LivePod>;
  /** Keeps what the task's next pod needs, then deletes `live`'s pod. */
  suspendPod(key: TaskKey, live: LivePod): Promise<void>;
  /** A new pod for the suspended task, with what {@link suspendPod} kept and the same state directory. */
  resumePod(key: TaskKey, suspended: LivePod, logger: Logger | undefined): Promise<LivePod>;
  /** Forgets what a suspension kept (the task was released). */
  forgetSuspension(key: TaskKey): Promise<void>;
  /** Deletes the pod (gone already is fine). */
  deletePod(pod: string): Promise<void>;
  /** Resolves once the pod no longer exists (or after a bounded wait). */
  podGone(pod: string): Promise<void>;
  /** Deletes the task's claims (EndTask in persistent mode). */
  deleteClaims(key: TaskKey): Promise<void>;
}

export interface EnvironmentSettings {
  readonly killGraceMs: number;
  readonly logger: Logger | undefined;
  readonly onDisposed: () => void;
}

export class KubernetesEnvironment extends PlacedChannelEnvironment<LivePod> {
  readonly #pods: TaskPods;
  readonly #key: TaskKey;
  readonly #s: EnvironmentSettings;
  #reason: DisposeReason | undefined;
  /**
   * execute_code runs in the pod itself: the agent makes the run dir and
   * rpc.sock there and relays each connection over its stream. Without the
   * agent (no python3 in the image) there is neither the relay nor a Python
   * to run the script: a clear refusal.
   */
  readonly rpcRelay: RpcRelay = {
    sandboxDir: SANDBOX_CODE_DIR,
    listen: async (socketPath, onConnection) => {
      this.assertLive();
      return this.withChannel((channel) => {
        if (channel.kind !== 'agent') {
          throw new FailedPreconditionError(
            `execute_code needs python3 in the task's pod, and ${this.description} has none (its commands run one pods/exec each): ` +
              'use an image with python3 3.8 or newer for terminal.kubernetes_image, e.g. berth-sandbox',
          );
        }
        return channel.listen(socketPath, onConnection);
      });
    },
  };

  constructor(pods: TaskPods, key: TaskKey, live: LivePod, settings: EnvironmentSettings) {
    super(live, settings);
    this.#pods = pods;
    this.#key = key;
    this.#s = settings;
  }

  /** The current pod's name (tests and `berth doctor` look at it). */
  get podName(): string {
    return this.link.pod;
  }
  /** The current pod's exec agent (tests drop its stream); throws in per-command mode. */
  get agentChannel(): AgentChannel {
    const channel = this.link.channel;
    if (channel.kind !== 'agent') throw new Error(`${this.description} runs without the exec agent (per-command exec)`);
    return channel;
  }
  /** The current pod's per-command channel (tests drop its streams); throws when the agent runs. */
  get podExecChannel(): PodExecChannel {
    const channel = this.link.channel;
    if (channel.kind !== 'pod-exec') throw new Error(`${this.description} runs the exec agent`);
    return channel;
  }
  /** How commands reach the pod: `agent` (one exec stream) or `pod-exec` (one exec per command). */
  get transport(): 'agent' | 'pod-exec' {
    return this.link.channel.kind;
  }

  protected override droppedStreamWords(live: LivePod): DroppedStreamWords {
    if (live.channel.kind === 'pod-exec') return { agent: `the command's exec in ${live.description}`, kept: 'the pod was kept' };
    return { agent: `the exec agent in ${live.description}`, kept: 'the pod and its background processes were kept' };
  }

  /** A new pod for the task, after the old one was evicted, deleted or ended. */
  protected async replaceLink(old: LivePod, cause: ReplaceCause): Promise<Replacement<LivePod>> {
    const logger = this.#s.logger;
    old.channel.close();
    const fate = await this.#pods.podFate(old.pod).catch((err: unknown) => ({ words: `could not be reached (${(err as Error).message})`, exists: true }));
    if (fate.exists) await this.#pods.deletePod(old.pod).catch((err: unknown) => logger?.warn({ err, pod: old.pod }, 'deleting the old pod failed'));
    this.assertLive();
    const next = await this.#pods.startPod(this.#key, logger);
    const during = cause.kind === 'lost' && cause.duringCommand ? ' while the command ran' : '';
    const lost = this.#pods.persistent
      ? 'files outside /workspace and the home directory are gone'
      : 'files written in the old pod are gone';
    const notice = `The task's pod ${old.pod} ${fate.words}${during}; a new pod ${next.pod} was started: background processes were stopped and ${lost}.`;
    logger?.warn({ old: old.pod, pod: next.pod, fate: fate.words }, 'task pod replaced');
    return { link: next, recreated: true, notices: [notice] };
  }

  /**
   * Suspends: the task's files and shell state are kept under the
   * executor's state root and its pod is deleted (no CPU or memory held in
   * the cluster). Background processes end.
   */
  async suspend(): Promise<{ readonly processesKept: boolean }> {
    await this.suspendLink(async (live) => {
      live.channel.close();
      await this.#pods.suspendPod(this.#key, live);
    });
    return { processesKept: false };
  }

  /** A new pod with the kept files, the runner's state where it was. */
  async resume(): Promise<void> {
    await this.resumeLink((suspended) => this.#pods.resumePod(this.#key, suspended, this.#s.logger));
  }

  protected async discardLink(next: LivePod): Promise<void> {
    next.channel.close();
    await this.#pods.deletePod(next.pod).catch(() => undefined);
  }

  /** Release with the executor's reason: EndTask deletes the task's claims too. */
  override dispose(reason?: DisposeReason): Promise<void> {
    this.#reason ??= reason;
    return super.dispose();
  }

  protected async releaseLink(live: LivePod): Promise<void> {
    const logger = this.#s.logger;
    live.channel.close();
    try {
      await this.#pods.forgetSuspension(this.#key);
      await this.#pods.deletePod(live.pod);
      if (this.#reason === 'end_task' && this.#pods.persistent) {
        // A claim a pod still uses stays Terminating until the pod is gone: wait for it, so EndTask returns with both gone.
        await this.#pods.podGone(live.pod);
        await this.#pods.deleteClaims(this.#key);
      }
    } catch (err) {
      logger?.warn({ err: (err as Error).message, pod: live.pod }, 'releasing the task pod failed');
    } finally {
      this.#s.onDisposed();
    }
  }
}
