/**
 * The `file` toolset: read_file, write_file, patch and search_files.
 *
 * They run on the dispatcher and act only through the task's
 * {@link TaskClient} (read, write, stat, and stateless `exec` for search and
 * delete), so they behave the same on every executor backend. Edit logic is
 * pure and lives in patch-parser.ts / unified-diff.ts; this file does the
 * I/O, argument handling and result shapes.
 *
 * Results are JSON strings. Problems the model can fix (bad arguments,
 * missing files, patches that do not apply) come back as `{"error": ...}`;
 * failures of the environment itself (executor unreachable) are thrown, so
 * the registry reports them as tool errors.
 */
import { posix } from 'node:path';
import { randomBytes } from 'node:crypto';
import { BerthError, NotFoundError } from '../../common/errors.js';
import type { TaskClient, TaskExecResult } from '../../common/task-client.js';
import type { ToolArgs, ToolContext, ToolHandler, ToolRegistration } from '../tool-types.js';
import {
  PatchError,
  applyPatch,
  parsePatch,
  patchPaths,
  replaceText,
  type FileChange,
} from './patch-parser.js';
import { shellQuote } from './shell-quote.js';
import { unifiedDiff } from './unified-diff.js';

/** Which search program search_files runs in the task's environment. */
export type SearchEngine = 'auto' | 'rg' | 'grep';

/** Options of {@link fileToolRegistrations}. */
export interface FileToolOptions {
  /**
   * `auto` (default) uses ripgrep when `command -v rg` finds it and GNU-style
   * grep/find otherwise; `rg` and `grep` force one (tests use `grep` to cover
   * the fallback on machines that have ripgrep).
   */
  readonly searchEngine?: SearchEngine;
}

const TOOLSET = 'file';

const READ_DEFAULT_LIMIT = 500;
const READ_MAX_LIMIT = 2000;
const READ_MAX_LINE_CHARS = 2000;
/**
 * Characters of numbered content per read_file page. Stays under the
 * registry's default 100,000-character result cap so a page of long lines
 * ends early with a hint instead of being cut mid-JSON.
 */
const READ_MAX_CONTENT_CHARS = 90_000;
/** Bytes inspected for NUL when deciding a file is binary (git and grep use the same idea). */
const BINARY_SNIFF_BYTES = 8192;

const SEARCH_DEFAULT_LIMIT = 50;
const SEARCH_MAX_LIMIT = 1000;
const SEARCH_MAX_CONTEXT = 10;
const SEARCH_MAX_LINE_CHARS = 500;
/** Raw search output kept from the environment; more makes total_count a lower bound. */
const SEARCH_OUTPUT_CAP_BYTES = 2_000_000;
const SEARCH_TIMEOUT_MS = 60_000;
const SEARCH_EXCLUDED_DIRS = ['.git', 'node_modules'] as const;

const HELPER_TIMEOUT_MS = 30_000;
/** Diff text in patch results; larger diffs are cut so the JSON result stays whole. */
const MAX_DIFF_CHARS = 50_000;

/**
 * The four file tools as registrations for the `file` toolset, ready for
 * `ToolRegistry.register`. Returned as data so the registry and its callers
 * decide when to register.
 */
