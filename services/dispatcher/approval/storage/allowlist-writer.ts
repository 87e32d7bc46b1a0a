/**
 * Writes "always" answers into the config file's allowlist: the top-level
 * `command_allowlist`, or `tenants[<id>].approvals.command_allowlist` for a
 * tenant. The file is edited as a YAML document (comments, order and layout
 * of everything else stay as they were) and replaced atomically: written to
 * a temporary file in the same directory, then renamed over the original.
 * (The one normalisation the YAML library applies: one space before a
 * trailing comment.)
 * Without a config file the approval is kept in memory only, and the outcome
 * says so.
 */
import { randomBytes } from 'node:crypto';
import { readFile, realpath, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { isMap, isScalar, isSeq, parseDocument } from 'yaml';
import type { Logger } from '../../../common/logging.js';

/** Where a tenant's permanent approvals are stored in the config file. */
export type AllowlistLocation = { readonly kind: 'top-level' } | { readonly kind: 'tenant'; readonly tenant: string };

export type PersistOutcome =
  | { readonly kind: 'saved'; readonly file: string }
  | { readonly kind: 'memory-only'; readonly reason: string };

export interface AllowlistPersister {
  persist(location: AllowlistLocation, keys: readonly string[]): Promise<PersistOutcome>;
}

/**
 * Adds keys to the allowlist at `location` in YAML text (pure, for tests).
 * Keys already listed are not repeated; the rest of the document is kept.
 */
export function addToAllowlistYaml(text: string, location: AllowlistLocation, keys: readonly string[]): string {
  const doc = parseDocument(text);
  if (doc.errors.length > 0) throw new Error(`the file is not valid YAML: ${doc.errors[0]!.message}`);
  let path: (string | number)[] = ['command_allowlist'];
  if (location.kind === 'tenant') {
    const tenants = doc.get('tenants');
    const index = isSeq(tenants)
      ? tenants.items.findIndex((item) => isMap(item) && item.get('id') === location.tenant)
      : -1;
    if (index < 0) throw new Error(`tenant '${location.tenant}' is not listed under tenants:`);
    path = ['tenants', index, 'approvals', 'command_allowlist'];
  }
  const existing = doc.getIn(path, true);
  if (isSeq(existing)) {
    const present = new Set(existing.items.map((item) => (isScalar(item) ? String(item.value) : undefined)));
    for (const key of keys) if (!present.has(key)) existing.add(doc.createNode(key));
  } else if (existing === undefined || existing === null || (isScalar(existing) && existing.value === null)) {
    doc.setIn(path, doc.createNode([...keys]));
  } else {
    throw new Error(`${path.join('.')} is not a list`);
  }
  // lineWidth 0: never re-fold long lines or flow collections the user wrote on one line.
  return doc.toString({ lineWidth: 0 });
}

/** Persists into a config file, one write at a time. */
export class ConfigFileAllowlist implements AllowlistPersister {
  readonly #path: string | undefined;
  readonly #logger: Logger;
  #queue: Promise<unknown> = Promise.resolve();

  /** `path` undefined: the server runs without a config file, so nothing is written. */
  constructor(path: string | undefined, logger: Logger) {
    this.#path = path;
    this.#logger = logger;
  }

  persist(location: AllowlistLocation, keys: readonly string[]): Promise<PersistOutcome> {
    const run = this.#queue.then(() => this.#write(location, keys));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #write(location: AllowlistLocation, keys: readonly string[]): Promise<PersistOutcome> {
    if (this.#path === undefined) {
      const reason = 'the server runs without a config file';
      this.#logger.warn({ keys }, `permanent approval kept in memory only: ${reason}`);
      return { kind: 'memory-only', reason };
    }
    try {
      // Write through a symlink to its target, so the link stays a link.
      const file = await realpath(this.#path);
      const [text, info] = await Promise.all([readFile(file, 'utf8'), stat(file)]);
      const updated = addToAllowlistYaml(text, location, keys);
      const temp = join(dirname(file), `.${basename(file)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
      try {
        await writeFile(temp, updated, { mode: info.mode & 0o7777, flag: 'wx' });
        await rename(temp, file);
      } catch (err) {
        await unlink(temp).catch(() => undefined);
        throw err;
      }
      this.#logger.info({ keys, file }, 'permanent approval written to command_allowlist');
      return { kind: 'saved', file: this.#path };
    } catch (err) {
      const reason = `writing ${this.#path} failed: ${(err as Error).message}`;
      this.#logger.error({ err, keys }, 'permanent approval kept in memory only');
      return { kind: 'memory-only', reason };
    }
  }
}
