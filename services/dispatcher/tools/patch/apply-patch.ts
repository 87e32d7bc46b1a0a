/**
 * Applies parsed patch operations to the contents of the files they name,
 * in memory, with upstream's validation texts: the caller writes only when
 * every operation and hunk applied.
 */
import { applyHunks, toDocument } from './apply-hunks.js';
import { fuzzyFindAndReplace, isAlreadyApplied } from './fuzzy-match.js';
import { noMatchHint } from './match-messages.js';
import { PatchError, type FileChange, type PatchApplication, type PatchHunk, type PatchOperation } from './patch-types.js';

/** Upstream's bullet list: each error on its own line after two spaces and a bullet. */
export function bulletList(errors: readonly string[]): string {
  return errors.map((error) => `  \u2022 ${error}`).join('\n');
}

/** Upstream's validation failure: nothing was written. */
export function validationFailure(errors: readonly string[]): string {
  return `Patch validation failed (no files were modified):\n${bulletList(errors)}`;
}

/**
 * Applies parsed operations to the current contents of the files they name
 * (`files` maps each path of `patchPaths` (patch-paths.ts) that exists and
 * reads as text to its text; `unreadable` maps a path that exists but cannot
 * be read as text to upstream's read error; a path in neither does not
 * exist).
 * Operations apply in order to an in-memory view, so a patch may touch one
 * file twice and later operations see earlier ones (upstream's overlay).
 *
 * This is upstream's validation pass (`_validate_operations`), with its
 * texts: every operation and hunk is checked, and any failure throws one
 * PatchError, `Patch validation failed (no files were modified):` and a
 * bullet per problem, so the caller writes nothing. Hunks already applied
 * and hunks of context only are no-ops.
 */
export function applyPatch(
  operations: readonly PatchOperation[],
  files: ReadonlyMap<string, string>,
  unreadable: ReadonlyMap<string, string> = new Map(),
): PatchApplication {
  const state = new Map<string, string | null>();
  const touched: string[] = [];
  const movedFrom = new Map<string, string>();
  const errors: string[] = [];
  const notes: string[] = [];
  let realChanges = 0;
  const read = (path: string): { text: string } | { error: string } => {
    if (state.has(path)) {
      const text = state.get(path);
      return text === null || text === undefined ? { error: 'file not found' } : { text };
    }
    const unread = unreadable.get(path);
    if (unread !== undefined) return { error: unread };
    const text = files.get(path);
    return text === undefined ? { error: `File not found: ${path}` } : { text };
  };
  /** Why an Add target or a move destination is not free; undefined when it is. */
  const occupied = (path: string): string | undefined => {
    if (state.has(path)) return state.get(path) === null ? undefined : 'exists';
    if (files.has(path)) return 'exists';
    const unread = unreadable.get(path);
    return unread === undefined ? undefined : `could not confirm the path is free \u2014 ${unread}`;
  };
  const touch = (path: string): void => {
    if (!touched.includes(path)) touched.push(path);
  };

  for (const op of operations) {
    touch(op.path);
    if (op.kind === 'add') {
      realChanges++;
      const taken = occupied(op.path);
      if (taken === 'exists') {
        errors.push(`${op.path}: file already exists \u2014 use Update File, not Add File`);
      } else if (taken !== undefined) {
        errors.push(`${op.path}: ${taken}`);
      } else {
        state.set(op.path, op.content);
      }
      continue;
    }
    if (op.kind === 'delete') {
      realChanges++;
      if ('error' in read(op.path)) {
        errors.push(`${op.path}: file not found for deletion`);
      } else {
        state.set(op.path, null);
      }
      continue;
    }
    const source = read(op.path);
    let text: string | undefined = 'text' in source ? source.text : undefined;
    if (op.hunks.length > 0) {
      if (!('text' in source)) {
        errors.push(`${op.path}: ${source.error}`);
        continue;
      }
      const updated = validateUpdate(op.path, source.text, op.hunks, errors, notes);
      realChanges += updated.realChanges;
      if (updated.failed) continue;
      text = updated.text;
    }
    if (op.moveTo === undefined) {
      if (text !== undefined) state.set(op.path, text);
      continue;
    }
    if (op.hunks.length === 0) realChanges++;
    if (text === undefined) errors.push(`${op.path}: source file not found for move`);
    touch(op.moveTo);
    const taken = occupied(op.moveTo);
    if (taken === 'exists') {
      errors.push(`${op.moveTo}: destination already exists \u2014 move would overwrite`);
    } else if (taken !== undefined) {
      errors.push(`${op.moveTo}: ${taken}`);
    } else if (text !== undefined) {
      state.set(op.path, null);
      state.set(op.moveTo, text);
      movedFrom.set(op.moveTo, movedFrom.get(op.path) ?? op.path);
    }
  }
  if (errors.length === 0 && realChanges === 0) errors.push('Patch contains no changes (only context lines were provided)');
  if (errors.length > 0) throw new PatchError(validationFailure(errors));

  const changes: FileChange[] = [];
  for (const path of touched) {
    const before = files.get(path);
    const after = state.has(path) ? (state.get(path) ?? undefined) : before;
    if (before === undefined && after !== undefined) {
      const source = movedFrom.get(path);
      const isMove = source !== undefined && files.has(source) && state.get(source) === null;
      changes.push({ kind: 'create', path, after, ...(isMove ? { movedFrom: source } : {}) });
    } else if (before !== undefined && after === undefined) {
      changes.push({ kind: 'delete', path, before });
    } else if (before !== undefined && after !== undefined && before !== after) {
      changes.push({ kind: 'modify', path, before, after });
    }
  }
  return { changes, notes };
}