export function fileToolRegistrations(options: FileToolOptions = {}): ToolRegistration[] {
  const searchEngine = options.searchEngine ?? 'auto';
  return [
    {
      name: 'read_file',
      toolset: TOOLSET,
      emoji: '📖',
      schema: {
        name: 'read_file',
        description:
          'Read a text file from the task environment. Returns its lines numbered as "LINE_NUM|CONTENT" ' +
          `(500 lines per call by default), plus total_lines and file_size. When more lines remain, ` +
          'truncated is true and hint says which offset to use next. Binary files are refused. ' +
          'Use this instead of cat/head/tail in the terminal.',
        parameters: {
          type: 'object',
          properties: {
            path: {
              type: 'string',
              description: 'File to read: absolute, relative to the current working directory, or starting with ~.',
            },
            offset: {
              type: 'integer',
              description: 'Line number to start reading from (1 = first line). Default 1.',
              minimum: 1,
              default: 1,
            },
            limit: {
              type: 'integer',
              description: `How many lines to return, at most ${READ_MAX_LIMIT}. Default ${READ_DEFAULT_LIMIT}.`,
              minimum: 1,
              maximum: READ_MAX_LIMIT,
              default: READ_DEFAULT_LIMIT,
            },
          },
          required: ['path'],
        },
      },
      handler: guarded(readFileTool),
    },
    {
      name: 'write_file',
      toolset: TOOLSET,
      emoji: '✍️',
      schema: {
        name: 'write_file',
        description:
          'Create a file or replace its entire content, creating missing parent directories. ' +
          'To change part of an existing file use patch instead.',
        parameters: {
          type: 'object',
          properties: {
            path: {
              type: 'string',
              description: 'File to write: absolute, relative to the current working directory, or starting with ~.',
            },
            content: {
              type: 'string',
              description: 'The complete new content of the file (UTF-8 text). Replaces whatever was there.',
            },
          },
          required: ['path', 'content'],
        },
      },
      handler: guarded(writeFileTool),
    },
    {
      name: 'patch',
      toolset: TOOLSET,
      emoji: '🩹',
      schema: {
        name: 'patch',
        description:
          'Edit files. mode="replace" (default) swaps old_string for new_string in one file; old_string must ' +
          'match exactly one place unless replace_all is true (whitespace-only differences are tolerated and ' +
          'reported). mode="patch" applies a multi-file patch: "*** Begin Patch", then sections ' +
          '"*** Update File: PATH" (optionally "*** Move to: NEW_PATH") with "@@ context" lines and hunk lines ' +
          'starting with " " (keep), "-" (remove) or "+" (add); "*** Add File: PATH" with every line prefixed "+"; ' +
          '"*** Delete File: PATH"; then "*** End Patch". A unified diff (--- a/PATH, +++ b/PATH, @@ hunks) is ' +
          'also accepted. Either every hunk applies or nothing is written. Returns the unified diff of the change.',
        parameters: {
          type: 'object',
          properties: {
            mode: {
              type: 'string',
              enum: ['replace', 'patch'],
              description: '"replace" for one old_string/new_string edit, "patch" for a multi-file patch. Default "replace".',
              default: 'replace',
            },
            path: { type: 'string', description: 'replace mode: the file to edit.' },
            old_string: {
              type: 'string',
              description:
                'replace mode: the exact text to find, including indentation. Include enough surrounding lines to make it unique.',
            },
            new_string: {
              type: 'string',
              description: 'replace mode: the text to put in its place (may be empty to delete old_string).',
            },
            replace_all: {
              type: 'boolean',
              description: 'replace mode: replace every occurrence instead of requiring exactly one. Default false.',
              default: false,
            },
            patch: {
              type: 'string',
              description: 'patch mode: the full patch text (Begin Patch format or unified diff).',
            },
          },
          required: [],
        },
      },
      handler: guarded(patchTool),
    },
    {
      name: 'search_files',
      toolset: TOOLSET,
      emoji: '🔎',
      schema: {
        name: 'search_files',
        description:
          'Search the task environment. target="content" (default) finds lines matching a regular expression ' +
          '(ripgrep syntax) in files under path; target="files" finds files whose name matches a glob such as ' +
          '"*.py" (newest first). .git and node_modules are skipped. Use this instead of grep/find in the terminal.',
        parameters: {
          type: 'object',
          properties: {
            pattern: {
              type: 'string',
              description:
                'target="content": regular expression to look for in file contents. target="files": file-name glob ' +
                '(e.g. "*.ts", "test_*"); text without wildcards matches names containing it.',
            },
            target: {
              type: 'string',
              enum: ['content', 'files'],
              description: 'Search file contents ("content") or file names ("files"). Default "content".',
              default: 'content',
            },
            path: {
              type: 'string',
              description: 'Directory (or single file) to search. Default "." (the current working directory).',
              default: '.',
            },
            file_glob: {
              type: 'string',
              description: 'target="content" only: search just files whose name matches this glob, e.g. "*.py".',
            },
            limit: {
              type: 'integer',
              description: `Maximum results to return, 1-${SEARCH_MAX_LIMIT}. Default ${SEARCH_DEFAULT_LIMIT}.`,
              minimum: 1,
              maximum: SEARCH_MAX_LIMIT,
              default: SEARCH_DEFAULT_LIMIT,
            },
            offset: {
              type: 'integer',
              description: 'Results to skip, for paging through many results. Default 0.',
              minimum: 0,
              default: 0,
            },
            output_mode: {
              type: 'string',
              enum: ['content', 'files_only', 'count'],
              description:
                'target="content" only: "content" lists matching lines, "files_only" lists matching files, ' +
                '"count" gives matching lines per file. Default "content".',
              default: 'content',
            },
            context: {
              type: 'integer',
              description: `Lines of context to include before and after each match (0-${SEARCH_MAX_CONTEXT}). Default 0.`,
              minimum: 0,
              maximum: SEARCH_MAX_CONTEXT,
              default: 0,
            },
          },
          required: ['pattern'],
        },
      },
      handler: guarded((args, context) => searchFilesTool(args, context, searchEngine)),
    },
  ];
}

// ---------------------------------------------------------------------------
// Results and arguments
// ---------------------------------------------------------------------------

type JsonObject = Record<string, unknown>;

/** A problem the model caused and can fix; becomes `{"error": message, ...extra}`. */
class ToolInputError extends Error {
  readonly extra: JsonObject;
  constructor(message: string, extra: JsonObject = {}) {
    super(message);
    this.name = 'ToolInputError';
    this.extra = extra;
  }
}

function guarded(run: (args: ToolArgs, context: ToolContext) => Promise<JsonObject>): ToolHandler {
  return async (args, context) => {
    try {
      return JSON.stringify(await run(args, context));
    } catch (err) {
      if (err instanceof ToolInputError) return JSON.stringify({ error: err.message, ...err.extra });
      if (err instanceof PatchError) return JSON.stringify({ error: err.message });
      // The environment refused the path itself (a device, FIFO or socket, a file over the read cap, a directory):
      // the model can act on that, so it reads the reason as the tool's error.
      if (err instanceof BerthError && err.code === 'INVALID_ARGUMENT') return JSON.stringify({ error: err.message });
      throw err;
    }
  };
}

