/**
 * A task's own kernel identity, for the container backends that run
 * Berth's image: a uid and gid of its own from a configured range
 * (`docker.task_uids`, `kubernetes.task_uids`), so that per-user kernel
 * limits (inotify instances and watches, RLIMIT_NPROC, user keyrings, ...)
 * are the task's alone and never another tenant's or a host user's.
 *
 * Pure helpers: the range, the candidate uids of a task (spread by a hash
 * of a keyed name, so the same on every executor), a recorded uid read
 * back from a label, and the passwd and group files that name the task's
 * ids. Each backend records and allocates the uid where its platform keeps
 * labels (docker/task-uids.ts, kubernetes/pod-uids.ts).
 */
import { createHash } from 'node:crypto';
import { DEFAULT_TASK_UIDS } from '../../../common/config.js';
import { InvalidArgumentError } from '../../../common/errors.js';

export { DEFAULT_TASK_UIDS };

/**
 * The default where every id of a task is mapped into a range of its own
 * (a rootless or userns-remap daemon, a pod's user namespace): such a range
 * usually holds 65536 ids, and inside it these name no account of the host;
 * 1000 and 65534/65535 stay out.
 */
export const REMAPPED_TASK_UIDS = '10000-65533';

/** Highest id such a mapping holds by default (a 65536-id range). */
export const REMAPPED_MAX_UID = 65_535;

/**
 * The uid (and gid) the image gives its sandbox user: what commands ran as
 * before, and what the image's files in the workspace and home carry. The
 * account with this id keeps its name and becomes the task's.
 */
export const IMAGE_SANDBOX_UID = 1000;

/** Highest id accepted: below 2^31 - 1, so no tool reads it as negative. */
const MAX_TASK_UID = 2_147_483_646;

export interface UidRange {
  readonly first: number;
  readonly last: number;
}

export interface TaskIdentity {
  readonly uid: number;
  readonly gid: number;
}

/** Parses `FIRST-LAST` (inclusive); every problem names `setting`. */
export function parseTaskUidRange(text: string, setting: string): UidRange {
  const m = /^\s*(\d{1,10})\s*-\s*(\d{1,10})\s*$/.exec(text);
  if (!m) throw new InvalidArgumentError(`${setting}: "${text}" is not FIRST-LAST (e.g. ${DEFAULT_TASK_UIDS})`);
  const first = Number(m[1]);
  const last = Number(m[2]);
  if (first < 1 || last > MAX_TASK_UID || first > last) {
    throw new InvalidArgumentError(`${setting}: "${text}" must satisfy 1 <= FIRST <= LAST <= ${MAX_TASK_UID}`);
  }
  if (first <= IMAGE_SANDBOX_UID && IMAGE_SANDBOX_UID <= last) {
    throw new InvalidArgumentError(`${setting}: "${text}" holds uid ${IMAGE_SANDBOX_UID}, the image's own sandbox user`);
  }
  return { first, last };
}

export function rangeSize(range: UidRange): number {
  return range.last - range.first + 1;
}

export function inRange(range: UidRange, id: number): boolean {
  return Number.isSafeInteger(id) && id >= range.first && id <= range.last;
}

/**
 * The `attempt`th uid to try for a task named `seed` (a keyed name of the
 * executor's): the first is spread over the range by a hash, so a task's
 * first choice is the same on every executor (a volume made before uids
 * were recorded keeps its owner) and two tasks rarely want the same one;
 * the next ones follow it, so that as many attempts as the range has ids
 * try each of them.
 */
export function candidateUid(range: UidRange, seed: string, attempt: number): number {
  const start = createHash('sha256').update(`berth-task-uid\0${seed}`).digest().readBigUInt64BE(0);
  return range.first + Number((start + BigInt(attempt)) % BigInt(rangeSize(range)));
}

/** A recorded uid (a label's value) when it is one of the range, else undefined. */
export function parseRecordedUid(value: string | undefined, range: UidRange): number | undefined {
  if (value === undefined || !/^\d{1,10}$/.test(value)) return undefined;
  const uid = Number(value);
  return inRange(range, uid) ? uid : undefined;
}

export interface AccountFiles {
  readonly passwd: string;
  readonly group: string;
}

/** Name given to the task's account when the image has none of its own. */
const FALLBACK_NAME = 'sandbox';

/**
 * The image's /etc/passwd and /etc/group with the sandbox account moved to
 * the task's ids: the entry of uid 1000 (whatever the image calls it; what
 * `whoami` said before) gets the task's uid and gid and `homeDir`, and its
 * primary group the task's gid. An image without such an entry gets a
 * `sandbox` account; one without any file gets root's and that one. Other
 * entries stay as they are, so files of the image keep their owners' names.
 */
export function taskAccounts(image: Partial<AccountFiles>, identity: TaskIdentity, homeDir: string): AccountFiles {
  const passwd = splitLines(image.passwd);
  const group = splitLines(image.group);
  if (image.passwd === undefined) passwd.push('root:x:0:0:root:/root:/bin/sh');
  if (image.group === undefined) group.push('root:x:0:');
  const ids = (line: string) => line.split(':');
  // Nothing else may hold the task's ids: a name for them would be another account's.
  const others = (line: string, id: number) => ids(line)[2] !== String(id);
  let name = FALLBACK_NAME;
  let oldGid: string | undefined;
  const at = passwd.findIndex((line) => ids(line)[2] === String(IMAGE_SANDBOX_UID));
  const accountLine = (fields: string[]) => {
    name = fields[0] || FALLBACK_NAME;
    oldGid = fields[3];
    return [name, fields[1] ?? 'x', identity.uid, identity.gid, fields[4] ?? '', homeDir, fields[6] || '/bin/bash'].join(':');
  };
  const account = at >= 0 ? accountLine(ids(passwd[at]!)) : `${FALLBACK_NAME}:x:${identity.uid}:${identity.gid}::${homeDir}:/bin/bash`;
  const passwdOut = passwd.filter((line, i) => i !== at && others(line, identity.uid));
  passwdOut.push(account);
  let groupOut = group.filter((line) => others(line, identity.gid));
  const primary = groupOut.findIndex((line) => oldGid !== undefined && ids(line)[2] === oldGid);
  if (primary >= 0) {
    const fields = ids(groupOut[primary]!);
    fields[2] = String(identity.gid);
    groupOut = groupOut.filter((_, i) => i !== primary);
    groupOut.push(fields.join(':'));
  } else {
    groupOut.push(`${name}:x:${identity.gid}:`);
  }
  return { passwd: `${passwdOut.join('\n')}\n`, group: `${groupOut.join('\n')}\n` };
}

export function splitLines(text: string | undefined): string[] {
  return (text ?? '').split('\n').filter((line) => line.trim() !== '');
}
