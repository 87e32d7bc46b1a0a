/**
 * The edit engine behind the `patch` tool, kept free of I/O so every rule can
 * be unit-tested: parse a multi-file patch (the `*** Begin Patch` format or a
 * unified diff) and apply it to file contents the caller read. The
 * single-edit `old_string`/`new_string` replacement lives in fuzzy-match.ts.
 *
 * Models write patches from memory, so matching is deliberately forgiving
 * where that cannot change the meaning (whitespace at line ends and starts,
 * wrong line numbers, stray blank lines at hunk ends) and strict where it
 * can: every hunk must be found, and one failure rejects the whole patch.
 */
import { posix } from 'node:path';
import { InvalidArgumentError } from '../../common/errors.js';
import { fuzzyFindAndReplace, isAlreadyApplied, noMatchHint, pythonRepr } from './fuzzy-match.js';

/** Raised for patch text that cannot be parsed or applied; its message is written for the model. */
export class PatchError extends InvalidArgumentError {}

/** One line of a hunk: context (` `), removed (`-`) or added (`+`), without the prefix. */
export interface HunkLine {
  readonly kind: ' ' | '-' | '+';
  readonly text: string;
}

/** A contiguous change inside one file. */
export interface PatchHunk {
  readonly lines: readonly HunkLine[];
  /**
   * Lines named after `@@` in the Begin Patch format (or the section heading
   * of a unified hunk header), found in order before the hunk to narrow
   * where it applies. A hint that is not found is ignored.
   */
  readonly contextHints: readonly string[];
  /**
   * Upstream's context hint: what `@@ hint @@` encloses on the hunk's last
   * `@@` line. It places an addition-only hunk (after the line containing
   * it, which must be unique) and names the hunk in errors.
   */
  readonly hint?: string;
  /** 1-based first old line from a unified `@@ -l,n` header; a preference, not a requirement. */
  readonly oldStart?: number;
  /** `*** End of File`: the hunk belongs at the end of the file. */
  readonly atEndOfFile: boolean;
  /** A `\ No newline at end of file` followed a removed or context line. */
  readonly oldMissingFinalNewline: boolean;
  /** A `\ No newline at end of file` followed an added or context line. */
  readonly newMissingFinalNewline: boolean;
  /** 1-based line in the patch text where the hunk starts, for error messages. */
  readonly patchLine: number;
}

/** Create a file (it must not exist). */
export interface AddFileOperation {
  readonly kind: 'add';
  readonly path: string;
  readonly content: string;
}

/** Delete a file (it must exist). */
export interface DeleteFileOperation {
  readonly kind: 'delete';
  readonly path: string;
}

/** Change a file's contents, optionally moving it. */
export interface UpdateFileOperation {
  readonly kind: 'update';
  readonly path: string;
  readonly moveTo?: string;
  readonly hunks: readonly PatchHunk[];
}

/** One file-level step of a patch. Paths are normalized with {@link normalizePatchPath}. */
export type PatchOperation = AddFileOperation | DeleteFileOperation | UpdateFileOperation;

/** Which syntax the patch text used. */
export type PatchFormat = 'begin-patch' | 'unified';

/** The result of {@link parsePatch}. */
export interface ParsedPatch {
  readonly format: PatchFormat;
  readonly operations: readonly PatchOperation[];
  /**
   * Every path as the patch's headers spell it (unquoted and trimmed, but
   * not normalized, so `a/../b` still shows its `..`), in order: both ends
   * of a move included. The caller vets each before touching any file.
   */
  readonly headerPaths: readonly string[];
}

/** The net effect of a patch on one path. */
export interface FileChange {
  readonly kind: 'create' | 'modify' | 'delete';
  readonly path: string;
  /** Content before the patch; absent for `create`. */
  readonly before?: string;
  /** Content after the patch; absent for `delete`. */
  readonly after?: string;
  /** For a `create` produced by a move (`*** Move File:` or a unified diff's rename), the path it came from. */
  readonly movedFrom?: string;
}

/** The result of {@link applyPatch}. */
export interface PatchApplication {
  /** Net changes, in the order the patch first touched each path. */
  readonly changes: readonly FileChange[];
  /** Things the model should know, e.g. hunks matched only after ignoring whitespace. */
  readonly notes: readonly string[];
}

