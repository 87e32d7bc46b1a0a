/**
 * The kernel identity of a task's commands on the docker backend: a uid and
 * gid of its own, from `docker.task_uids`, so that per-user kernel limits
 * (inotify instances and watches, RLIMIT_NPROC, user keyrings, ...) are the
 * task's alone and never another tenant's or a host user's.
 *
 * The range, the candidate uids and the account files are the kit's
 * (shared/task-uid-range.ts, re-exported here); this file adds what is
 * Docker's: the daemon's id mapping and the check that no host account
 * uses the range. The allocation (with Docker's labels as the record) is
 * in task-uids.ts; the image's own files come from image-accounts.ts.
 */
import { inRange, parseTaskUidRange, splitLines, type UidRange } from '../shared/task-uid-range.js';

export {
  DEFAULT_TASK_UIDS,
  IMAGE_SANDBOX_UID,
  REMAPPED_MAX_UID,
  REMAPPED_TASK_UIDS,
  candidateUid,
  inRange,
  parseRecordedUid,
  rangeSize,
  taskAccounts,
} from '../shared/task-uid-range.js';
export type { AccountFiles, TaskIdentity, UidRange } from '../shared/task-uid-range.js';

/** Setting that names the range, for errors. */
export const TASK_UIDS_SETTING = 'docker.task_uids';

/** Whether the daemon (its `docker info` SecurityOptions) maps containers' ids: rootless, or userns-remap. */
export function daemonRemapsIds(securityOptions: readonly string[] | undefined): boolean {
  return (securityOptions ?? []).some((o) => /(^|,)name=(rootless|userns)(,|$)/.test(o));
}

/** Parses `FIRST-LAST` (inclusive); every problem names the setting. */
export function parseUidRange(text: string, setting = TASK_UIDS_SETTING): UidRange {
  return parseTaskUidRange(text, setting);
}

/** Host files that name ids: accounts, groups, and the subordinate ranges of rootless containers. */
export interface HostIdFiles {
  readonly passwd?: string;
  readonly group?: string;
  readonly subuid?: string;
  readonly subgid?: string;
}

/**
 * Where the range meets an id the host already uses: an account or group
 * in it, a subordinate range (`/etc/subuid`, `/etc/subgid`) overlapping it,
 * or the executor's own uid. Each entry says which file and line.
 */
export function hostIdConflicts(range: UidRange, files: HostIdFiles, executorUid?: number): string[] {
  const found: string[] = [];
  const hits = (id: number) => inRange(range, id);
  for (const [file, text] of [
    ['/etc/passwd', files.passwd],
    ['/etc/group', files.group],
  ] as const) {
    for (const line of splitLines(text)) {
      const [name, , id] = line.split(':');
      if (id !== undefined && /^\d+$/.test(id) && hits(Number(id))) found.push(`${file}: ${name} (${id})`);
    }
  }
  for (const [file, text] of [
    ['/etc/subuid', files.subuid],
    ['/etc/subgid', files.subgid],
  ] as const) {
    for (const line of splitLines(text)) {
      const [owner, start, count] = line.split(':');
      if (!start || !count || !/^\d+$/.test(start) || !/^\d+$/.test(count)) continue;
      const first = Number(start);
      const last = first + Number(count) - 1;
      if (first <= range.last && last >= range.first) found.push(`${file}: ${owner} (${first}-${last})`);
    }
  }
  if (executorUid !== undefined && hits(executorUid)) found.push(`the executor's own uid (${executorUid})`);
  return found;
}
