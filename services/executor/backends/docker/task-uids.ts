/**
 * Which uid a task's commands run as (task-identity.ts says why each task
 * has its own). The record is Docker's own: the `berth.uid` label of the
 * task's container and of its persistent volumes. So a replaced container
 * and an executor started anew (or another executor on the same engine)
 * find a task's uid on its workspace volume, and the files there stay the
 * task's own.
 *
 * A task without a record takes the first of its candidate uids (a hash of
 * its container name, so the same on every executor) that no container or
 * volume of the engine is labelled with and that no task of this executor
 * is being given; the in-process reservation covers the moments between
 * the check and the create. Two executors creating tasks whose first
 * candidates coincide at the same instant is the one race left: with the
 * default range, one chance in 2^24 per pair of new tasks.
 *
 * The range itself is settled once the daemon has answered: where it maps
 * containers' ids into a range of its own (rootless, userns-remap), an
 * unset `docker.task_uids` means {@link REMAPPED_TASK_UIDS}, and a set one
 * must fit the mapping; elsewhere the ids are the host's own, and a range
 * that meets an account, group, subordinate range or the executor's uid of
 * the host is refused.
 */
import { readFile } from 'node:fs/promises';
import type Dockerode from 'dockerode';
import { FailedPreconditionError, ResourceExhaustedError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { stageSpan } from '../../../common/tracing/stage-spans.js';
import { LABEL } from './container-spec.js';
import { dockerError } from './docker-errors.js';
import {
  DEFAULT_TASK_UIDS,
  REMAPPED_MAX_UID,
  REMAPPED_TASK_UIDS,
  TASK_UIDS_SETTING,
  candidateUid,
  daemonRemapsIds,
  hostIdConflicts,
  parseRecordedUid,
  parseUidRange,
  rangeSize,
  type HostIdFiles,
  type TaskIdentity,
  type UidRange,
} from './task-identity.js';

/** Candidates tried before giving up (each costs two list calls). */
const MAX_ATTEMPTS = 64;

/** What a task already holds: its container's name, and its volumes' names when persistent. */
export interface UidOwner {
  readonly containerName: string;
  readonly volumeNames?: readonly string[];
}

/** The host's files that name ids, as the executor sees them (a missing file names none). */
export async function readHostIdFiles(): Promise<HostIdFiles> {
  const read = (file: string) => readFile(file, 'utf8').catch(() => undefined);
  const [passwd, group, subuid, subgid] = await Promise.all(['/etc/passwd', '/etc/group', '/etc/subuid', '/etc/subgid'].map(read));
  return {
    ...(passwd !== undefined ? { passwd } : {}),
    ...(group !== undefined ? { group } : {}),
    ...(subuid !== undefined ? { subuid } : {}),
    ...(subgid !== undefined ? { subgid } : {}),
  };
}

export interface TaskUidsOptions {
  readonly docker: Dockerode;
  readonly daemon: string;
  /** `docker.task_uids`; empty or absent: the default for the daemon. */
  readonly configured?: string;
  readonly logger: Logger;
  /** The host's id files (tests pass their own). */
  readonly hostIdFiles?: () => Promise<HostIdFiles>;
}

export class TaskUids {
  readonly #o: TaskUidsOptions;
  /** Checked now, so a malformed setting stops the executor before anything else. */
  readonly #configured: UidRange | undefined;
  #range: Promise<UidRange> | undefined;
  /** Uids of this executor's live tasks and of allocations in progress. */
  readonly #reserved = new Set<number>();

  constructor(options: TaskUidsOptions) {
    this.#o = options;
    this.#configured = options.configured ? parseUidRange(options.configured) : undefined;
  }

  /**
   * The range in force, settled with the daemon's answer once (asked again
   * after a failure); rejects when the range cannot be used on this host.
   */
  range(): Promise<UidRange> {
    this.#range ??= this.#settle().catch((err: unknown) => {
      this.#range = undefined;
      throw err;
    });
    return this.#range;
  }

  async #settle(): Promise<UidRange> {
    const { docker, daemon, logger } = this.#o;
    let securityOptions: string[] | undefined;
    try {
      securityOptions = ((await docker.info()) as { SecurityOptions?: string[] }).SecurityOptions;
    } catch (err) {
      throw dockerError(err, 'asking how the daemon maps container ids', daemon);
    }
    const describe = (r: UidRange) => `${TASK_UIDS_SETTING} (${r.first}-${r.last})`;
    if (daemonRemapsIds(securityOptions)) {
      const range = this.#configured ?? parseUidRange(REMAPPED_TASK_UIDS);
      if (range.last > REMAPPED_MAX_UID) {
        throw new FailedPreconditionError(
          `${describe(range)} does not fit ${daemon}, which maps containers' ids into a range of its own (rootless or ` +
            `userns-remap; usually 65536 ids): choose ids up to ${REMAPPED_MAX_UID}, e.g. ${REMAPPED_TASK_UIDS}, or leave it unset`,
        );
      }
      if (!this.#configured) logger.info({ range: REMAPPED_TASK_UIDS }, `${daemon} remaps container ids: tasks get uids from ${REMAPPED_TASK_UIDS}`);
      return range;
    }
    const range = this.#configured ?? parseUidRange(DEFAULT_TASK_UIDS);
    const conflicts = hostIdConflicts(range, await (this.#o.hostIdFiles ?? readHostIdFiles)(), process.getuid?.());
    if (conflicts.length > 0) {
      throw new FailedPreconditionError(
        `${describe(range)} holds ids this host uses: ${conflicts.join('; ')}. ` +
          'Choose a range no account, group or subordinate range of the host touches',
      );
    }
    return range;
  }

  /**
   * The task's identity: `recorded` (a label's value) when it is a uid of
   * the range that no other live task of this executor holds, else a free
   * candidate. Reserved until {@link release}.
   */
  async acquire(owner: UidOwner, recorded?: string): Promise<TaskIdentity> {
    const range = await this.range();
    const kept = parseRecordedUid(recorded, range);
    if (kept !== undefined && !this.#reserved.has(kept)) {
      this.#reserved.add(kept);
      return { uid: kept, gid: kept };
    }
    const attempts = Math.min(MAX_ATTEMPTS, rangeSize(range));
    for (let attempt = 0; attempt < attempts; attempt++) {
      const uid = candidateUid(range, owner.containerName, attempt);
      if (this.#reserved.has(uid)) continue;
      this.#reserved.add(uid);
      try {
        if (!(await this.#heldElsewhere(uid, owner))) return { uid, gid: uid };
      } catch (err) {
        this.#reserved.delete(uid);
        throw err;
      }
      this.#reserved.delete(uid);
    }
    throw new ResourceExhaustedError(
      `no free uid for a new task in ${TASK_UIDS_SETTING} (${range.first}-${range.last}) after ${attempts} tries: ` +
        'widen the range, or remove volumes of tasks that are gone',
    );
  }

  /** Runs `start` with a uid acquired for it ({@link acquire}), handing the uid back when `start` fails. */
  async startWith<T>(owner: UidOwner, recorded: string | undefined, start: (identity: TaskIdentity) => Promise<T>): Promise<T> {
    const identity = await stageSpan('uid_pick', () => this.acquire(owner, recorded));
    try {
      return await start(identity);
    } catch (err) {
      this.release(identity.uid);
      throw err;
    }
  }

  /** Hands a uid back (the task's environment is gone; its volumes keep the label). */
  release(uid: number): void {
    this.#reserved.delete(uid);
  }

  /** Whether a container or volume that is not `owner`'s carries the uid. */
  async #heldElsewhere(uid: number, owner: UidOwner): Promise<boolean> {
    const filters = { label: [`${LABEL.uid}=${uid}`] };
    try {
      const containers = await this.#o.docker.listContainers({ all: true, filters });
      if (containers.some((c) => !(c.Names ?? []).includes(`/${owner.containerName}`))) return true;
      const { Volumes } = await this.#o.docker.listVolumes({ filters });
      return (Volumes ?? []).some((v) => !(owner.volumeNames ?? []).includes(v.Name));
    } catch (err) {
      throw dockerError(err, 'looking for containers and volumes of a task uid', this.#o.daemon);
    }
  }
}