const NO_NEWLINE_PREFIX = '\\';
/** V4A file headers; like upstream, the space after `***` is optional. */
const SINGLE_FILE_HEADER = /^\*\*\*\s*(Update|Add|Delete)\s+File:\s*(.*)$/;
const MOVE_FILE_HEADER = /^\*\*\*\s*Move\s+File:\s*(.+?)\s*->\s*(.+)$/;
const MOVE_TO_LINE = /^\*\*\*\s*Move\s+to:\s*(.*)$/;
const UNIFIED_HUNK_HEADER = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$/;

// ---------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------

/**
 * Parses patch text in either supported format, detected from its content:
 * `*** Begin Patch` / `*** Update File:` markers select the Begin Patch
 * format; `---`/`+++` header pairs select a unified diff (git's extended
 * headers, `/dev/null` sides and `rename from/to` included).
 *
 * @throws PatchError with the offending patch line when the text is malformed.
 */
export function parsePatch(text: string): ParsedPatch {
  const lines = text.replace(/\r\n/g, '\n').split('\n');
  // The newline ending the text does not start another (blank context) line.
  if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
  const isBeginPatch = lines.some((line) => {
    const trimmed = line.trim();
    return /^\*\*\*\s*Begin Patch/.test(trimmed) || SINGLE_FILE_HEADER.test(trimmed) || MOVE_FILE_HEADER.test(trimmed);
  });
  const headerPaths: string[] = [];
  let format: PatchFormat;
  let operations: PatchOperation[];
  if (isBeginPatch) {
    format = 'begin-patch';
    operations = parseBeginPatch(lines, headerPaths);
  } else if (
    lines.some((line, i) => (line.startsWith('--- ') && lines[i + 1]?.startsWith('+++ ')) || line.startsWith('diff --git '))
  ) {
    format = 'unified';
    operations = parseUnifiedDiff(lines, headerPaths);
  } else {
    throw new PatchError(
      "Unrecognized patch format. Use '*** Begin Patch' ... '*** End Patch' with '*** Update File: PATH', " +
        "'*** Add File: PATH' or '*** Delete File: PATH' sections, or a unified diff with '--- a/PATH' / '+++ b/PATH' headers.",
    );
  }
  // An empty V4A patch parses (upstream reports it when validating); an empty unified diff cannot be told from prose.
  if (operations.length === 0 && format === 'unified') throw new PatchError('The patch contains no file operations.');
  return { format, operations, headerPaths };
}

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
function headerPath(raw: string, seen: string[]): string {
  seen.push(unquotePatchPath(raw));
  return normalizePatchPath(raw);
}

/** Every path whose current content {@link applyPatch} needs (updated, deleted, created and move targets). */
export function patchPaths(operations: readonly PatchOperation[]): string[] {
  const paths = new Set<string>();
  for (const op of operations) {
    paths.add(op.path);
    if (op.kind === 'update' && op.moveTo !== undefined) paths.add(op.moveTo);
  }
  return [...paths];
}

/** Upstream's V4A markers, matched at column 0 of the (CR-stripped) line, never trimmed. */
const BEGIN_MARKER = /^\*\*\*\s*Begin\s+Patch\s*$/;
const END_MARKER = /^\*\*\*\s*End\s+Patch\s*$/;
const UPDATE_HEADER = /^\*\*\*\s*Update\s+File:\s*(.+)/;
const ADD_HEADER = /^\*\*\*\s*Add\s+File:\s*(.+)/;
const DELETE_HEADER = /^\*\*\*\s*Delete\s+File:\s*(.+)/;
const MOVE_HEADER = /^\*\*\*\s*Move\s+File:\s*(.+?)\s*->\s*(.+)/;
const END_OF_FILE_MARKER = /^\*\*\*\s*End\s+of\s+File\s*$/;
const HINT = /^@@\s*(.+?)\s*@@/;

interface OperationBuilder {
  readonly kind: 'add' | 'delete' | 'update' | 'move';
  readonly rawPath: string;
  readonly rawNewPath?: string;
  readonly hunks: PatchHunk[];
  current?: HunkBuilder;
  readonly content: string[];
}