/** Occurrences of `pattern` in `text`, overlapping ones included (upstream `_count_occurrences`). */
function countOccurrences(text: string, pattern: string): number {
  let count = 0;
  for (let at = text.indexOf(pattern); at !== -1; at = text.indexOf(pattern, at + 1)) count++;
  return count;
}

function sameLines(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((line, i) => line === b[i]);
}

/**
 * One Update's hunks against `text`, upstream's checks and texts: context-only
 * hunks are inert, an addition-only hunk's hint must be in the file once, and
 * a hunk found nowhere that is not already applied is an error. Placement is
 * Berth's: the line matcher for all hunks at once, then hunk by hunk with the
 * fuzzy strategies (no similarity ones) as the fallback.
 */
function validateUpdate(
  path: string,
  text: string,
  hunks: readonly PatchHunk[],
  errors: string[],
  notes: string[],
): { text: string; realChanges: number; failed: boolean } {
  let realChanges = 0;
  const errorCount = errors.length;
  const effective: { hunk: PatchHunk; index: number }[] = [];
  for (const [index, hunk] of hunks.entries()) {
    const search = hunk.lines.filter((line) => line.kind !== '+').map((line) => line.text);
    const replace = hunk.lines.filter((line) => line.kind !== '-').map((line) => line.text);
    // A hunk that only adds or drops the final newline (unified diffs) changes the file.
    if (sameLines(search, replace) && hunk.oldMissingFinalNewline === hunk.newMissingFinalNewline) {
      // Context-only anchors are inert; identical -/+ lines are a no-op that still counts as a change.
      if (hunk.lines.some((line) => line.kind !== ' ')) realChanges++;
      continue;
    }
    realChanges++;
    if (search.length === 0 && hunk.hint !== undefined) {
      const occurrences = countOccurrences(text, hunk.hint);
      if (occurrences === 0) {
        errors.push(`${path}: addition-only hunk context hint '${hunk.hint}' not found`);
        continue;
      }
      if (occurrences > 1) {
        errors.push(`${path}: addition-only hunk context hint '${hunk.hint}' is ambiguous (${occurrences} occurrences)`);
        continue;
      }
    }
    effective.push({ hunk, index });
  }
  if (errors.length > errorCount) return { text, realChanges, failed: true };
  if (effective.length === 0) return { text, realChanges, failed: false };
  try {
    const applied = applyHunks(
      text,
      effective.map(({ hunk }) => hunk),
      path,
    );
    notes.push(...applied.notes);
    return { text: applied.text, realChanges, failed: false };
  } catch (err) {
    if (!(err instanceof PatchError)) throw err;
  }
  const crlf = toDocument(text).crlf;
  let current = crlf ? text.replaceAll('\r\n', '\n') : text;
  for (const { hunk, index } of effective) {
    const label = `hunk ${index + 1} of ${path} (patch line ${hunk.patchLine})`;
    try {
      const applied = applyHunks(current, [hunk], path);
      current = applied.text;
      notes.push(...applied.notes.map((note) => note.replace(/^hunk 1 of /, `hunk ${index + 1} of `)));
      continue;
    } catch (err) {
      if (!(err instanceof PatchError)) throw err;
    }
    const oldText = hunk.lines.filter((line) => line.kind !== '+').map((line) => line.text).join('\n');
    const newText = hunk.lines.filter((line) => line.kind !== '-').map((line) => line.text).join('\n');
    // In a CRLF file a multi-line hunk is never an exact match upstream, so the indentation guards run (replace mode).
    const fuzzy = fuzzyAroundHint(current, oldText, newText, hunk, crlf && oldText.includes('\n'));
    if (fuzzy.error === undefined) {
      notes.push(`${label} was placed by the '${fuzzy.strategy ?? 'exact'}' fuzzy strategy; check the diff.`);
      current = fuzzy.content;
      continue;
    }
    // Re-sent hunks whose edit is already in the file are no-ops, as upstream.
    if (isAlreadyApplied(current, oldText, newText)) continue;
    const named = hunk.hint !== undefined ? `'${hunk.hint}'` : '(no hint)';
    errors.push(`${path}: hunk ${index + 1} ${named} not found \u2014 ${fuzzy.error}${noMatchHint(fuzzy.error, oldText, current)}`);
  }
  if (errors.length > errorCount) return { text, realChanges, failed: true };
  return { text: crlf ? current.replaceAll('\n', '\r\n') : current, realChanges, failed: false };
}

