/**
 * Records of tenants' snapshots (docs/lifecycle.md) kept in the executor's
 * state root by backends whose provider holds the files (modal, daytona):
 * one JSON file per snapshot, `<dir>/<id>.json`, holding the snapshot as the
 * executor sees it (owner, source task, label, time, shell state) and the
 * provider's reference to the files under a field of the backend's naming.
 * A record is written to a temporary name and renamed into place, so a
 * crash mid-snapshot leaves nothing listed; it survives executor restarts.
 * A temporary record a killed executor left is removed by
 * {@link TenantSnapshotRecords.sweep} (at the backend's start and each
 * listing) once unchanged for {@link LEFTOVER_MAX_AGE_MS}: not sooner, as
 * executors may share a state root and a young one may be a live executor's
 * write. Ids and records are read as hostile input: anything malformed is skipped,
 * and another tenant's record answers exactly as a missing one.
 */
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { SNAPSHOT_ID_PATTERN } from '../../../common/snapshot-ids.js';
import type { BackendSnapshot } from '../../backend.js';

/** `.<id>.<pid>.tmp`: a record being written. */
const TEMP_NAME = /^\..+\.tmp$/;
/** A temporary record unchanged for longer than this belongs to a write that will never finish. */
export const LEFTOVER_MAX_AGE_MS = 30 * 60 * 1000;

/** One stored snapshot: what the executor sees, and under `F` the provider's reference to its files. */
export type TenantSnapshotRecord<F extends string> = { readonly snapshot: BackendSnapshot } & { readonly [K in F]: string };

function parseSnapshot(raw: unknown, id: string): BackendSnapshot | undefined {
  if (!raw || typeof raw !== 'object') return undefined;
  const s = raw as Record<string, unknown>;
  const shell = s.shell as Record<string, unknown> | undefined;
  if (!shell || typeof shell !== 'object') return undefined;
  if (s.id !== id || typeof s.tenant !== 'string' || typeof s.sourceTaskId !== 'string' || typeof s.label !== 'string') return undefined;
  if (!Number.isSafeInteger(s.createdAtMs) || !Number.isSafeInteger(s.sizeBytes) || typeof s.includesProcesses !== 'boolean') return undefined;
  if (typeof shell.cwd !== 'string' || typeof shell.script !== 'string') return undefined;
  return {
    id,
    tenant: s.tenant,
    sourceTaskId: s.sourceTaskId,
    label: s.label,
    createdAtMs: s.createdAtMs as number,
    sizeBytes: s.sizeBytes as number,
    includesProcesses: s.includesProcesses,
    shell: { cwd: shell.cwd, script: shell.script },
  };
}

export class TenantSnapshotRecords<F extends string> {
  readonly #dir: string;
  readonly #field: F;
  readonly #refPattern: RegExp;

  /** Records in `dir`; the provider's reference is kept under `field` and must match `refPattern`. */
  constructor(dir: string, field: F, refPattern: RegExp) {
    this.#dir = dir;
    this.#field = field;
    this.#refPattern = refPattern;
  }

  #file(id: string): string {
    return path.join(this.#dir, `${id}.json`);
  }

  #parse(text: string, id: string): TenantSnapshotRecord<F> | undefined {
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch {
      return undefined;
    }
    if (!raw || typeof raw !== 'object') return undefined;
    const ref = (raw as Record<string, unknown>)[this.#field];
    const snapshot = parseSnapshot((raw as Record<string, unknown>).snapshot, id);
    if (typeof ref !== 'string' || !this.#refPattern.test(ref) || !snapshot) return undefined;
    return { snapshot, [this.#field]: ref } as TenantSnapshotRecord<F>;
  }

  /** Records a complete snapshot; only after this does it list. */
  async put(record: TenantSnapshotRecord<F>): Promise<void> {
    const { id } = record.snapshot;
    const ref: string = record[this.#field];
    if (!SNAPSHOT_ID_PATTERN.test(id)) throw new Error('not a snapshot id');
    if (!this.#refPattern.test(ref)) throw new Error(`not a ${this.#field}: ${JSON.stringify(ref.slice(0, 80))}`);
    await mkdir(this.#dir, { recursive: true, mode: 0o700 });
    const tmp = path.join(this.#dir, `.${id}.${process.pid}.tmp`);
    await writeFile(tmp, JSON.stringify({ snapshot: record.snapshot, [this.#field]: ref }), { mode: 0o600 });
    await rename(tmp, this.#file(id));
  }

  /** `tenant`'s snapshot `id`, or undefined (never made, deleted, malformed or another tenant's alike). */
  async get(tenant: string, id: string): Promise<TenantSnapshotRecord<F> | undefined> {
    if (!SNAPSHOT_ID_PATTERN.test(id)) return undefined;
    let text: string;
    try {
      text = await readFile(this.#file(id), 'utf8');
    } catch {
      return undefined;
    }
    const record = this.#parse(text, id);
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
  async list(tenant: string): Promise<TenantSnapshotRecord<F>[]> {
    await this.sweep();
    let names: string[];
    try {
      names = await readdir(this.#dir);
    } catch {
      return [];
    }
    const out: TenantSnapshotRecord<F>[] = [];
    for (const name of names) {
      const id = name.endsWith('.json') ? name.slice(0, -5) : '';
      if (!SNAPSHOT_ID_PATTERN.test(id)) continue;
      const record = await this.get(tenant, id);
      if (record) out.push(record);
    }
    return out.sort((a, b) => a.snapshot.createdAtMs - b.snapshot.createdAtMs);
  }

  /** Forgets `tenant`'s snapshot `id` and returns it (its files may then be dropped); undefined when it has none of that id. */
  async delete(tenant: string, id: string): Promise<TenantSnapshotRecord<F> | undefined> {
    const record = await this.get(tenant, id);
    if (!record) return undefined;
    await rm(this.#file(id), { force: true });
    return record;
  }
}