function stringArg(args: ToolArgs, name: string, required: true): string;
function stringArg(args: ToolArgs, name: string, required: false): string | undefined;
function stringArg(args: ToolArgs, name: string, required: boolean): string | undefined {
  const value = args[name];
  if (value === undefined || value === null) {
    if (required) throw new ToolInputError(`Missing required parameter: ${name}`);
    return undefined;
  }
  if (typeof value !== 'string') throw new ToolInputError(`Parameter ${name} must be a string`);
  return value;
}

function nonEmptyStringArg(args: ToolArgs, name: string): string {
  const value = stringArg(args, name, true);
  if (value.trim() === '') throw new ToolInputError(`Parameter ${name} must not be empty`);
  return value;
}

/** Integer argument with a default; out-of-range values are clamped rather than refused. */
function intArg(args: ToolArgs, name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const value = args[name];
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new ToolInputError(`Parameter ${name} must be an integer`);
  return Math.min(max, Math.max(min, Math.floor(value)));
}

function boolArg(args: ToolArgs, name: string, fallback: boolean): boolean {
  const value = args[name];
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'boolean') throw new ToolInputError(`Parameter ${name} must be true or false`);
  return value;
}

function enumArg<T extends string>(args: ToolArgs, name: string, allowed: readonly T[], fallback: T): T {
  const value = args[name];
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw new ToolInputError(`Parameter ${name} must be one of: ${allowed.join(', ')}`);
  }
  return value as T;
}

function formatSize(bytes: number): string {
  if (bytes < 1024) return `${bytes} bytes`;
  const units = ['KB', 'MB', 'GB', 'TB'];
  let size = bytes / 1024;
  let unit = 0;
  while (size >= 1024 && unit < units.length - 1) {
    size /= 1024;
    unit++;
  }
  return `${size.toFixed(1)} ${units[unit]} (${bytes.toLocaleString('en-US')} bytes)`;
}

function isBinary(content: Buffer): boolean {
  return content.subarray(0, BINARY_SNIFF_BYTES).includes(0);
}

async function readIfExists(task: TaskClient, path: string): Promise<{ absPath: string; content: Buffer } | undefined> {
  try {
    return await task.readFile(path);
  } catch (err) {
    if (err instanceof NotFoundError) return undefined;
    throw err;
  }
}

// ---------------------------------------------------------------------------
// read_file
// ---------------------------------------------------------------------------

async function readFileTool(args: ToolArgs, context: ToolContext): Promise<JsonObject> {
  const path = nonEmptyStringArg(args, 'path');
  const offset = intArg(args, 'offset', 1, 1);
  const limit = intArg(args, 'limit', READ_DEFAULT_LIMIT, 1, READ_MAX_LIMIT);
  const { task } = context;

  const stat = await task.stat(path);
  if (stat.isDirectory) {
    throw new ToolInputError(
      `${path} is a directory, not a file. Use search_files with target="files" and path="${path}" to list its files.`,
    );
  }
  const file = stat.exists ? await readIfExists(task, path) : undefined;
  if (file === undefined) throw await fileNotFound(path, stat.absPath, context);

  const fileSize = file.content.length;
  if (isBinary(file.content)) {
    throw new ToolInputError(
      `${path} is a binary file (${formatSize(fileSize)}); read_file only shows text. ` +
        'Inspect it with the terminal instead (e.g. file, xxd | head).',
      { file_size: fileSize },
    );
  }

  const lines = file.content.toString('utf8').split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  const totalLines = lines.length;
  if (totalLines === 0) {
    return { path: file.absPath, content: '', total_lines: 0, file_size: fileSize, truncated: false };
  }
  if (offset > totalLines) {
    throw new ToolInputError(
      `offset ${offset} is past the end of ${path}, which has ${totalLines} line${totalLines === 1 ? '' : 's'}. ` +
        `Use an offset from 1 to ${totalLines}.`,
      { total_lines: totalLines, file_size: fileSize },
    );
  }

  const numbered: string[] = [];
  let chars = 0;
  let lineNumber = offset;
  const lastWanted = Math.min(totalLines, offset + limit - 1);
  for (; lineNumber <= lastWanted; lineNumber++) {
    let text = lines[lineNumber - 1] ?? '';
    if (text.endsWith('\r')) text = text.slice(0, -1);
    if (text.length > READ_MAX_LINE_CHARS) {
      text = `${text.slice(0, READ_MAX_LINE_CHARS)}... [line truncated: ${text.length.toLocaleString('en-US')} chars]`;
    }
    const entry = `${String(lineNumber).padStart(6)}|${text}`;
    // Always return at least one line, whatever its size, so paging progresses.
    if (numbered.length > 0 && chars + entry.length + 1 > READ_MAX_CONTENT_CHARS) break;
    numbered.push(entry);
    chars += entry.length + 1;
  }
  const lastShown = lineNumber - 1;
  const result: JsonObject = {
    path: file.absPath,
    content: numbered.join('\n'),
    total_lines: totalLines,
    file_size: fileSize,
    truncated: lastShown < totalLines,
  };
  if (lastShown < totalLines) {
    result.hint =
      `Showing lines ${offset}-${lastShown} of ${totalLines}. ` +
      `To continue, call read_file with offset=${lastShown + 1}` +
      (lastShown < lastWanted
        ? ' (this page was shortened because its lines are long).'
        : ` (and limit up to ${READ_MAX_LIMIT}).`);
  }
  return result;
}

