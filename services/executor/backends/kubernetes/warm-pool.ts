/**
 * The kubernetes backend's warm pool (`kubernetes.warm_pool`): pods started
 * before their task is known, labelled `berth.dev/pool=warm`. A new task
 * claims one by relabelling it (a JSON patch that first tests the pod's
 * resourceVersion, so two executors never claim the same pod) with its
 * tenant, task and policy labels; the pool is then refilled. Nothing of the
 * task is in the pod spec: what is bound late (the task's environment,
 * its directories) goes over the agent channel, so a claim never restarts
 * the pod. A warm pod gets a uid of its own when it is made (pod-uids.ts,
 * seeded by its name); the task that claims it runs as that uid. Not with persistent claims: a running pod cannot mount them.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { Logger } from '../../../common/logging.js';
import type { KubeApi } from './kube-api.js';
import { isConflict } from './kube-errors.js';
import { LABEL, buildPod, executorLabels, selectorOf, warmPodName, type PodIdentity, type PodSettings } from './pod-spec.js';
import { waitForRunning } from './pod-start.js';

export interface WarmPoolOptions {
  readonly api: KubeApi;
  readonly settings: PodSettings;
  readonly size: number;
  /** The policy label of a pod nobody claimed yet (the most restrictive one). */
  readonly policy: string;
  readonly pendingTimeoutMs: number;
  /** Runs `create` with the ids of the new pod `name` (its own uid, which the task that claims it keeps, or the fixed one). */
  readonly withIdentity: (name: string, create: (identity: PodIdentity) => Promise<unknown>) => Promise<unknown>;
  readonly logger?: Logger;
}

export class WarmPool {
  readonly #o: WarmPoolOptions;
  #starting = 0;
  #closed = false;
  /** Set after a failed start: no refill until a claim succeeds again, so a broken image does not loop. */
  #failing = false;
  readonly #inFlight = new Set<Promise<void>>();

  constructor(options: WarmPoolOptions) {
    this.#o = options;
  }

  get #selector(): string {
    return selectorOf({ ...executorLabels(this.#o.settings), [LABEL.pool]: 'warm' });
  }

  /** The pool's running, unclaimed pods. */
  async #ready(): Promise<V1Pod[]> {
    const pods = await this.#o.api.listPods(this.#selector);
    return pods.filter((p) => !p.metadata?.deletionTimestamp && p.status?.phase === 'Running');
  }

  /** Starts pods until the pool holds its size (those of an earlier executor with this id count). */
  async fill(): Promise<void> {
    if (this.#closed || this.#failing) return;
    const existing = (await this.#o.api.listPods(this.#selector)).filter((p) => !p.metadata?.deletionTimestamp).length;
    for (let i = existing + this.#starting; i < this.#o.size; i++) this.#startOne();
  }

  #startOne(): void {
    this.#starting++;
    const name = warmPodName();
    const run = (async () => {
      try {
        try {
          await this.#o.withIdentity(name, (identity) => this.#o.api.createPod(buildPod(this.#o.settings, name, { kind: 'warm', policy: this.#o.policy }, identity)));
        } finally {
          // Once created it is counted by the list (until a task claims it, even before it runs).
          this.#starting--;
        }
        await waitForRunning(this.#o.api, name, this.#o.settings.image, this.#o.pendingTimeoutMs);
        if (this.#closed) await this.#o.api.deletePod(name);
      } catch (err) {
        this.#failing = true;
        this.#o.logger?.warn({ err: (err as Error).message, pod: name }, 'a warm-pool pod did not start; the pool is not refilled until a task starts a pod');
        await this.#o.api.deletePod(name).catch(() => undefined);
      }
    })();
    this.#inFlight.add(run);
    void run.finally(() => this.#inFlight.delete(run));
  }

  /**
   * Claims a ready pod for a task: its labels become `labels` (the pool
   * label goes). Undefined when none is ready. Refills in the background.
   */
  async take(labels: Readonly<Record<string, string>>): Promise<string | undefined> {
    if (this.#closed) return undefined;
    const candidates = await this.#ready();
    for (const pod of candidates) {
      const name = pod.metadata!.name!;
      const next: Record<string, string> = { ...(pod.metadata?.labels ?? {}), ...labels };
      delete next[LABEL.pool];
      try {
        await this.#o.api.patchPod(name, [
          { op: 'test', path: '/metadata/resourceVersion', value: pod.metadata?.resourceVersion },
          { op: 'replace', path: '/metadata/labels', value: next },
        ]);
      } catch (err) {
        const cause = (err as { cause?: unknown }).cause;
        // Another claim (or a deletion) changed it first: the next one.
        if (isConflict(cause) || isConflict(err)) continue;
        throw err;
      }
      this.#failing = false;
      void this.fill().catch((err: unknown) => this.#o.logger?.warn({ err: (err as Error).message }, 'refilling the warm pool failed'));
      return name;
    }
    void this.fill().catch(() => undefined);
    return undefined;
  }

  /** Stops refilling and deletes the pool's pods. */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.allSettled([...this.#inFlight]);
    const pods = await this.#o.api.listPods(this.#selector).catch(() => []);
    await Promise.all(pods.map((p) => this.#o.api.deletePod(p.metadata!.name!).catch(() => undefined)));
  }
}
