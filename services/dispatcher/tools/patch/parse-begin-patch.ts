/** The `*** Begin Patch` (V4A) syntax, read as upstream reads it. */
import { pythonRepr } from './python-repr.js';
import { addHunkLine, finishHunk, newHunk, NO_NEWLINE_PREFIX, UNIFIED_HUNK_HEADER, type HunkBuilder } from './hunk-builder.js';
import { headerPath } from './patch-paths.js';
import { PatchError, quoteLine, type PatchHunk, type PatchOperation } from './patch-types.js';

const MOVE_TO_LINE = /^\*\*\*\s*Move\s+to:\s*(.*)$/;
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
export function parseBeginPatch(lines: readonly string[], seen: string[]): PatchOperation[] {
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
