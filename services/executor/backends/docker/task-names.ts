/**
 * Names of a task's Docker objects: its container, its volumes, its host
 * directory and its tenant's cgroup parent. Each is a keyed hash (HMAC-SHA256)
 * of the tenant and task ids under a secret of the executor's, so that
 * nothing that sees a name (a sandbox resolving names on its network, a
 * mount path in /proc/self/mountinfo, a cgroup path) can tell which tenant or
 * task it belongs to, or confirm a guess: sha256("tenant/task") could be
 * computed by anyone who knows the ids.
 *
 * The secret is 32 random bytes in `docker.name_key_file` (default
 * `<state_root>/docker/name-key`), made on the first start (mode 0600) and
 * read on every later one: a restarted executor finds its tasks' volumes and
 * leftover containers by name again. Executors that resume each other's
 * tasks on one Docker host (drained, lost) must share the file.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { lstat, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { FailedPreconditionError } from '../../../common/errors.js';
import type { TaskKey } from '../../backend.js';
import { taskKeyString } from '../../backend.js';

/** The setting that names the file. */
export const NAME_KEY_SETTING = 'docker.name_key_file';
/** The file's name under `<state_root>/docker` when the setting is empty. */
export const DEFAULT_NAME_KEY_FILE = 'name-key';
const KEY_BYTES = 32;

/** What a container is for (see container-spec.ts). */
export type NamedRole = 'task' | 'code';

export interface PersistentVolumeNames {
  readonly workspace: string;
  readonly home: string;
}

export class TaskNames {
  readonly #key: Buffer;

  constructor(key: Buffer) {
    if (key.length < KEY_BYTES) throw new FailedPreconditionError(`a name key needs at least ${KEY_BYTES} bytes, got ${key.length}`);
    this.#key = Buffer.from(key);
  }

  /**
   * The executor's key from `file`, made (0600, never over an existing
   * file) when it does not exist. A key that others can read, or that is not
   * a regular file of this user, stops the executor with what to do.
   */
  static async load(file: string): Promise<TaskNames> {
    await mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    try {
      await writeFile(file, randomBytes(KEY_BYTES).toString('hex') + '\n', { flag: 'wx', mode: 0o600 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const info = await lstat(file);
    const uid = typeof process.getuid === 'function' ? process.getuid() : info.uid;
    if (!info.isFile() || info.uid !== uid || (info.mode & 0o077) !== 0) {
      throw new FailedPreconditionError(
        `${NAME_KEY_SETTING} ${file} must be a regular file of uid ${uid} that only it can read (chmod 600 ${file}); refusing to use it`,
      );
    }
    const text = (await readFile(file, 'utf8')).trim();
    if (!/^[0-9a-f]+$/i.test(text) || text.length < KEY_BYTES * 2) {
      throw new FailedPreconditionError(
        `${NAME_KEY_SETTING} ${file} must hold at least ${KEY_BYTES} random bytes in hex (e.g. \`openssl rand -hex 32\`); ` +
          'remove it to have one made (tasks with volumes named by the old key then start with empty ones)',
      );
    }
    return new TaskNames(Buffer.from(text, 'hex'));
  }

  /** The keyed hash of `text`, hex, `chars` long. */
  #hash(domain: string, text: string, chars: number): string {
    return createHmac('sha256', this.#key).update(`${domain}\0${text}`).digest('hex').slice(0, chars);
  }

  /** A task's hash: its container, volume and host directory names. */
  task(key: TaskKey): string {
    return this.#hash('task', taskKeyString(key), 24);
  }

  /** The label that says whose a snapshot is (docker-snapshots.ts): the tenant's keyed hash, never its id. */
  snapshotOwner(tenant: string): string {
    return this.#hash('snapshot-tenant', tenant, 32);
  }

  /** The container of a task: one name per task and role, so a leftover container of the same task is found by name. */
  container(key: TaskKey, role: NamedRole = 'task'): string {
    return role === 'code' ? `berth-code-${this.task(key)}` : `berth-${this.task(key)}`;
  }

  /** Named volumes that keep a task's workspace and home across container restarts. */
  volumes(key: TaskKey): PersistentVolumeNames {
    const hash = this.task(key);
    return { workspace: `berth-${hash}-workspace`, home: `berth-${hash}-home` };
  }

  /**
   * The cgroup parent of a tenant's containers, so that the kernel shares
   * CPU between tenants rather than between containers: every tenant's
   * parent gets the same default weight (cgroup v1 `cpu.shares` 1024, v2
   * `cpu.weight` 100), however many containers it runs. Undefined where the
   * daemon manages no cgroups (`driver` none, rootless without delegation).
   */
  cgroupParent(tenant: string, driver: string | undefined): string | undefined {
    const hash = this.#hash('tenant', tenant, 16);
    // systemd: `berth-tX.slice` is a child of `berth.slice`, the dash being systemd's hierarchy separator.
    if (driver === 'systemd') return `berth-t${hash}.slice`;
    if (driver === 'cgroupfs') return `/berth/t${hash}`;
    return undefined;
  }
}
