/**
 * The tenants' snapshots (docs/lifecycle.md) the modal backend holds: one
 * record per snapshot in the executor's state root
 * (`<state_root>/modal/tenant-snapshots/<id>.json`), naming the Modal image
 * that holds the files and carrying the shell state the executor supplied.
 * A record is written to a temporary name and renamed into place, so a
 * crash mid-snapshot leaves nothing listed; it survives executor restarts.
 * A temporary record a killed executor left is removed by
 * {@link TenantSnapshots.sweep} (at the backend's start and each listing)
 * once unchanged for {@link LEFTOVER_MAX_AGE_MS}: not sooner, as executors
 * may share a state root and a young one may be a live executor's write.
 * Ids and records are read as hostile input: anything malformed is skipped.
 */
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { BackendSnapshot } from '../../backend.js';
import { SNAPSHOT_ID_PATTERN } from '../../../common/snapshot-ids.js';

const IMAGE_ID = /^[A-Za-z0-9_.:-]{1,200}$/;
/** `.<id>.<pid>.tmp`: a record being written. */
const TEMP_NAME = /^\..+\.tmp$/;
/** A temporary record unchanged for longer than this belongs to a write that will never finish. */
export const LEFTOVER_MAX_AGE_MS = 30 * 60 * 1000;

/** One stored snapshot: what the executor sees, and the Modal image a fork starts from. */
export interface ModalTenantSnapshot {
  readonly snapshot: BackendSnapshot;
  readonly imageId: string;
}

function parseRecord(text: string, id: string): ModalTenantSnapshot | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!raw || typeof raw !== 'object') return undefined;
  const r = raw as Record<string, unknown>;
  const s = r.snapshot as Record<string, unknown> | undefined;
  const shell = s?.shell as Record<string, unknown> | undefined;
  if (typeof r.imageId !== 'string' || !IMAGE_ID.test(r.imageId) || !s || !shell) return undefined;
  if (s.id !== id || typeof s.tenant !== 'string' || typeof s.sourceTaskId !== 'string' || typeof s.label !== 'string') return undefined;
  if (!Number.isSafeInteger(s.createdAtMs) || !Number.isSafeInteger(s.sizeBytes) || typeof s.includesProcesses !== 'boolean') return undefined;
  if (typeof shell.cwd !== 'string' || typeof shell.script !== 'string') return undefined;
  return {
    imageId: r.imageId,
    snapshot: {
      id,
      tenant: s.tenant,
      sourceTaskId: s.sourceTaskId,
      label: s.label,
      createdAtMs: s.createdAtMs as number,
      sizeBytes: s.sizeBytes as number,
      includesProcesses: s.includesProcesses,
      shell: { cwd: shell.cwd, script: shell.script },
    },
  };
}

export class TenantSnapshots {
  readonly #dir: string;

  constructor(stateDir: string) {
    this.#dir = path.join(stateDir, 'tenant-snapshots');
  }

  #file(id: string): string {
    return path.join(this.#dir, `${id}.json`);
  }

  /** Records a complete snapshot; only after this does it list. */
  async put(record: ModalTenantSnapshot): Promise<void> {
    const { id } = record.snapshot;
    if (!SNAPSHOT_ID_PATTERN.test(id)) throw new Error('not a snapshot id');
    if (!IMAGE_ID.test(record.imageId)) throw new Error(`not an image id: ${JSON.stringify(record.imageId.slice(0, 80))}`);
    await mkdir(this.#dir, { recursive: true, mode: 0o700 });
    const tmp = path.join(this.#dir, `.${id}.${process.pid}.tmp`);
    await writeFile(tmp, JSON.stringify(record), { mode: 0o600 });
    await rename(tmp, this.#file(id));
  }

  /** `tenant`'s snapshot `id`, or undefined (never made, deleted, malformed or another tenant's alike). */
  async get(tenant: string, id: string): Promise<ModalTenantSnapshot | undefined> {
    if (!SNAPSHOT_ID_PATTERN.test(id)) return undefined;
    let text: string;
    try {
      text = await readFile(this.#file(id), 'utf8');
    } catch {
      return undefined;
    }
    const record = parseRecord(text, id);
    return record?.snapshot.tenant === tenant ? record : undefined;
  }

  /** Removes temporary records unchanged for longer than {@link LEFTOVER_MAX_AGE_MS} before `nowMs`; returns their names. */
  async sweep(nowMs = Date.now()): Promise<string[]> {
    const names = await readdir(this.#dir).catch(() => [] as string[]);
    const removed: string[] = [];
    for (const name of names) {
      if (!TEMP_NAME.test(name)) continue;
      const s = await stat(path.join(this.#dir, name)).catch(() => undefined);
      if (!s?.isFile() || nowMs - s.mtimeMs <= LEFTOVER_MAX_AGE_MS) continue;
      await rm(path.join(this.#dir, name), { force: true });
      removed.push(name);
    }
    return removed.sort();
  }

  /** `tenant`'s complete snapshots, oldest first; sweeps old temporary records first. */
  async list(tenant: string): Promise<ModalTenantSnapshot[]> {
    await this.sweep();
    let names: string[];
    try {
      names = await readdir(this.#dir);
    } catch {
      return [];
    }
    const out: ModalTenantSnapshot[] = [];
    for (const name of names) {
      const id = name.endsWith('.json') ? name.slice(0, -5) : '';
      if (!SNAPSHOT_ID_PATTERN.test(id)) continue;
      const record = await this.get(tenant, id);
      if (record) out.push(record);
    }
    return out.sort((a, b) => a.snapshot.createdAtMs - b.snapshot.createdAtMs);
  }

  /** Forgets `tenant`'s snapshot `id` and returns it (its image may then be dropped); undefined when it has none of that id. */
  async delete(tenant: string, id: string): Promise<ModalTenantSnapshot | undefined> {
    const record = await this.get(tenant, id);
    if (!record) return undefined;
    await rm(this.#file(id), { force: true });
    return record;
  }
}
