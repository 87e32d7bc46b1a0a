/**
 * Converted images: a `docker://` (or other convertible) reference is built
 * into a SIF file once and reused by every task. Two tasks asking at once
 * share one conversion; two executors on one host serialise on a lock file,
 * and the loser finds the SIF already built. A SIF is written under a
 * temporary name and renamed, so a half-written file is never used.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, readFile, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { sifFileName } from './singularity-argv.js';

export type Converter = (output: string, source: string) => Promise<void>;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as { code?: unknown }).code === 'EPERM';
  }
}

export class SifCache {
  readonly dir: string;
  readonly #convert: Converter;
  readonly #pending = new Map<string, Promise<string>>();
  readonly #lockWaitMs: number;

  constructor(dir: string, convert: Converter, options: { lockWaitMs?: number } = {}) {
    this.dir = dir;
    this.#convert = convert;
    this.#lockWaitMs = options.lockWaitMs ?? 30 * 60_000;
  }

  /** The SIF for `image`, converting it first if needed. */
  get(image: string): Promise<string> {
    let pending = this.#pending.get(image);
    if (!pending) {
      pending = this.#ensure(image);
      this.#pending.set(image, pending);
      // A failed conversion is retried by the next caller.
      pending.catch(() => this.#pending.delete(image));
    }
    return pending;
  }

  async #ensure(image: string): Promise<string> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const target = path.join(this.dir, sifFileName(image));
    if (await exists(target)) return target;
    const lock = `${target}.lock`;
    await this.#lock(lock);
    try {
      if (await exists(target)) return target; // Built by another executor while we waited.
      const temp = `${target}.tmp-${randomBytes(4).toString('hex')}`;
      try {
        await this.#convert(temp, image);
        await rename(temp, target);
      } finally {
        await rm(temp, { force: true, recursive: true });
      }
      return target;
    } finally {
      await rm(lock, { force: true });
    }
  }

  /** Takes the lock file (O_EXCL, holding our pid); a lock whose holder died is broken. */
  async #lock(lock: string): Promise<void> {
    const deadline = Date.now() + this.#lockWaitMs;
    for (;;) {
      try {
        const handle = await open(lock, 'wx', 0o600);
        await handle.writeFile(String(process.pid));
        await handle.close();
        return;
      } catch (err) {
        if ((err as { code?: unknown }).code !== 'EEXIST') throw err;
      }
      const holder = Number((await readFile(lock, 'utf8').catch(() => '')).trim());
      if (Number.isInteger(holder) && holder > 0 && !isAlive(holder)) {
        await rm(lock, { force: true });
        continue;
      }
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${lock} (held by pid ${holder})`);
      await sleep(200);
    }
  }
}

async function exists(file: string): Promise<boolean> {
  return stat(file).then(
    () => true,
    () => false,
  );
}