/** Characters around an `@@` hint searched when a hunk is ambiguous in the whole file (upstream's window). */
const HINT_WINDOW_BEFORE = 500;
const HINT_WINDOW_AFTER = 2000;

/**
 * Upstream's way of applying a V4A hunk: an old_string → new_string
 * replacement through the fuzzy strategies, retried near its `@@` hint when
 * the whole file gives no unique match. The error, when there is one, is the
 * whole-file attempt's.
 *
 * Unlike upstream, the similarity strategies are left out: a hunk whose
 * removed lines only resemble the file (`return 42` against `return 100`)
 * is reported, not applied to the look-alike.
 */
function fuzzyAroundHint(
  current: string,
  oldText: string,
  newText: string,
  hunk: PatchHunk,
  guardsOnExact: boolean,
): { content: string; strategy?: string; error?: string } {
  const options = { similarity: false, guardsOnExact };
  const result = fuzzyFindAndReplace(current, oldText, newText, false, options);
  if (result.error === undefined) return result;
  const hint = hunk.contextHints[0];
  const hintAt = hint === undefined ? -1 : current.indexOf(hint);
  if (hintAt >= 0) {
    const start = Math.max(0, hintAt - HINT_WINDOW_BEFORE);
    const end = Math.min(current.length, hintAt + HINT_WINDOW_AFTER);
    const windowed = fuzzyFindAndReplace(current.slice(start, end), oldText, newText, false, options);
    if (windowed.error === undefined) {
      return { ...windowed, content: current.slice(0, start) + windowed.content + current.slice(end) };
    }
  }
  return result;
}
