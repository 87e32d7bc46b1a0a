/**
 * A task container's in-memory file systems (tmpfs: /tmp, /var/tmp, and the
 * workspace and home under a read-only root without volumes) would be lost
 * when a suspension stops the container. Before the stop they are packed,
 * by a command inside the container as the task's user, into one archive in
 * the task's state directory (host disk, bounded by the tmpfs sizes), and
 * unpacked by the same user after the restart. The executor never reads the
 * archive: what the sandbox wrote only ever goes back into the sandbox.
 */
import { SANDBOX_RPC_DIR } from './container-spec.js';

/** Where the archive lives while the task is suspended (the runner's state directory). */
export const TMPFS_ARCHIVE = `${SANDBOX_RPC_DIR}/state/.suspended-tmpfs.tar`;

/** The tmpfs mount points worth keeping: not /run (the container's own), /dev, /proc or /sys. */
const LIST_TMPFS =
  `awk '$3 == "tmpfs" && $2 != "/run" && $2 !~ /^\\/(dev|proc|sys|run)(\\/|$)/ { print substr($2, 2) }' /proc/mounts`;

/** Packs every tmpfs into {@link TMPFS_ARCHIVE}; exits non-zero only when it could not (files it may not read are left out). */
export function packTmpfsScript(): string {
  return [
    `rm -f ${TMPFS_ARCHIVE}`,
    `dirs=$(${LIST_TMPFS})`,
    '[ -n "$dirs" ] || exit 0',
    // What is in each mount point, not the mount point itself (the task's user may not set its mode back).
    // $dirs splits on purpose: /proc/mounts escapes spaces in mount points.
    'cd / || exit 2',
    `find $dirs -mindepth 1 -maxdepth 1 -print0 | tar --null --files-from=- --create --sparse --ignore-failed-read --warning=none --file=${TMPFS_ARCHIVE}`,
    'rc=$?',
    // 1: some file changed while it was read (still packed).
    '[ "$rc" -le 1 ] || exit "$rc"',
  ].join('\n');
}

/** Unpacks {@link TMPFS_ARCHIVE} (if any) where it came from, then removes it. */
export function unpackTmpfsScript(): string {
  return [
    `[ -f ${TMPFS_ARCHIVE} ] || exit 0`,
    `tar -C / --extract --no-overwrite-dir --no-same-owner --warning=none --file=${TMPFS_ARCHIVE}`,
    'rc=$?',
    `rm -f ${TMPFS_ARCHIVE}`,
    'exit "$rc"',
  ].join('\n');
}
