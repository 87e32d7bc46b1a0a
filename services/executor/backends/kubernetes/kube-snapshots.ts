/**
 * Task snapshots on the kubernetes backend (docs/lifecycle.md): a snapshot
 * is a copy. The task pod's workspace and home directory are archived by
 * `tar` inside the pod (one `pods/exec`), and the archive's bytes are stored
 * under the executor's state root, `<state_root>/kubernetes-snapshots/<owner>/`,
 * as `<id>.tar` beside `<id>.json` (owner, source task, label, time, shell
 * state). The archive comes out of a sandbox: it is never extracted on the
 * executor host, only stored and sent back into a fork's pod, and a copy
 * larger than the cap is refused.
 *
 * Crash-safe: both files are written under temporary names and renamed, the
 * metadata last; only a snapshot with both is listed. What an interrupted
 * write leaves (a `.part-*` temporary file, an archive without its metadata)
 * is removed by {@link KubeSnapshots.sweep} once older than
 * {@link LEFTOVER_MAX_AGE_MS}: at the backend's start over every tenant and
 * the suspensions, and at each listing and snapshot over the tenant's own.
 * Not sooner, as a state root may be shared (executors on one node with a
 * hostPath state root, two versions during a rolling upgrade), so a young
 * temporary file may be another live executor's write under way; a live
 * write changes its file's mtime as it goes and renames it at once.
 *
 * A fork is a new pod for the new task; the archive is extracted in it
 * (`tar -x` as the pod's own uid) before its first command. Running
 * processes are not kept (`includesProcesses: false`).
 */
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { FailedPreconditionError, NotFoundError, UnavailableError } from '../../../common/errors.js';
import { SNAPSHOT_ID_PATTERN, unknownSnapshotMessage } from '../../../common/snapshot-ids.js';
import type { BackendSnapshot } from '../../backend.js';
import type { KubeApi } from './kube-api.js';
import { execInPod } from './pod-exec.js';

/** Default largest archive a snapshot may hold. */
export const DEFAULT_SNAPSHOT_MAX_BYTES = 256 * 1024 * 1024;

/** Under the store's root: one archive per suspended task (not a tenant's directory: those are hex hashes). */
const SUSPENDED_DIR = 'suspended';

/** A leftover of a write (temporary file, half a snapshot) unchanged for longer than this belongs to a write that will never finish. */
export const LEFTOVER_MAX_AGE_MS = 30 * 60 * 1000;

export interface KubeSnapshotsOptions {
  readonly api: KubeApi;
  /** `<state_root>/kubernetes-snapshots`. */
  readonly root: string;
  /** The tenant's keyed hash: the snapshot directory's name, so no path names a tenant. */
  readonly ownerOf: (tenant: string) => string;
  readonly maxBytes: number;
}

interface StoredMeta {
  readonly id: string;
  readonly owner: string;
  readonly sourceTaskId: string;
  readonly label: string;
  readonly createdAtMs: number;
  readonly cwd: string;
  readonly script: string;
}

/** The snapshot from its stored metadata; undefined when it is not one of `owner`'s. Pure. */
export function snapshotFromMeta(text: string, tenant: string, owner: string, sizeBytes: number): BackendSnapshot | undefined {
  let m: Partial<StoredMeta>;
  try {
    m = JSON.parse(text) as Partial<StoredMeta>;
  } catch {
    return undefined;
  }
  if (m.owner !== owner || typeof m.id !== 'string' || !SNAPSHOT_ID_PATTERN.test(m.id) || !Number.isSafeInteger(m.createdAtMs)) return undefined;
  return {
    id: m.id,
    tenant,
    sourceTaskId: String(m.sourceTaskId ?? ''),
    label: String(m.label ?? ''),
    createdAtMs: m.createdAtMs!,
    sizeBytes,
    includesProcesses: false,
    shell: { cwd: String(m.cwd ?? ''), script: String(m.script ?? '') },
  };
}

export class KubeSnapshots {
  readonly #o: KubeSnapshotsOptions;

  constructor(options: KubeSnapshotsOptions) {
    this.#o = options;
  }

  #dir(tenant: string): string {
    return path.join(this.#o.root, this.#o.ownerOf(tenant));
  }