/**
 * Upstream's V4A grammar (`parse_v4a_patch`): the text between the last
 * `*** Begin Patch` before the first `*** End Patch` (or the whole text),
 * operation headers at column 0, lines outside an operation ignored, lines
 * in an Update that carry no prefix read as context. Every problem is
 * collected and reported at once as `Parse error: a; b`.
 *
 * Berth keeps three forgiving readings of its own: a line the model left
 * empty is a blank context line (or a blank line of an added file), a code
 * fence closes the operation, and `*** End of File` marks its hunk as
 * belonging at the end of the file. It keeps one stricter one: a content
 * line of `*** Add File:` without `+`, which upstream silently drops.
 */
function parseBeginPatch(lines: readonly string[], seen: string[]): PatchOperation[] {
  let start = -1;
  let end = lines.length;
  for (const [index, line] of lines.entries()) {
    if (BEGIN_MARKER.test(line)) {
      start = index;
    } else if (END_MARKER.test(line)) {
      end = index;
      break;
    }
  }
  const builders: OperationBuilder[] = [];
  const errors: string[] = [];
  let op: OperationBuilder | undefined;
  const flushHunk = (): void => {
    if (op?.current !== undefined && op.current.lines.length > 0) op.hunks.push(finishHunk(op.current));
    if (op !== undefined) op.current = undefined;
  };
  const flush = (): void => {
    flushHunk();
    op = undefined;
  };
  for (let i = start + 1; i < end; i++) {
    const raw = lines[i] ?? '';
    const update = UPDATE_HEADER.exec(raw);
    const add = update === null ? ADD_HEADER.exec(raw) : null;
    const del = update === null && add === null ? DELETE_HEADER.exec(raw) : null;
    const move = update === null && add === null && del === null ? MOVE_HEADER.exec(raw) : null;
    if (update !== null || add !== null) {
      flush();
      op = { kind: update !== null ? 'update' : 'add', rawPath: ((update ?? add)?.[1] ?? '').trim(), hunks: [], content: [] };
      builders.push(op);
    } else if (del !== null || move !== null) {
      flush();
      builders.push(
        del !== null
          ? { kind: 'delete', rawPath: (del[1] ?? '').trim(), hunks: [], content: [] }
          : { kind: 'move', rawPath: (move?.[1] ?? '').trim(), rawNewPath: (move?.[2] ?? '').trim(), hunks: [], content: [] },
      );
    } else if (END_OF_FILE_MARKER.test(raw)) {
      if (op?.kind === 'update') {
        op.current ??= newHunk(i + 1);
        op.current.atEndOfFile = true;
      }
    } else if (MOVE_TO_LINE.test(raw) && op !== undefined) {
      const to = (MOVE_TO_LINE.exec(raw)?.[1] ?? '').trim();
      errors.push(
        `'*** Move to: ${to}' is not supported; rename with '*** Move File: ${op.rawPath} -> ${to}' ` +
          "and put any edits in their own '*** Update File:' block",
      );
    } else if (raw.startsWith('```')) {
      // A closing code fence ends the operation (models wrap patches in ``` blocks).
      flush();
    } else if (op === undefined) {
      continue;
    } else if (op.kind === 'add') {
      if (raw.startsWith('+')) {
        op.content.push(raw.slice(1));
      } else if (raw.trim() === '') {
        op.content.push('');
      } else if (!raw.startsWith('@@') && !raw.startsWith(NO_NEWLINE_PREFIX)) {
        errors.push(
          `Patch line ${i + 1}: every content line of '*** Add File: ${op.rawPath}' must start with '+', got: ${quoteLine(raw)}`,
        );
      }
    } else if (raw.startsWith('@@')) {
      // Consecutive `@@` lines stack (e.g. class, then method) before one hunk.
      if (op.current !== undefined && op.current.lines.length > 0) flushHunk();
      op.current ??= newHunk(i + 1);
      const named = HINT.exec(raw)?.[1];
      if (named !== undefined) op.current.hint = named;
      const unified = UNIFIED_HUNK_HEADER.exec(raw);
      if (unified !== null) {
        op.current.oldStart = Number(unified[1]);
        const heading = (unified[5] ?? '').trim();
        if (heading !== '') op.current.contextHints.push(heading);
      } else if ((named ?? raw.slice(2).trim()) !== '') {
        op.current.contextHints.push(named ?? raw.slice(2).trim());
      }
    } else {
      op.current ??= newHunk(i + 1);
      // A line with no hunk prefix is context, as upstream reads it.
      if (!addHunkLine(op.current, raw)) op.current.lines.push({ kind: ' ', text: raw });
    }
  }
  flush();

  const operations: PatchOperation[] = [];
  for (const builder of builders) {
    if (builder.rawPath === '') errors.push('Operation with empty file path');
    if (builder.kind === 'update' && builder.hunks.length === 0) {
      errors.push(`UPDATE ${pythonRepr(builder.rawPath)}: no hunks found`);
    }
    if (builder.kind === 'move' && builder.rawNewPath === '') {
      errors.push(`MOVE ${pythonRepr(builder.rawPath)}: missing destination path (expected 'src -> dst')`);
    }
  }
  for (const builder of builders) {
    if (builder.rawPath === '' || (builder.kind === 'move' && builder.rawNewPath === '')) continue;
    try {
      const path = headerPath(builder.rawPath, seen);
      if (builder.kind === 'add') {
        // Blank lines before the next header separate sections; they are not content.
        const content = [...builder.content];
        while (content.length > 0 && content[content.length - 1] === '') content.pop();
        operations.push({ kind: 'add', path, content: content.length > 0 ? `${content.join('\n')}\n` : '' });
      } else if (builder.kind === 'delete') {
        operations.push({ kind: 'delete', path });
      } else if (builder.kind === 'move') {
        operations.push({ kind: 'update', path, moveTo: headerPath(builder.rawNewPath ?? '', seen), hunks: [] });
      } else {
        operations.push({ kind: 'update', path, hunks: builder.hunks });
      }
    } catch (err) {
      if (!(err instanceof PatchError)) throw err;
      errors.push(err.message);
    }
  }
  if (errors.length > 0) throw new PatchError(`Parse error: ${errors.join('; ')}`);
  return operations;
}

