/**
 * Tenants' snapshots on the daytona backend (docs/lifecycle.md): the files
 * are a Daytona snapshot of the task's sandbox (`sandbox.createSnapshot`,
 * an image Daytona keeps and makes new sandboxes from); Berth's own record
 * of it (owner, source task, label, time, shell state, and the Daytona
 * snapshot's name) is a file in the executor's state root,
 * `<state_root>/daytona/tenant-snapshots/<id>.json` (the kit's records:
 * atomic, validated on read, another tenant's answering as a missing one).
 *
 * A Daytona snapshot's name is a keyed hash of tenant and snapshot id
 * (`berth-snap-` and 40 hex digits), so names of different tenants never
 * collide and nobody who sees one can tell whose it is or confirm a guess.
 * Before Daytona is asked for a snapshot, its name is written under
 * `<state_root>/daytona/pending-snapshots/`; the mark goes once the record
 * is written. A mark older than a snapshot could take belongs to a snapshot
 * that will never complete (the executor died): the next listing deletes
 * that Daytona snapshot.
 */
import { createHmac } from 'node:crypto';
import { mkdir, readdir, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { TenantSnapshotRecords, type TenantSnapshotRecord } from '../shared/tenant-snapshot-records.js';

/** The names Berth gives Daytona snapshots. */
export const DAYTONA_SNAPSHOT_NAME = /^berth-snap-[0-9a-f]{40}$/;

/** A pending mark older than this belongs to a snapshot that will never complete. */
export const PENDING_MAX_AGE_MS = 30 * 60 * 1000;

/** The Daytona snapshot name of `tenant`'s snapshot `id`: a hash keyed by `secret` (the executor's shared secret). */
export function daytonaSnapshotName(secret: string, tenant: string, id: string): string {
  const hash = createHmac('sha256', `berth-daytona-snapshots:${secret}`).update(`${tenant}\0${id}`).digest('hex');
  return `berth-snap-${hash.slice(0, 40)}`;
}

/** One stored snapshot: what the executor sees, and the Daytona snapshot a fork starts from. */
export type DaytonaTenantSnapshot = TenantSnapshotRecord<'daytonaSnapshot'>;

export class DaytonaSnapshotRecords extends TenantSnapshotRecords<'daytonaSnapshot'> {
  readonly #pending: string;

  /** Records under `stateDir` (`<state_root>/daytona`). */
  constructor(stateDir: string) {
    super(path.join(stateDir, 'tenant-snapshots'), 'daytonaSnapshot', DAYTONA_SNAPSHOT_NAME);
    this.#pending = path.join(stateDir, 'pending-snapshots');
  }

  /** Marks the Daytona snapshot `name` as under way (before Daytona is asked for it). */
  async begin(name: string): Promise<void> {
    if (!DAYTONA_SNAPSHOT_NAME.test(name)) throw new Error('not a Daytona snapshot name of Berth\'s');
    await mkdir(this.#pending, { recursive: true, mode: 0o700 });
    await writeFile(path.join(this.#pending, name), '', { mode: 0o600 });
  }

  /** The Daytona snapshot `name` is recorded (or removed): no longer under way. */
  async end(name: string): Promise<void> {
    if (DAYTONA_SNAPSHOT_NAME.test(name)) await rm(path.join(this.#pending, name), { force: true });
  }

  /** Names of Daytona snapshots marked under way longer than `maxAgeMs` ago: never to complete. */
  async abandoned(maxAgeMs = PENDING_MAX_AGE_MS): Promise<string[]> {
    let names: string[];
    try {
      names = await readdir(this.#pending);
    } catch {
      return [];
    }
    const out: string[] = [];
    for (const name of names.filter((n) => DAYTONA_SNAPSHOT_NAME.test(n))) {
      const info = await stat(path.join(this.#pending, name)).catch(() => undefined);
      if (info && Date.now() - info.mtimeMs > maxAgeMs) out.push(name);
    }
    return out;
  }
}