  /** The archive of what is in `dirs` of `pod`, at most the cap; `what` names the operation in errors. */
  async #archive(pod: string, dirs: readonly string[], what: 'snapshot' | 'suspension'): Promise<Buffer> {
    const max = this.#o.maxBytes;
    // Relative to /, so the archive extracts at the same paths in the fork's pod; without the
    // directories themselves (mount points the fork's uid cannot chmod), only what is in them.
    const script = 'cd / && find "$@" -mindepth 1 -print0 | tar --null --no-recursion -T - -cf -';
    const relative = dirs.map((d) => d.replace(/^\/+/, ''));
    const out = await execInPod(this.#o.api, pod, ['sh', '-c', script, 'sh', ...relative], undefined, max + 1);
    if (out.stdout.length > max) {
      throw new FailedPreconditionError(
        `${what} refused: the task's files (${dirs.join(', ')}) make an archive larger than kubernetes ${what}s allow (${max} bytes); remove what the task does not need and try again`,
      );
    }
    if (out.code !== 0) {
      throw new UnavailableError(`${what} of pod ${pod} failed: tar exited ${out.code}: ${out.stderr.toString('utf8', 0, 2000).trim()}`);
    }
    return out.stdout;
  }

  /** Extracts an archive made by {@link #archive} in `pod`, as the pod's user. */
  async #extract(pod: string, archive: Uint8Array, what: string): Promise<void> {
    const out = await execInPod(this.#o.api, pod, ['tar', '--no-overwrite-dir', '-C', '/', '-xf', '-'], archive);
    if (out.code !== 0) throw new UnavailableError(`restoring ${what} into pod ${pod} failed: tar exited ${out.code}: ${out.stderr.toString('utf8', 0, 2000).trim()}`);
  }

  /** Archives `dirs` of `pod` into the store; the metadata is written last. */
  async take(pod: string, dirs: readonly string[], snapshot: Omit<BackendSnapshot, 'sizeBytes' | 'includesProcesses'>): Promise<BackendSnapshot> {
    const archive = await this.#archive(pod, dirs, 'snapshot');
    const dir = this.#dir(snapshot.tenant);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const owner = this.#o.ownerOf(snapshot.tenant);
    const meta: StoredMeta = {
      id: snapshot.id,
      owner,
      sourceTaskId: snapshot.sourceTaskId,
      label: snapshot.label,
      createdAtMs: snapshot.createdAtMs,
      cwd: snapshot.shell.cwd,
      script: snapshot.shell.script,
    };
    await sweepLeftovers(dir, Date.now(), true);
    await writeAtomically(path.join(dir, `${snapshot.id}.tar`), archive);
    await writeAtomically(path.join(dir, `${snapshot.id}.json`), JSON.stringify(meta));
    return snapshotFromMeta(JSON.stringify(meta), snapshot.tenant, owner, archive.length)!;
  }