interface PendingGitHeader {
  renameFrom?: string;
  renameTo?: string;
}

function parseUnifiedDiff(lines: readonly string[], seen: string[]): PatchOperation[] {
  const binary = lines.findIndex((line) => line.startsWith('GIT binary patch') || /^Binary files .* differ$/.test(line));
  if (binary >= 0) {
    throw new PatchError(`Patch line ${binary + 1}: binary patches are not supported; use write_file or terminal.`);
  }
  const operations: PatchOperation[] = [];
  let pending: PendingGitHeader | undefined;
  const flushPureRename = (): void => {
    if (pending?.renameFrom !== undefined && pending.renameTo !== undefined) {
      operations.push({ kind: 'update', path: pending.renameFrom, moveTo: pending.renameTo, hunks: [] });
    }
    pending = undefined;
  };
  let i = 0;
  while (i < lines.length) {
    const raw = lines[i] ?? '';
    if (raw.startsWith('diff --git ')) {
      flushPureRename();
      pending = {};
      i++;
      continue;
    }
    if (pending !== undefined && raw.startsWith('rename from ')) {
      pending.renameFrom = headerPath(raw.slice('rename from '.length), seen);
    } else if (pending !== undefined && raw.startsWith('rename to ')) {
      pending.renameTo = headerPath(raw.slice('rename to '.length), seen);
    } else if (raw.startsWith('--- ') && (lines[i + 1] ?? '').startsWith('+++ ')) {
      pending = undefined;
      const parsed = parseUnifiedFile(lines, i, seen);
      operations.push(parsed.operation);
      i = parsed.next;
      continue;
    }
    // Anything else (index lines, modes, prose between files) carries nothing to apply.
    i++;
  }
  flushPureRename();
  return operations;
}

