/**
 * Which uid a task pod runs as when `kubernetes.run_as_user` is unset: one
 * of `kubernetes.task_uids` of its own (shared/task-uid-range.ts says why),
 * so that the kernel's per-user limits on a node (inotify instances and
 * watches, RLIMIT_NPROC, keyrings) are never shared by two tasks.
 *
 * The record is the cluster's own: the `berth.dev/uid` label of the pod
 * and, in persistent mode, of the task's claims, whose files are that
 * uid's. A replaced pod takes the uid its claims record; a task without a
 * record takes the first of its candidate uids (a hash of its keyed task
 * label, so the same on every executor) that no pod or claim of the
 * namespace (any executor's) is labelled with, except the task's own. The
 * in-process reservation covers the moments between the check and the
 * create; after that the created object's label holds the uid. Two
 * executors creating pods whose first candidates coincide at the same
 * instant is the one race left: with the default range, one chance in 2^24
 * per pair of new pods.
 *
 * With `kubernetes.user_namespace` each pod's ids map to a range of the
 * node's own: the ids inside must then fit that mapping (65536 ids).
 */
import { FailedPreconditionError, ResourceExhaustedError } from '../../../common/errors.js';
import {
  DEFAULT_TASK_UIDS,
  REMAPPED_MAX_UID,
  REMAPPED_TASK_UIDS,
  candidateUid,
  parseRecordedUid,
  parseTaskUidRange,
  rangeSize,
  type UidRange,
} from '../shared/task-uid-range.js';
import type { KubeApi } from './kube-api.js';
import { LABEL, type PodIdentity } from './pod-spec.js';

/** Setting that names the range, for errors. */
export const POD_UIDS_SETTING = 'kubernetes.task_uids';

/** Candidates tried before giving up (each costs two list calls). */
const MAX_ATTEMPTS = 64;

export interface PodUidsOptions {
  readonly api: Pick<KubeApi, 'listPods' | 'listClaims'>;
  /** `kubernetes.task_uids`; empty or absent: the default. */
  readonly configured?: string;
  /** `kubernetes.user_namespace`. */
  readonly userNamespace?: boolean;
}

/** The range of `kubernetes.task_uids` in force; throws when it cannot be used (checked at start). */
export function podUidRange(configured: string | undefined, userNamespace: boolean): UidRange {
  if (!configured) return parseTaskUidRange(userNamespace ? REMAPPED_TASK_UIDS : DEFAULT_TASK_UIDS, POD_UIDS_SETTING);
  const range = parseTaskUidRange(configured, POD_UIDS_SETTING);
  if (userNamespace && range.last > REMAPPED_MAX_UID) {
    throw new FailedPreconditionError(
      `${POD_UIDS_SETTING} (${range.first}-${range.last}) does not fit kubernetes.user_namespace: a pod's user namespace maps ` +
        `65536 ids: choose ids up to ${REMAPPED_MAX_UID}, e.g. ${REMAPPED_TASK_UIDS}, or leave it unset`,
    );
  }
  return range;
}

export class PodUids {
  readonly #o: PodUidsOptions;
  readonly range: UidRange;
  /** Uids being given to pods this executor is creating. */
  readonly #reserved = new Set<number>();

  constructor(options: PodUidsOptions) {
    this.#o = options;
    this.range = podUidRange(options.configured, options.userNamespace ?? false);
  }

  /**
   * Runs `create` with the uid (and gid) of a new pod: `recorded` (a label's
   * value) when it is one of the range, else the first free candidate for
   * `seed`. `task`: the task's label value, whose own pods and claims may
   * hold the uid (a pod replacing its predecessor). Reserved until `create`
   * settles; the created object's label is the record after that.
   */
  async with<T>(seed: string, task: string | undefined, recorded: string | undefined, create: (identity: PodIdentity) => Promise<T>): Promise<T> {
    const uid = await this.#acquire(seed, task, recorded);
    try {
      return await create({ uid, gid: uid, own: true });
    } finally {
      this.#reserved.delete(uid);
    }
  }

  async #acquire(seed: string, task: string | undefined, recorded: string | undefined): Promise<number> {
    const kept = parseRecordedUid(recorded, this.range);
    if (kept !== undefined && !this.#reserved.has(kept)) {
      this.#reserved.add(kept);
      return kept;
    }
    const attempts = Math.min(MAX_ATTEMPTS, rangeSize(this.range));
    for (let attempt = 0; attempt < attempts; attempt++) {
      const uid = candidateUid(this.range, seed, attempt);
      if (this.#reserved.has(uid)) continue;
      this.#reserved.add(uid);
      let held: boolean;
      try {
        held = await this.#heldElsewhere(uid, task);
      } catch (err) {
        this.#reserved.delete(uid);
        throw err;
      }
      if (!held) return uid;
      this.#reserved.delete(uid);
    }
    throw new ResourceExhaustedError(
      `no free uid for a new pod in ${POD_UIDS_SETTING} (${this.range.first}-${this.range.last}) after ${attempts} tries: ` +
        'widen the range, or delete claims of tasks that are gone',
    );
  }

  /** Whether a pod or claim of the namespace that is not `task`'s carries the uid. */
  async #heldElsewhere(uid: number, task: string | undefined): Promise<boolean> {
    const selector = `${LABEL.uid}=${uid}`;
    const others = (labels: Record<string, string> | undefined) => task === undefined || labels?.[LABEL.task] !== task;
    const pods = await this.#o.api.listPods(selector);
    if (pods.some((p) => others(p.metadata?.labels))) return true;
    const claims = await this.#o.api.listClaims(selector);
    return claims.some((c) => others(c.metadata?.labels));
  }
}
