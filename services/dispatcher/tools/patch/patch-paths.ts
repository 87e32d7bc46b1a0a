/** Paths as patch headers name them: unquoted, normalised, and the set a patch touches. */
import { posix } from 'node:path';
import { PatchError, type PatchOperation } from './patch-types.js';

/**
 * Canonical form of a path named in a patch, so `./src/x.ts` and `src/x.ts`
 * are one file. Git's C-style quoted paths (`"a/sp\303\244ce"`) are unquoted.
 *
 * @throws PatchError for an empty path.
 */
export function normalizePatchPath(raw: string): string {
  const path = unquotePatchPath(raw);
  if (path === '') throw new PatchError('A file path in the patch is empty.');
  const normalized = posix.normalize(path);
  if (normalized === '.' || normalized.endsWith('/')) throw new PatchError(`Not a file path: ${raw.trim()}`);
  return normalized;
}

function unquotePatchPath(raw: string): string {
  const path = raw.trim();
  return path.length >= 2 && path.startsWith('"') && path.endsWith('"') ? unquoteGitPath(path.slice(1, -1)) : path;
}

/** {@link normalizePatchPath}, recording the path as written in `seen`. */
export function headerPath(raw: string, seen: string[]): string {
  seen.push(unquotePatchPath(raw));
  return normalizePatchPath(raw);
}

/** Every path whose current content `applyPatch` (apply-patch.ts) needs (updated, deleted, created and move targets). */
export function patchPaths(operations: readonly PatchOperation[]): string[] {
  const paths = new Set<string>();
  for (const op of operations) {
    paths.add(op.path);
    if (op.kind === 'update' && op.moveTo !== undefined) paths.add(op.moveTo);
  }
  return [...paths];
}

/** Git's C-style quoted path body (octal bytes, `\n`, `\"`), decoded as UTF-8. */
export function unquoteGitPath(quoted: string): string {
  const escapes: Record<string, number> = { n: 10, t: 9, r: 13, '"': 34, '\\': 92, a: 7, b: 8, f: 12, v: 11 };
  const bytes: number[] = [];
  // Git escapes non-ASCII bytes one by one as octal, so decode to bytes first.
  for (const token of quoted.matchAll(/\\([0-7]{3}|.)|([^\\]+)/gsu)) {
    const [, escaped, plain] = token;
    if (plain !== undefined) {
      bytes.push(...Buffer.from(plain, 'utf8'));
    } else if (escaped !== undefined && /^[0-7]{3}$/.test(escaped)) {
      bytes.push(parseInt(escaped, 8));
    } else if (escaped !== undefined) {
      const code = escapes[escaped];
      bytes.push(...(code !== undefined ? [code] : Buffer.from(escaped, 'utf8')));
    }
  }
  return Buffer.from(bytes).toString('utf8');
}