/** `File not found` plus, when a directory listing is cheap, names that look like what was meant. */
async function fileNotFound(path: string, absPath: string, context: ToolContext): Promise<ToolInputError> {
  const suggestions = await similarFiles(path, absPath, context).catch(() => []);
  return new ToolInputError(`File not found: ${path}`, suggestions.length > 0 ? { similar_files: suggestions } : {});
}

async function similarFiles(path: string, absPath: string, context: ToolContext): Promise<string[]> {
  const listing = await context.task.exec({
    command: `ls -1Ap -- ${shellQuote(posix.dirname(absPath))} 2>/dev/null | head -n 5000`,
    stateless: true,
    timeoutMs: HELPER_TIMEOUT_MS,
    maxOutputChars: 500_000,
    signal: context.signal,
  });
  if (listing.exitCode !== 0) return [];
  const wanted = posix.basename(absPath).toLowerCase();
  const wantedStem = stem(wanted);
  const scored: { name: string; score: number }[] = [];
  for (const name of listing.output.split('\n')) {
    if (name === '' || name.endsWith('/')) continue;
    const candidate = name.toLowerCase();
    let score: number | undefined;
    if (candidate === wanted) score = 0;
    else if (stem(candidate) === wantedStem) score = 1;
    else {
      const distance = editDistance(candidate, wanted, 3);
      if (distance <= Math.max(1, Math.min(3, Math.floor(wanted.length / 4)))) score = 1 + distance;
      else if (wanted.length >= 3 && (candidate.includes(wanted) || wanted.includes(candidate))) score = 5;
    }
    if (score !== undefined) scored.push({ name, score });
  }
  const directory = posix.dirname(path);
  return scored
    .sort((a, b) => a.score - b.score || a.name.localeCompare(b.name))
    .slice(0, 5)
    .map(({ name }) => (directory === '.' ? name : posix.join(directory, name)));
}

function stem(name: string): string {
  const dot = name.lastIndexOf('.');
  return dot > 0 ? name.slice(0, dot) : name;
}

/** Levenshtein distance, giving up (returning `cap + 1`) once it must exceed `cap`. */
function editDistance(a: string, b: string, cap: number): number {
  if (Math.abs(a.length - b.length) > cap) return cap + 1;
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      const value = Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, (previous[j - 1] ?? 0) + cost);
      current.push(value);
      rowMin = Math.min(rowMin, value);
    }
    if (rowMin > cap) return cap + 1;
    previous = current;
  }
  return previous[b.length] ?? cap + 1;
}

// ---------------------------------------------------------------------------
// write_file
// ---------------------------------------------------------------------------

async function writeFileTool(args: ToolArgs, context: ToolContext): Promise<JsonObject> {
  const path = nonEmptyStringArg(args, 'path');
  const content = stringArg(args, 'content', true);
  const stat = await context.task.stat(path);
  if (stat.isDirectory) throw new ToolInputError(`${path} is a directory; give a file path to write.`);
  const written = await context.task.writeFile(path, content);
  return { path: written.absPath, bytes_written: written.bytesWritten, dirs_created: written.dirsCreated };
}

// ---------------------------------------------------------------------------
// patch
// ---------------------------------------------------------------------------

async function patchTool(args: ToolArgs, context: ToolContext): Promise<JsonObject> {
  // A patch text sent without mode and without replace arguments can only mean patch mode.
  const impliedMode =
    args.mode === undefined && typeof args.patch === 'string' && args.old_string === undefined ? 'patch' : 'replace';
  const mode = enumArg(args, 'mode', ['replace', 'patch'] as const, impliedMode);
  return mode === 'replace' ? replaceMode(args, context) : patchMode(args, context);
}

/**
 * Text of a file about to be edited (`text` undefined when it does not
 * exist); refuses content that would not survive decode → encode.
 */
async function readEditableText(task: TaskClient, path: string): Promise<{ absPath: string; text?: string }> {
  const stat = await task.stat(path);
  if (stat.isDirectory) throw new ToolInputError(`${path} is a directory, not a file.`);
  const file = stat.exists ? await readIfExists(task, path) : undefined;
  if (file === undefined) return { absPath: stat.absPath };
  if (isBinary(file.content)) {
    throw new ToolInputError(`${path} is a binary file (${formatSize(file.content.length)}); patch only edits text files.`);
  }
  const text = file.content.toString('utf8');
  if (Buffer.byteLength(text, 'utf8') !== file.content.length) {
    throw new ToolInputError(
      `${path} is not valid UTF-8 text; editing it here would corrupt it. Use the terminal (e.g. sed) instead.`,
    );
  }
  return { absPath: file.absPath, text };
}

