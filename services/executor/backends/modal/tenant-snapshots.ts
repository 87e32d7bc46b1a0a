/**
 * The tenants' snapshots (docs/lifecycle.md) the modal backend holds: one
 * record per snapshot in the executor's state root
 * (`<state_root>/modal/tenant-snapshots/<id>.json`), naming the Modal image
 * that holds the files and carrying the shell state the executor supplied
 * (the kit's records: atomic, validated on read, tenants kept apart, old
 * temporary records of killed executors swept).
 */
import path from 'node:path';
import { TenantSnapshotRecords, type TenantSnapshotRecord } from '../shared/tenant-snapshot-records.js';

export { LEFTOVER_MAX_AGE_MS } from '../shared/tenant-snapshot-records.js';

const IMAGE_ID = /^[A-Za-z0-9_.:-]{1,200}$/;

/** One stored snapshot: what the executor sees, and the Modal image a fork starts from. */
export type ModalTenantSnapshot = TenantSnapshotRecord<'imageId'>;

export class TenantSnapshots extends TenantSnapshotRecords<'imageId'> {
  constructor(stateDir: string) {
    super(path.join(stateDir, 'tenant-snapshots'), 'imageId', IMAGE_ID);
  }
}
