/** Pieces of upstream's PatchResult that both modes of the patch tool use. */
import type { JsonObject } from '../file/common.js';

const MAX_DIFF_CHARS = 50_000;

export const NOT_FOUND_HINT =
  'old_string not found. Use read_file to verify the current content, or search_files to locate the text.';

/** An upstream PatchResult failure. */
export function failure(error: string, extra: JsonObject = {}): JsonObject {
  return { success: false, ...extra, error };
}

/** Upstream's generic `_hint` on a patch failure that says "Could not find", unless it already shows candidates. */
export function withNotFoundHint(result: JsonObject): JsonObject {
  const error = typeof result.error === 'string' ? result.error : '';
  if (error.includes('Could not find') && !error.includes('Did you mean one of these sections?')) {
    result._hint = NOT_FOUND_HINT;
  }
  return result;
}

/** A diff cut at 50,000 characters, saying how much was left out. */
export function capDiff(diff: string): string {
  if (diff.length <= MAX_DIFF_CHARS) return diff;
  const omitted = diff.length - MAX_DIFF_CHARS;
  return `${diff.slice(0, MAX_DIFF_CHARS)}\n... [diff truncated: ${omitted.toLocaleString('en-US')} more chars]\n`;
}