  /**
   * Removes what interrupted writes left, unchanged for longer than
   * {@link LEFTOVER_MAX_AGE_MS} before `nowMs`: temporary files, and an
   * archive or metadata without the other (a snapshot cut off between its
   * two renames), of every tenant and of the suspensions. Returns the
   * removed files, relative to the store's root.
   */
  async sweep(nowMs = Date.now()): Promise<string[]> {
    const entries = await readdir(this.#o.root, { withFileTypes: true }).catch(() => []);
    const removed: string[] = [];
    for (const entry of entries) {
      if (!entry.isDirectory()) continue;
      const gone = await sweepLeftovers(path.join(this.#o.root, entry.name), nowMs, entry.name !== SUSPENDED_DIR);
      removed.push(...gone.map((name) => path.join(entry.name, name)));
    }
    return removed.sort();
  }

  /** The tenant's complete snapshots; removes leftovers of snapshots cut off long ago. */
  async list(tenant: string): Promise<BackendSnapshot[]> {
    const dir = this.#dir(tenant);
    await sweepLeftovers(dir, Date.now(), true);
    const names = await readdir(dir).catch(() => [] as string[]);
    const found: BackendSnapshot[] = [];
    for (const name of names) {
      if (!name.endsWith('.json')) continue;
      const s = await this.find(tenant, name.slice(0, -'.json'.length));
      if (s) found.push(s);
    }
    return found.sort((a, b) => a.createdAtMs - b.createdAtMs);
  }

  async find(tenant: string, id: string): Promise<BackendSnapshot | undefined> {
    if (!SNAPSHOT_ID_PATTERN.test(id)) return undefined;
    const base = path.join(this.#dir(tenant), id);
    const [text, size] = await Promise.all([
      readFile(`${base}.json`, 'utf8').catch(() => undefined),
      stat(`${base}.tar`).then((s) => s.size).catch(() => undefined),
    ]);
    if (text === undefined || size === undefined) return undefined;
    return snapshotFromMeta(text, tenant, this.#o.ownerOf(tenant), size);
  }

  /** Extracts `snapshot`'s archive into `pod` (before its first command). */
  async restore(pod: string, snapshot: BackendSnapshot): Promise<void> {
    if (!(await this.find(snapshot.tenant, snapshot.id))) throw new NotFoundError(unknownSnapshotMessage(snapshot.id));
    const archive = await readFile(path.join(this.#dir(snapshot.tenant), `${snapshot.id}.tar`));
    await this.#extract(pod, archive, `snapshot ${snapshot.id}`);
  }

  #suspensionFile(task: string): string {
    return path.join(this.#o.root, SUSPENDED_DIR, `${task}.tar`);
  }

  /** Keeps what is in `dirs` of `pod` for the task's resumption (the pod is deleted next). `task`: its keyed label value. */
  async suspend(task: string, pod: string, dirs: readonly string[]): Promise<void> {
    const archive = await this.#archive(pod, dirs, 'suspension');
    await mkdir(path.dirname(this.#suspensionFile(task)), { recursive: true, mode: 0o700 });
    await writeAtomically(this.#suspensionFile(task), archive);
  }

  /** Extracts the task's suspension into `pod` and forgets it. */
  async resumeInto(task: string, pod: string): Promise<void> {
    let archive: Buffer;
    try {
      archive = await readFile(this.#suspensionFile(task));
    } catch (err) {
      throw new UnavailableError(`the files kept for the task's suspension are gone (${(err as Error).message})`);
    }
    await this.#extract(pod, archive, "the suspended task's files");
    await this.forgetSuspension(task);
  }

  /** Removes the task's suspension archive, if any (resumed, or released while suspended). */
  async forgetSuspension(task: string): Promise<void> {
    await rm(this.#suspensionFile(task), { force: true });
  }

  /** Removes the metadata first: a half-deleted snapshot is not listed. */
  async delete(tenant: string, id: string): Promise<boolean> {
    if (!(await this.find(tenant, id))) return false;
    const base = path.join(this.#dir(tenant), id);
    await rm(`${base}.json`, { force: true });
    await rm(`${base}.tar`, { force: true });
    return true;
  }
}

/**
 * Removes from `dir` the temporary files and, when `halves` (a tenant's
 * directory), the archives without metadata and metadata without archive,
 * unchanged for longer than {@link LEFTOVER_MAX_AGE_MS} before `nowMs`.
 * Returns the removed names.
 */
async function sweepLeftovers(dir: string, nowMs: number, halves: boolean): Promise<string[]> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const present = new Set(names);
  const removed: string[] = [];
  for (const name of names) {
    const ext = path.extname(name);
    const twin = ext === '.tar' ? `${name.slice(0, -4)}.json` : ext === '.json' ? `${name.slice(0, -5)}.tar` : undefined;
    const leftover = name.includes('.part-') || (halves && twin !== undefined && !present.has(twin));
    if (!leftover) continue;
    const s = await stat(path.join(dir, name)).catch(() => undefined);
    if (!s?.isFile() || nowMs - s.mtimeMs <= LEFTOVER_MAX_AGE_MS) continue;
    await rm(path.join(dir, name), { force: true });
    removed.push(name);
  }
  return removed;
}

async function writeAtomically(file: string, data: Uint8Array | string): Promise<void> {
  const temp = `${file}.part-${process.pid}-${Date.now()}`;
  try {
    await writeFile(temp, data, { mode: 0o600 });
    await rename(temp, file);
  } catch (err) {
    await rm(temp, { force: true });
    throw err;
  }
}
