/**
 * Which Modal image holds the filesystem snapshot of each persistent task,
 * kept in the executor's state root (`<state_root>/modal/snapshots.json`)
 * so the next sandbox of the task, on this executor or after its restart,
 * starts from it. Writes are serialised and atomic (temp file + rename).
 */
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';

/** Entries kept; the oldest go first beyond this. */
const MAX_ENTRIES = 100_000;
const IMAGE_ID = /^[A-Za-z0-9_.:-]{1,200}$/;

export class SnapshotStore {
  readonly #file: string;
  #chain: Promise<unknown> = Promise.resolve();

  constructor(dir: string) {
    this.#file = path.join(dir, 'snapshots.json');
  }

  async #read(): Promise<Record<string, string>> {
    try {
      const parsed = JSON.parse(await readFile(this.#file, 'utf8')) as unknown;
      if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return {};
      const out: Record<string, string> = {};
      for (const [key, value] of Object.entries(parsed)) if (typeof value === 'string' && IMAGE_ID.test(value)) out[key] = value;
      return out;
    } catch {
      return {};
    }
  }

  #update(change: (entries: Record<string, string>) => void): Promise<void> {
    const run = this.#chain.then(async () => {
      const entries = await this.#read();
      change(entries);
      const keys = Object.keys(entries);
      for (const key of keys.slice(0, Math.max(0, keys.length - MAX_ENTRIES))) delete entries[key];
      await mkdir(path.dirname(this.#file), { recursive: true, mode: 0o700 });
      const tmp = `${this.#file}.${process.pid}.tmp`;
      await writeFile(tmp, JSON.stringify(entries), { mode: 0o600 });
      await rename(tmp, this.#file);
    });
    this.#chain = run.catch(() => undefined);
    return run;
  }

  async get(task: string): Promise<string | undefined> {
    await this.#chain;
    return (await this.#read())[task];
  }

  set(task: string, imageId: string): Promise<void> {
    if (!IMAGE_ID.test(imageId)) return Promise.reject(new Error(`not an image id: ${JSON.stringify(imageId.slice(0, 80))}`));
    return this.#update((entries) => {
      delete entries[task];
      entries[task] = imageId;
    });
  }

  delete(task: string): Promise<void> {
    return this.#update((entries) => {
      delete entries[task];
    });
  }
}