function parseUnifiedFile(
  lines: readonly string[],
  start: number,
  seen: string[],
): { operation: PatchOperation; next: number } {
  const [oldPath, newPath] = stripGitPrefixes(
    parseDiffLabel((lines[start] ?? '').slice(4)),
    parseDiffLabel((lines[start + 1] ?? '').slice(4)),
    seen,
  );
  let i = start + 2;
  const hunks: PatchHunk[] = [];
  while (i < lines.length && (lines[i] ?? '').startsWith('@@')) {
    const header = lines[i] ?? '';
    const hunk = newHunk(i + 1);
    const match = UNIFIED_HUNK_HEADER.exec(header);
    let declaredOld: number | undefined;
    if (match !== null) {
      hunk.oldStart = Number(match[1]);
      declaredOld = match[2] === undefined ? 1 : Number(match[2]);
      const heading = (match[5] ?? '').trim();
      if (heading !== '') hunk.contextHints.push(heading);
    }
    i++;
    // Counts in headers are often wrong in hand-written diffs, so the body
    // runs until the next header; counts only decide about trailing blanks.
    while (i < lines.length) {
      const raw = lines[i] ?? '';
      const nextIsHeader = raw.startsWith('--- ') && (lines[i + 1] ?? '').startsWith('+++ ');
      if (raw.startsWith('@@') || raw.startsWith('diff --git ') || nextIsHeader) break;
      if (!addHunkLine(hunk, raw)) break;
      i++;
    }
    if (declaredOld !== undefined) {
      const oldCount = (): number => hunk.lines.filter((line) => line.kind !== '+').length;
      const lastIsBlankContext = (): boolean => {
        const last = hunk.lines[hunk.lines.length - 1];
        return last?.kind === ' ' && last.text === '';
      };
      while (oldCount() > declaredOld && lastIsBlankContext()) hunk.lines.pop();
    }
    hunks.push(finishHunk(hunk));
  }
  if (oldPath === undefined && newPath === undefined) {
    throw new PatchError(`Patch line ${start + 1}: both sides of the diff are /dev/null.`);
  }
  if (oldPath === undefined) {
    const added: string[] = [];
    let missingNewline = false;
    for (const hunk of hunks) {
      for (const line of hunk.lines) if (line.kind !== '-') added.push(line.text);
      missingNewline = hunk.newMissingFinalNewline;
    }
    while (added.length > 0 && added[added.length - 1] === '') added.pop();
    const content = added.length === 0 ? '' : added.join('\n') + (missingNewline ? '' : '\n');
    return { operation: { kind: 'add', path: newPath ?? '', content }, next: i };
  }
  if (newPath === undefined) return { operation: { kind: 'delete', path: oldPath }, next: i };
  if (hunks.length === 0 && oldPath === newPath) {
    throw new PatchError(`Patch line ${start + 1}: the diff for ${oldPath} has no '@@' hunks.`);
  }
  const operation: UpdateFileOperation = {
    kind: 'update',
    path: oldPath,
    ...(newPath !== oldPath ? { moveTo: newPath } : {}),
    hunks,
  };
  return { operation, next: i };
}

/** A `---`/`+++` label: the path before any tab-separated timestamp; undefined for /dev/null. */
function parseDiffLabel(label: string): string | undefined {
  const path = (label.split('\t')[0] ?? '').trim();
  return path === '/dev/null' ? undefined : path;
}

/** Git writes `a/` and `b/` prefixes; strip them only when both sides agree, so a real `a/` directory survives. */
function stripGitPrefixes(
  oldLabel: string | undefined,
  newLabel: string | undefined,
  seen: string[],
): [string | undefined, string | undefined] {
  const unquoted = (label: string | undefined): string | undefined =>
    label !== undefined && label.length >= 2 && label.startsWith('"') && label.endsWith('"')
      ? unquoteGitPath(label.slice(1, -1))
      : label;
  const oldRaw = unquoted(oldLabel);
  const newRaw = unquoted(newLabel);
  const strip =
    (oldRaw === undefined || oldRaw.startsWith('a/')) && (newRaw === undefined || newRaw.startsWith('b/'));
  const finish = (label: string | undefined): string | undefined =>
    label === undefined ? undefined : headerPath(strip ? label.slice(2) : label, seen);
  return [finish(oldRaw), finish(newRaw)];
}