async function replaceMode(args: ToolArgs, context: ToolContext): Promise<JsonObject> {
  if (args.path === undefined && typeof args.patch === 'string') {
    throw new ToolInputError(
      'mode is "replace", which needs path, old_string and new_string. To apply patch text set mode="patch".',
    );
  }
  const path = nonEmptyStringArg(args, 'path');
  const oldString = stringArg(args, 'old_string', true);
  const newString = stringArg(args, 'new_string', true);
  const replaceAll = boolArg(args, 'replace_all', false);

  const file = await readEditableText(context.task, path);
  if (file.text === undefined) throw await fileNotFound(path, file.absPath, context);
  const replaced = replaceText(file.text, oldString, newString, { replaceAll, path });
  await context.task.writeFile(path, replaced.content);

  const result: JsonObject = {
    success: true,
    path: file.absPath,
    replacements: replaced.replacements,
    match: replaced.match,
    diff: capDiff(unifiedDiff(file.text, replaced.content, { oldLabel: `a/${path}`, newLabel: `b/${path}` })),
    files_modified: [path],
    files_created: [],
    files_deleted: [],
  };
  if (replaced.match === 'line-trimmed') {
    result.note =
      'old_string did not match exactly; it was matched line by line ignoring leading/trailing whitespace. ' +
      'Check the indentation in the diff.';
  }
  return result;
}

async function patchMode(args: ToolArgs, context: ToolContext): Promise<JsonObject> {
  const patchText = stringArg(args, 'patch', true);
  if (patchText.trim() === '') throw new ToolInputError('Parameter patch must not be empty');
  const { task } = context;
  const parsed = parsePatch(patchText);

  // Read everything first: the patch is validated in full before any write.
  const contents = new Map<string, string>();
  const absPaths = new Map<string, string>();
  for (const path of patchPaths(parsed.operations)) {
    const file = await readEditableText(task, path);
    absPaths.set(path, file.absPath);
    if (file.text !== undefined) contents.set(path, file.text);
  }
  const applied = applyPatch(parsed.operations, contents);

  const done = { modified: [] as string[], created: [] as string[], deleted: [] as string[] };
  const writes = applied.changes.filter((change) => change.kind !== 'delete');
  const deletes = applied.changes.filter((change) => change.kind === 'delete');
  let current: FileChange | undefined;
  try {
    // Writes before deletes, so a failed write during a move leaves the source in place.
    for (const change of writes) {
      current = change;
      await task.writeFile(change.path, change.after ?? '');
      (change.kind === 'create' ? done.created : done.modified).push(change.path);
    }
    for (const change of deletes) {
      current = change;
      await deleteFile(task, absPaths.get(change.path) ?? change.path, context.signal);
      done.deleted.push(change.path);
    }
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw new ToolInputError(
      `Patch validated but failed while writing ${current?.path ?? 'a file'}: ${reason}. ` +
        'Files listed here were already changed; re-read them before retrying.',
      { files_modified: done.modified, files_created: done.created, files_deleted: done.deleted },
    );
  }

  const moves = applied.changes.flatMap((change) =>
    change.kind === 'create' && change.movedFrom !== undefined ? [{ from: change.movedFrom, to: change.path }] : [],
  );
  const movedSources = new Set(moves.map((move) => move.from));
  const diffs = applied.changes.map((change) =>
    change.kind === 'delete' && movedSources.has(change.path) ? '' : changeDiff(change, contents),
  );

  const result: JsonObject = {
    success: true,
    diff: capDiff(diffs.join('')),
    files_modified: done.modified,
    files_created: done.created,
    files_deleted: done.deleted,
  };
  if (moves.length > 0) result.files_moved = moves;
  if (applied.changes.length === 0) result.note = 'The patch applied but changed nothing.';
  if (applied.notes.length > 0) result.notes = applied.notes;
  return result;
}

/** Unified diff of one net change; a move diffs the source's old text against the destination. */
function changeDiff(change: FileChange, contents: ReadonlyMap<string, string>): string {
  let before = change.before ?? '';
  let oldLabel = `a/${change.path}`;
  if (change.kind === 'create') {
    before = change.movedFrom !== undefined ? (contents.get(change.movedFrom) ?? '') : '';
    oldLabel = change.movedFrom !== undefined ? `a/${change.movedFrom}` : '/dev/null';
  }
  const newLabel = change.kind === 'delete' ? '/dev/null' : `b/${change.path}`;
  // A pure rename has no content diff; the header pair still records it.
  return unifiedDiff(before, change.after ?? '', { oldLabel, newLabel }) || `--- ${oldLabel}\n+++ ${newLabel}\n`;
}

/** TaskClient has no delete; a stateless rm does it on every backend. */
async function deleteFile(task: TaskClient, absPath: string, signal: AbortSignal): Promise<void> {
  const result = await task.exec({
    command: `rm -f -- ${shellQuote(absPath)}`,
    stateless: true,
    timeoutMs: HELPER_TIMEOUT_MS,
    maxOutputChars: 4000,
    signal,
  });
  if (result.exitCode !== 0) {
    throw new Error(`rm exited with code ${result.exitCode}${result.output.trim() ? `: ${result.output.trim()}` : ''}`);
  }
}

function capDiff(diff: string): string {
  if (diff.length <= MAX_DIFF_CHARS) return diff;
  const omitted = diff.length - MAX_DIFF_CHARS;
  return `${diff.slice(0, MAX_DIFF_CHARS)}\n... [diff truncated: ${omitted.toLocaleString('en-US')} more chars]\n`;
}

