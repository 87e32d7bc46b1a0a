/**
 * Snapshot ids and the answers about them that the dispatcher and the
 * executors share (task snapshots and forks, docs/lifecycle.md).
 */

/** Snapshot ids: `snap_` and 24 lowercase hex characters (they name Docker images, which must be lowercase). */
export const SNAPSHOT_ID_PATTERN = /^snap_[0-9a-f]{24}$/;

/** The one answer for a snapshot id the tenant does not own: never made, deleted, or another tenant's alike. */
export function unknownSnapshotMessage(snapshotId: string): string {
  return `no snapshot with id '${snapshotId.slice(0, 64)}'; list yours with 'berth snapshots'`;
}

/** What a fork of a snapshot gets, as the API lists it. */
export function snapshotIncludes(includesProcesses: boolean): string[] {
  return ['files', 'shell_state', ...(includesProcesses ? ['processes'] : [])];
}