function unquoteGitPath(quoted: string): string {
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

interface HunkBuilder {
  lines: HunkLine[];
  contextHints: string[];
  hint?: string;
  oldStart?: number;
  atEndOfFile: boolean;
  oldMissingFinalNewline: boolean;
  newMissingFinalNewline: boolean;
  patchLine: number;
}

function newHunk(patchLine: number): HunkBuilder {
  return {
    lines: [],
    contextHints: [],
    atEndOfFile: false,
    oldMissingFinalNewline: false,
    newMissingFinalNewline: false,
    patchLine,
  };
}

/** Adds one body line; false when the line is not hunk syntax. */
function addHunkLine(hunk: HunkBuilder, raw: string): boolean {
  const kind = raw[0];
  if (kind === ' ' || kind === '-' || kind === '+') {
    hunk.lines.push({ kind, text: raw.slice(1) });
    return true;
  }
  if (raw === '') {
    // Editors and models drop the lone space of blank context lines.
    hunk.lines.push({ kind: ' ', text: '' });
    return true;
  }
  if (kind === NO_NEWLINE_PREFIX) {
    const previous = hunk.lines[hunk.lines.length - 1];
    if (previous?.kind !== '+') hunk.oldMissingFinalNewline = true;
    if (previous?.kind !== '-') hunk.newMissingFinalNewline = true;
    return true;
  }
  return false;
}

function finishHunk(builder: HunkBuilder): PatchHunk {
  return {
    lines: builder.lines,
    contextHints: builder.contextHints,
    ...(builder.hint !== undefined ? { hint: builder.hint } : {}),
    ...(builder.oldStart !== undefined ? { oldStart: builder.oldStart } : {}),
    atEndOfFile: builder.atEndOfFile,
    oldMissingFinalNewline: builder.oldMissingFinalNewline,
    newMissingFinalNewline: builder.newMissingFinalNewline,
    patchLine: builder.patchLine,
  };
}

function quoteLine(line: string): string {
  return JSON.stringify(line.length > 200 ? `${line.slice(0, 200)}...` : line);
}

// ---------------------------------------------------------------------------
// Applying
// ---------------------------------------------------------------------------

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
 * (`files` maps each path of {@link patchPaths} that exists and reads as
 * text to its text; `unreadable` maps a path that exists but cannot be read
 * as text to upstream's read error; a path in neither does not exist).
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
    const fuzzy = fuzzyAroundHint(current, oldText, newText, hunk);
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
): { content: string; strategy?: string; error?: string } {
  const result = fuzzyFindAndReplace(current, oldText, newText, false, { similarity: false });
  if (result.error === undefined) return result;
  const hint = hunk.contextHints[0];
  const hintAt = hint === undefined ? -1 : current.indexOf(hint);
  if (hintAt >= 0) {
    const start = Math.max(0, hintAt - HINT_WINDOW_BEFORE);
    const end = Math.min(current.length, hintAt + HINT_WINDOW_AFTER);
    const windowed = fuzzyFindAndReplace(current.slice(start, end), oldText, newText, false, { similarity: false });
    if (windowed.error === undefined) {
      return { ...windowed, content: current.slice(0, start) + windowed.content + current.slice(end) };
    }
  }
  return result;
}

/** A file as lines, remembering what to restore when joining. */
interface LineDocument {
  readonly lines: string[];
  readonly finalNewline: boolean;
  readonly crlf: boolean;
}

function toDocument(text: string): LineDocument {
  const newlineCount = text.split('\n').length - 1;
  // Only a file that is CRLF throughout is treated as CRLF; mixed files keep
  // their `\r` as line content so nothing is silently converted.
  const crlf = newlineCount > 0 && text.split('\r\n').length - 1 === newlineCount;
  const lines = (crlf ? text.replaceAll('\r\n', '\n') : text).split('\n');
  let finalNewline = true;
  if (lines[lines.length - 1] === '') {
    lines.pop();
  } else {
    finalNewline = false;
  }
  return { lines, finalNewline, crlf };
}

function fromDocument(lines: readonly string[], finalNewline: boolean, crlf: boolean): string {
  if (lines.length === 0) return '';
  const eol = crlf ? '\r\n' : '\n';
  return lines.join(eol) + (finalNewline ? eol : '');
}

type MatchLevel = 'exact' | 'trim-end' | 'trim';

const MATCH_LEVELS: readonly MatchLevel[] = ['exact', 'trim-end', 'trim'];

function normalizeFor(level: MatchLevel, line: string): string {
  if (level === 'exact') return line;
  return level === 'trim-end' ? line.trimEnd() : line.trim();
}

interface Placement {
  readonly start: number;
  readonly oldLength: number;
  readonly newLines: readonly string[];
  readonly hunkIndex: number;
}

function applyHunks(
  text: string,
  hunks: readonly PatchHunk[],
  path: string,
): { text: string; notes: string[] } {
  const doc = toDocument(text);
  const notes: string[] = [];
  const placements: Placement[] = [];
  let finalNewline = doc.finalNewline;
  let cursor = 0;
  hunks.forEach((hunk, hunkIndex) => {
    const label = `hunk ${hunkIndex + 1} of ${path} (patch line ${hunk.patchLine})`;
    let searchFrom = cursor;
    let hintFound = false;
    for (const hint of hunk.contextHints) {
      const at = findLine(doc.lines, hint, searchFrom);
      if (at >= 0) {
        searchFrom = at + 1;
        hintFound = true;
      }
    }
    let placed: { start: number; level: MatchLevel; lines: readonly HunkLine[] } | undefined;
    for (const variant of hunkVariants(hunk.lines)) {
      const oldLines = variant.filter((line) => line.kind !== '+').map((line) => line.text);
      if (oldLines.length === 0) {
        const hinted = hunk.hint === undefined ? -1 : lineContaining(doc.lines, hunk.hint);
        const start = hinted >= 0
          ? hinted + 1
          : hunk.atEndOfFile
          ? doc.lines.length
          : hintFound
            ? searchFrom
            : hunk.oldStart !== undefined
              ? Math.min(Math.max(hunk.oldStart, 0), doc.lines.length)
              : doc.lines.length;
        placed = { start, level: 'exact', lines: variant };
        break;
      }
      const found = locate(doc.lines, oldLines, {
        from: searchFrom,
        ...(hunk.oldStart !== undefined ? { expected: hunk.oldStart - 1 } : {}),
        atEndOfFile: hunk.atEndOfFile,
      });
      if (found !== undefined) {
        placed = { start: found.start, level: found.level, lines: variant };
        break;
      }
    }
    if (placed === undefined) {
      const oldLines = hunk.lines.filter((line) => line.kind !== '+').map((line) => line.text);
      throw new PatchError(describeMissing(`Could not apply ${label}`, doc.lines, oldLines));
    }
    // Context lines keep the file's own text: after a whitespace-tolerant
    // match the patch's copy of them may differ in indentation.
    const newLines: string[] = [];
    let offset = 0;
    for (const line of placed.lines) {
      if (line.kind === ' ') {
        newLines.push(doc.lines[placed.start + offset] ?? line.text);
        offset++;
      } else if (line.kind === '-') {
        offset++;
      } else {
        newLines.push(line.text);
      }
    }
    const placement: Placement = { start: placed.start, oldLength: offset, newLines, hunkIndex };
    const overlapping = placements.find(
      (other) =>
        placement.start < other.start + other.oldLength && other.start < placement.start + placement.oldLength,
    );
    if (overlapping !== undefined) {
      throw new PatchError(
        `Could not apply ${label}: it overlaps hunk ${overlapping.hunkIndex + 1} ` +
          `(both change line ${placement.start + 1}). Merge them into one hunk.`,
      );
    }
    if (placed.level !== 'exact') {
      notes.push(`${label} matched only after ignoring whitespace differences; check indentation in the diff.`);
    }
    if (
      (hunk.oldMissingFinalNewline || hunk.newMissingFinalNewline) &&
      placement.start + placement.oldLength === doc.lines.length
    ) {
      finalNewline = !hunk.newMissingFinalNewline;
    }
    placements.push(placement);
    cursor = placement.start + placement.oldLength;
  });

  placements.sort((a, b) => a.start - b.start || a.hunkIndex - b.hunkIndex);
  const out: string[] = [];
  let next = 0;
  for (const placement of placements) {
    out.push(...doc.lines.slice(next, placement.start), ...placement.newLines);
    next = placement.start + placement.oldLength;
  }
  out.push(...doc.lines.slice(next));
  // An emptied file loses its last newline too; a file that was empty gets one.
  return { text: fromDocument(out, doc.lines.length === 0 ? true : finalNewline, doc.crlf), notes };
}

/**
 * The hunk as written, then without blank context lines at its ends: models
 * and mail clients add or drop those, and they carry no position information.
 */
function hunkVariants(lines: readonly HunkLine[]): (readonly HunkLine[])[] {
  let start = 0;
  let end = lines.length;
  const blankContext = (line: HunkLine | undefined): boolean => line?.kind === ' ' && line.text.trim() === '';
  while (start < end && blankContext(lines[start])) start++;
  while (end > start && blankContext(lines[end - 1])) end--;
  const trimmed = lines.slice(start, end);
  return trimmed.length === lines.length || trimmed.length === 0 ? [lines] : [lines, trimmed];
}

/** The line where `wanted` first occurs (it may span lines: the line it starts on), or -1. */
function lineContaining(lines: readonly string[], wanted: string): number {
  const joined = lines.join('\n');
  const at = joined.indexOf(wanted);
  if (at < 0) return -1;
  return joined.slice(0, at).split('\n').length - 1;
}

function findLine(lines: readonly string[], wanted: string, from: number): number {
  for (const level of MATCH_LEVELS) {
    const target = normalizeFor(level, wanted);
    for (let i = from; i < lines.length; i++) {
      if (normalizeFor(level, lines[i] ?? '') === target) return i;
    }
  }
  return -1;
}

/**
 * Finds `needle` in `lines`, strictest comparison first. Within a level it
 * prefers the end of the file for `*** End of File` hunks, then the position
 * nearest the unified header's line number, then the first match at or after
 * the previous hunk, then (hunks given out of order) anywhere.
 */
function locate(
  lines: readonly string[],
  needle: readonly string[],
  options: { from: number; expected?: number; atEndOfFile: boolean },
): { start: number; level: MatchLevel } | undefined {
  const last = lines.length - needle.length;
  if (last < 0) return undefined;
  for (const level of MATCH_LEVELS) {
    if (level !== 'exact' && needle.every((line) => line.trim() === '')) continue;
    const haystack = level === 'exact' ? lines : lines.map((line) => normalizeFor(level, line));
    const wanted = needle.map((line) => normalizeFor(level, line));
    const matchesAt = (start: number): boolean => wanted.every((line, j) => haystack[start + j] === line);
    if (options.atEndOfFile && matchesAt(last)) return { start: last, level };
    // Positions after the previous hunk win over earlier ones (hunks come in
    // file order); then nearness to the header's line number, else the first.
    const rank = (start: number): [number, number] => [
      start >= options.from ? 0 : 1,
      options.expected === undefined
        ? start >= options.from
          ? start
          : start + lines.length
        : Math.abs(start - options.expected),
    ];
    let best: number | undefined;
    let bestRank: [number, number] | undefined;
    for (let start = 0; start <= last; start++) {
      if (!matchesAt(start)) continue;
      const candidate = rank(start);
      if (bestRank === undefined || candidate[0] < bestRank[0] || (candidate[0] === bestRank[0] && candidate[1] < bestRank[1])) {
        best = start;
        bestRank = candidate;
      }
    }
    if (best !== undefined) return { start: best, level };
  }
  return undefined;
}

/** An error message that shows what was expected and where the file diverges from it. */
function describeMissing(
  prefix: string,
  lines: readonly string[],
  needle: readonly string[],
  advice = 'Re-read the file with read_file and copy the context and removed lines exactly.',
): string {
  const shown = needle.slice(0, 12).map((line) => `  |${line}`);
  if (needle.length > shown.length) shown.push(`  ... (${needle.length - shown.length} more lines)`);
  let message = `${prefix}: these lines were not found in the file:\n${shown.join('\n')}`;
  const divergence = closestPartialMatch(lines, needle);
  if (divergence !== undefined) {
    message +=
      `\nClosest match starts at line ${divergence.start + 1}; the first difference is at line ${divergence.line + 1}: ` +
      `expected ${quoteLine(divergence.expected)} but the file has ${quoteLine(divergence.actual)}.`;
  }
  return `${message}\n${advice}`;
}

function closestPartialMatch(
  lines: readonly string[],
  needle: readonly string[],
): { start: number; line: number; expected: string; actual: string } | undefined {
  const anchor = needle.findIndex((line) => line.trim() !== '');
  if (anchor < 0) return undefined;
  const anchorText = (needle[anchor] ?? '').trim();
  let best: { start: number; matched: number } | undefined;
  let candidates = 0;
  for (let i = 0; i < lines.length && candidates < 200; i++) {
    if ((lines[i] ?? '').trim() !== anchorText) continue;
    candidates++;
    const start = i - anchor;
    if (start < 0) continue;
    let matched = 0;
    while (matched < needle.length && (lines[start + matched] ?? '').trim() === (needle[matched] ?? '').trim()) {
      matched++;
    }
    if (best === undefined || matched > best.matched) best = { start, matched };
  }
  if (best === undefined || best.matched >= needle.length) return undefined;
  const line = best.start + best.matched;
  return {
    start: best.start,
    line,
    expected: needle[best.matched] ?? '',
    actual: line < lines.length ? (lines[line] ?? '') : '<end of file>',
  };
}