// ---------------------------------------------------------------------------
// search_files
// ---------------------------------------------------------------------------

type SearchMode = 'content' | 'files_only' | 'count' | 'files';

interface SearchPlan {
  readonly mode: SearchMode;
  readonly pattern: string;
  /** The path as handed to the search program (already made safe to pass). */
  readonly searchPath: string;
  readonly fileGlob?: string;
  readonly context: number;
  readonly engine: SearchEngine;
}

interface ContentRecord {
  readonly path: string;
  readonly line: number;
  readonly text: string;
  readonly isMatch: boolean;
}

async function searchFilesTool(args: ToolArgs, context: ToolContext, engine: SearchEngine): Promise<JsonObject> {
  const pattern = stringArg(args, 'pattern', true);
  if (pattern === '') throw new ToolInputError('Parameter pattern must not be empty');
  const target = enumArg(args, 'target', ['content', 'files'] as const, 'content');
  const outputMode = enumArg(args, 'output_mode', ['content', 'files_only', 'count'] as const, 'content');
  const rawPath = stringArg(args, 'path', false) ?? '.';
  const path = rawPath.trim() === '' ? '.' : rawPath;
  const fileGlob = stringArg(args, 'file_glob', false);
  const limit = intArg(args, 'limit', SEARCH_DEFAULT_LIMIT, 1, SEARCH_MAX_LIMIT);
  const offset = intArg(args, 'offset', 0, 0);
  const contextLines = intArg(args, 'context', 0, 0, SEARCH_MAX_CONTEXT);

  const stat = await context.task.stat(path);
  if (!stat.exists) throw new ToolInputError(`Path not found: ${path}`);

  // `~` must reach the program expanded, and quoting would stop the shell
  // from doing it; a leading `-` would read as an option to find.
  const searchPath = path.startsWith('~') ? stat.absPath : path.startsWith('-') ? `./${path}` : path;
  const plan: SearchPlan = {
    mode: target === 'files' ? 'files' : outputMode,
    pattern,
    searchPath,
    ...(fileGlob !== undefined && fileGlob !== '' ? { fileGlob } : {}),
    context: contextLines,
    engine,
  };
  const sentinel = `__BERTH_SEARCH_END_${randomBytes(8).toString('hex')}__`;
  const execResult = await context.task.exec({
    command: buildSearchScript(plan, sentinel),
    stateless: true,
    timeoutMs: SEARCH_TIMEOUT_MS,
    maxOutputChars: SEARCH_OUTPUT_CAP_BYTES + 64_000,
    signal: context.signal,
  });
  const output = splitSearchOutput(execResult, sentinel);
  const display = (p: string): string => (path === '.' || path === './') && p.startsWith('./') ? p.slice(2) : p;

  const page = <T>(items: readonly T[]): { items: T[]; more: boolean } => ({
    items: items.slice(offset, offset + limit),
    more: offset + limit < items.length,
  });
  const finish = (result: JsonObject, shown: number, total: number, more: boolean): JsonObject => {
    result.truncated = more || output.capped;
    if (more) {
      result.hint = `Showing results ${offset + 1}-${offset + shown} of ${total}. Use offset=${offset + shown} for more.`;
    }
    const notes: string[] = [];
    if (output.capped) {
      notes.push('The search produced too much output; total_count is a lower bound. Narrow the pattern, path or file_glob.');
    }
    if (output.warning !== undefined) notes.push(output.warning);
    if (notes.length > 0) result.note = notes.join(' ');
    return result;
  };

  if (plan.mode === 'files') {
    const files = parseFileList(output.body, output.engine).map(display);
    const shown = page(files);
    return finish({ files: shown.items, total_count: files.length }, shown.items.length, files.length, shown.more);
  }
  if (plan.mode === 'files_only') {
    const files = [...new Set(parseNulList(output.body))].map(display).sort(compareText);
    const shown = page(files);
    return finish({ files: shown.items, total_count: files.length }, shown.items.length, files.length, shown.more);
  }
  if (plan.mode === 'count') {
    const entries = parseCounts(output.body)
      .map(([file, count]): [string, number] => [display(file), count])
      .sort((a, b) => compareText(a[0], b[0]));
    const shown = page(entries);
    const total = entries.reduce((sum, [, count]) => sum + count, 0);
    return finish(
      { counts: Object.fromEntries(shown.items), total_count: total, total_files: entries.length },
      shown.items.length,
      entries.length,
      shown.more,
    );
  }

  const records = parseContentRecords(output.body).map((record) => ({ ...record, path: display(record.path) }));
  const matches = records.filter((record) => record.isMatch).sort((a, b) => compareText(a.path, b.path) || a.line - b.line);
  const shown = page(matches);
  const linesByFile = new Map<string, Map<number, string>>();
  if (plan.context > 0) {
    for (const record of records) {
      let lines = linesByFile.get(record.path);
      if (lines === undefined) linesByFile.set(record.path, (lines = new Map()));
      lines.set(record.line, record.text);
    }
  }
  const entries = shown.items.map((match) => {
    const entry: JsonObject = { path: match.path, line: match.line, content: capLine(match.text) };
    if (plan.context > 0) {
      const lines = linesByFile.get(match.path);
      const around = (from: number, to: number): string[] => {
        const out: string[] = [];
        for (let n = from; n <= to; n++) {
          const text = lines?.get(n);
          if (text !== undefined) out.push(capLine(text));
        }
        return out;
      };
      entry.context_before = around(Math.max(1, match.line - plan.context), match.line - 1);
      entry.context_after = around(match.line + 1, match.line + plan.context);
    }
    return entry;
  });
  return finish({ matches: entries, total_count: matches.length }, entries.length, matches.length, shown.more);
}

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function capLine(text: string): string {
  return text.length > SEARCH_MAX_LINE_CHARS
    ? `${text.slice(0, SEARCH_MAX_LINE_CHARS)}... [line truncated: ${text.length.toLocaleString('en-US')} chars]`
    : text;
}

/**
 * One shell script that picks the engine (`command -v rg`), runs the search
 * with NUL-separated paths (so spaces, colons and quotes in names parse
 * unambiguously), caps its output, then prints a sentinel, the exit status
 * and stderr. Exec output merges stdout and stderr, so stderr is held in a
 * temp file and printed after the sentinel where it cannot corrupt results.
 */
function buildSearchScript(plan: SearchPlan, sentinel: string): string {
  const q = shellQuote;
  const path = q(plan.searchPath);
  const rgExcludes = SEARCH_EXCLUDED_DIRS.map((dir) => `-g ${q(`!${dir}`)}`).join(' ');
  const grepExcludes = SEARCH_EXCLUDED_DIRS.map((dir) => `--exclude-dir=${q(dir)}`).join(' ');
  const findPrune = `\\( ${SEARCH_EXCLUDED_DIRS.map((dir) => `-name ${q(dir)}`).join(' -o ')} \\) -prune -o`;
  const rgBase = `rg --no-config --color never --hidden --null --with-filename ${rgExcludes}`;
  const context = plan.context > 0 ? ` -C ${plan.context}` : '';

  let rgCommand: string;
  let fallbackCommand: string;
  let fallbackSelect: string;
  if (plan.mode === 'files') {
    const glob = /[*?[]/.test(plan.pattern) ? plan.pattern : `*${plan.pattern}*`;
    // find's -name sees only the base name; a glob with a slash goes to -ipath,
    // whose `*` already crosses directories, so `**/` collapses into it.
    const findTest = glob.includes('/')
      ? `-ipath ${q(`*${glob.replaceAll('**/', '').replaceAll('**', '*')}`)}`
      : `-iname ${q(glob)}`;
    rgCommand = `rg --no-config --files --hidden --null --sortr modified ${rgExcludes} --iglob ${q(glob)} -- ${path}`;
    fallbackSelect = `if find . -maxdepth 0 -printf '' >/dev/null 2>&1; then engine=find-mtime; else engine=find; fi`;
    fallbackCommand =
      `if [ "$engine" = find-mtime ]; then find ${path} ${findPrune} -type f ${findTest} -printf '%T@ %p\\0'; ` +
      `else find ${path} ${findPrune} -type f ${findTest} -print0; fi`;
  } else {
    const rgGlob = plan.fileGlob !== undefined ? ` -g ${q(plan.fileGlob)}` : '';
    const grepGlob = plan.fileGlob !== undefined ? ` --include=${q(plan.fileGlob)}` : '';
    const rgMode =
      plan.mode === 'files_only'
        ? '--files-with-matches'
        : plan.mode === 'count'
          ? '--count'
          : `--no-heading --line-number --sort path --max-columns ${READ_MAX_LINE_CHARS} --max-columns-preview${context}`;
    const grepMode = plan.mode === 'files_only' ? '-l' : plan.mode === 'count' ? '-c' : `-n${context}`;
    rgCommand = `${rgBase} ${rgMode}${rgGlob} -e ${q(plan.pattern)} -- ${path}`;
    fallbackSelect = 'engine=grep';
    // PCRE is the closest grep dialect to ripgrep's (\d, \s, lazy quantifiers); ERE otherwise.
    fallbackCommand =
      `if printf 'x\\n' | grep -qP 'x' 2>/dev/null; then flavor=-P; else flavor=-E; fi; ` +
      `grep -r -D skip -H -Z -I $flavor --color=never ${grepExcludes} ${grepMode}${grepGlob} -e ${q(plan.pattern)} -- ${path}`;
  }
  const select =
    plan.engine === 'rg'
      ? 'engine=rg'
      : plan.engine === 'grep'
        ? fallbackSelect
        : `if command -v rg >/dev/null 2>&1; then engine=rg; else ${fallbackSelect}; fi`;
  const search =
    plan.engine === 'rg'
      ? rgCommand
      : plan.engine === 'grep'
        ? fallbackCommand
        : `if [ "$engine" = rg ]; then ${rgCommand}; else ${fallbackCommand}; fi`;
  return [
    // A FIFO or device named as the path would be read by rg or grep until the timeout (a FIFO) or forever
    // (/dev/zero); inside a directory both skip them (grep by -D skip, rg by itself).
    `if [ ! -d ${path} ] && [ ! -f ${path} ]; then printf 'engine=refused\\n\\n%s\\n2\\n%s\\n' ${q(sentinel)} ` +
      `${q(`${plan.searchPath} is not a regular file or directory; search_files only reads regular files`)}; exit 0; fi`,
    `t=$(mktemp -d 2>/dev/null) || { t="\${TMPDIR:-/tmp}/berth-search.$$"; mkdir -p "$t" || exit 90; }`,
    `trap 'rm -rf "$t"' EXIT`,
    select,
    `printf 'engine=%s\\n' "$engine"`,
    `{ { ${search}; } 2>"$t/err"; echo $? >"$t/rc"; } | head -c ${SEARCH_OUTPUT_CAP_BYTES}`,
    `printf '\\n%s\\n' ${q(sentinel)}`,
    `cat "$t/rc" 2>/dev/null`,
    `head -c 2000 "$t/err" 2>/dev/null`,
  ].join('\n');
}

interface SearchOutput {
  readonly engine: string;
  readonly body: string;
  /** The output hit the byte cap, so results are incomplete. */
  readonly capped: boolean;
  /** Set when the program reported errors but still produced results. */
  readonly warning?: string;
}

function splitSearchOutput(result: TaskExecResult, sentinel: string): SearchOutput {
  if (result.interrupted) throw new ToolInputError('Search interrupted.');
  if (result.timedOut) {
    throw new ToolInputError(
      `Search timed out after ${SEARCH_TIMEOUT_MS / 1000}s. Narrow the path, add a file_glob, or simplify the pattern.`,
    );
  }
  const { output } = result;
  const header = /(?:^|\n)engine=([\w-]*)\n/.exec(output);
  const end = output.lastIndexOf(`\n${sentinel}\n`);
  if (header === null || end < 0) {
    throw new Error(`search_files: unexpected output from the environment (exit ${result.exitCode}): ${output.slice(0, 500)}`);
  }
  const body = output.slice(header.index + header[0].length, end);
  const trailer = output.slice(end + sentinel.length + 2);
  const newline = trailer.indexOf('\n');
  const status = Number.parseInt(newline >= 0 ? trailer.slice(0, newline) : trailer, 10);
  const stderr = (newline >= 0 ? trailer.slice(newline + 1) : '').trim();
  const engine = header[1] ?? '';
  const capped = Buffer.byteLength(body, 'utf8') >= SEARCH_OUTPUT_CAP_BYTES;
  const hasResults = body.replace(/\s+/g, '') !== '';
  // rg and grep exit 1 for "no match"; 2 and above are errors. find uses 1 for errors.
  const failed = Number.isNaN(status) ? false : engine.startsWith('find') ? status !== 0 : status >= 2;
  if (failed && !capped) {
    const reason = stderr !== '' ? stderr.split('\n').slice(0, 5).join('\n') : `exit code ${status}`;
    if (!hasResults) throw new ToolInputError(`Search failed: ${reason}`);
    return { engine, body, capped, warning: `Some files could not be searched: ${reason.split('\n')[0] ?? ''}` };
  }
  return { engine, body, capped };
}

/** Records `PATH\0LINE:TEXT` (match) and `PATH\0LINE-TEXT` (context), one per line; `--` separators skipped. */
function parseContentRecords(body: string): ContentRecord[] {
  const records: ContentRecord[] = [];
  for (const raw of body.split('\n')) {
    const nul = raw.indexOf('\0');
    if (nul <= 0) continue;
    const parsed = /^(\d+)([:-])(.*)$/s.exec(raw.slice(nul + 1));
    if (parsed === null) continue;
    let text = parsed[3] ?? '';
    if (text.endsWith('\r')) text = text.slice(0, -1);
    records.push({ path: raw.slice(0, nul), line: Number(parsed[1]), text, isMatch: parsed[2] === ':' });
  }
  return records;
}

function parseNulList(body: string): string[] {
  return body
    .split('\0')
    .map((entry) => entry.replace(/^\n+/, ''))
    .filter((entry) => entry !== '' && entry !== '\n');
}

/** File lists newest first: rg sorts them itself; find's `MTIME PATH` records are sorted here; plain find by name. */
function parseFileList(body: string, engine: string): string[] {
  const entries = parseNulList(body);
  if (engine === 'rg') return entries;
  if (engine !== 'find-mtime') return entries.sort(compareText);
  return entries
    .map((entry) => {
      const space = entry.indexOf(' ');
      return { mtime: Number.parseFloat(entry.slice(0, space)), path: entry.slice(space + 1) };
    })
    .filter((entry) => entry.path !== '' && !Number.isNaN(entry.mtime))
    .sort((a, b) => b.mtime - a.mtime || compareText(a.path, b.path))
    .map((entry) => entry.path);
}

/** `PATH\0COUNT` per line; files with zero matches (grep -c lists them) are dropped. */
function parseCounts(body: string): [string, number][] {
  const counts: [string, number][] = [];
  for (const raw of body.split('\n')) {
    const nul = raw.indexOf('\0');
    if (nul <= 0) continue;
    const count = Number.parseInt(raw.slice(nul + 1), 10);
    if (Number.isFinite(count) && count > 0) counts.push([raw.slice(0, nul), count]);
  }
  return counts;
}
