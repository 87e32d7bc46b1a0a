/**
 * patch: replace-mode edits (fuzzy-matched, as upstream Hermes) and
 * multi-file patches (V4A or unified diff, applied all or nothing).
 *
 * Results follow upstream's PatchResult: `success` first, then only the
 * fields that carry something (`no_change`, `note`, `diff`,
 * `files_modified`, `files_created`, `files_deleted`, `error`), then
 * `resolved_path` when one file was edited. Argument problems are plain
 * `{"error": ...}` as from every tool.
 */
import type { TaskClient } from '../../../common/task-client.js';
import { shellQuote } from '../../../common/shell/quote.js';
import type { ToolArgs, ToolContext, ToolRegistration } from '../../tool-types.js';
import { fuzzyFindAndReplace, isAlreadyApplied, noMatchHint, pythonRepr } from '../fuzzy-match.js';
import {
  applyPatch,
  bulletList,
  parsePatch,
  PatchError,
  patchPaths,
  validationFailure,
  type FileChange,
  type ParsedPatch,
} from '../patch-parser.js';
import { unifiedDiff } from '../unified-diff.js';
import { checkWriteAllowed } from './file-safety.js';
import { describeBinaryFile, notRegularFileMessage } from './read-file.js';
import {
  ToolInputError,
  boolArg,
  formatSize,
  guarded,
  HELPER_TIMEOUT_MS,
  isBinary,
  readIfExists,
  stringArg,
  TOOLSET,
  type JsonObject,
} from './common.js';
import { patchFailures } from './patch-failures.js';
import { structuredSyntaxRefusal } from './syntax-check.js';

const MAX_DIFF_CHARS = 50_000;
const BOM = '\uFEFF';

const NOT_FOUND_HINT =
  'old_string not found. Use read_file to verify the current content, or search_files to locate the text.';

export function patchRegistration(): ToolRegistration {
  return {
    name: 'patch',
    toolset: TOOLSET,
    emoji: '🩹',
    schema: {
      name: 'patch',
      description:
        'Edit files. mode="replace" swaps old_string for new_string in one file; old_string must match one place ' +
        'unless replace_all is true. Uses fuzzy matching (9 strategies: whitespace, indentation, escaped newlines, ' +
        'typographic characters, similar blocks), so small copying differences still match; the diff shows what ' +
        'changed. mode="patch" applies a multi-file V4A patch: "*** Begin Patch", then sections ' +
        '"*** Update File: PATH" with "@@ context @@" lines and hunk lines starting with " " (keep), "-" (remove) ' +
        'or "+" (add); "*** Add File: PATH" with every line prefixed "+"; "*** Delete File: PATH"; ' +
        '"*** Move File: OLD -> NEW"; then "*** End Patch". A unified diff (--- a/PATH, +++ b/PATH, @@ hunks) is ' +
        'also accepted. Either every hunk applies or nothing is written. Returns a unified diff of the change.',
      parameters: {
        type: 'object',
        properties: {
          mode: {
            type: 'string',
            enum: ['replace', 'patch'],
            description: '"replace" for one old_string/new_string edit, "patch" for a multi-file patch.',
            default: 'replace',
          },
          path: { type: 'string', description: "File to edit. REQUIRED when mode='replace'." },
          old_string: {
            type: 'string',
            description:
              "Text to find, including indentation. REQUIRED when mode='replace'. Include enough surrounding lines " +
              'to make it unique.',
          },
          new_string: {
            type: 'string',
            description: "Replacement text (may be empty to delete old_string). REQUIRED when mode='replace'.",
          },
          replace_all: {
            type: 'boolean',
            description: 'Replace every occurrence instead of requiring exactly one. Default false.',
            default: false,
          },
          patch: {
            type: 'string',
            description: "The full patch text (V4A or unified diff). REQUIRED when mode='patch'.",
          },
          cross_profile: {
            type: 'boolean',
            description: 'Accepted for compatibility with Hermes (its cross-profile guard); has no effect here.',
            default: false,
          },
        },
        required: ['mode'],
      },
    },
    handler: guarded(patchTool),
  };
}

/** Where a path to be written came from: upstream allows `..` in the explicit argument, not in patch headers. */
export type PatchTargetSource = 'path-argument' | 'patch-header';

/**
 * The one check every path a patch will write, create, delete or move is
 * put through before any file is read; returns the refusal text (the tool
 * answers `{"error": text}`), or undefined to proceed. Called for the
 * replace-mode `path` and for every path in a patch's headers (both ends of
 * a move), header paths as the patch spells them.
 *
 * Upstream's `..` refusal for header paths first, then, for both sources,
 * write_file's sensitive-path and credential deny checks (file-safety.ts),
 * resolved in the task's environment (home and symlinks are the sandbox's).
 */
export async function checkPatchTarget(
  path: string,
  source: PatchTargetSource,
  context: ToolContext,
): Promise<string | undefined> {
  if (source === 'patch-header' && path.split(/[\\/]/).includes('..')) {
    return (
      `V4A patch header contains '..' traversal: ${pythonRepr(path)}. Use the agent's cwd-relative path (no '..') ` +
      "or an absolute path in '*** Update File:' / '*** Add File:' / '*** Delete File:' / '*** Move File:' headers."
    );
  }
  const { absPath } = await context.task.stat(path);
  return checkWriteAllowed(context, path, absPath);
}

async function patchTool(args: ToolArgs, context: ToolContext): Promise<JsonObject> {
  const mode = args.mode ?? impliedMode(args);
  if (mode === 'replace') return replaceMode(args, context);
  if (mode === 'patch') return patchMode(args, context);
  return { error: `Unknown mode: ${typeof mode === 'string' ? mode : JSON.stringify(mode)}` };
}

/** Upstream defaults to replace; a lone `patch` argument can only mean patch mode, so it is read as one. */
function impliedMode(args: ToolArgs): 'replace' | 'patch' {
  return typeof args.patch === 'string' && args.old_string === undefined ? 'patch' : 'replace';
}

/** An upstream PatchResult failure. */
function failure(error: string, extra: JsonObject = {}): JsonObject {
  return { success: false, ...extra, error };
}

function taskKey(context: ToolContext): string {
  return `${context.tenant}\0${context.taskId}`;
}

/** A file about to be edited, its BOM set aside (matching and diffs see the text without it). */
interface EditableFile {
  readonly absPath: string;
  /** Undefined when the file does not exist. */
  readonly text?: string;
  readonly bom: boolean;
}

/**
 * Reads a file for editing; refuses directories, binary content and text
 * that would not survive decode → encode.
 */
async function readEditable(task: TaskClient, path: string): Promise<EditableFile> {
  const stat = await task.stat(path);
  if (stat.isDirectory) throw new ToolInputError(`Failed to read file: ${stat.absPath}`);
  const file = stat.exists ? await readIfExists(task, path) : undefined;
  if (file === undefined) return { absPath: stat.absPath, bom: false };
  if (isBinary(file.content)) {
    throw new ToolInputError(`${path} is a binary file (${formatSize(file.content.length)}); patch only edits text files.`);
  }
  const text = file.content.toString('utf8');
  if (Buffer.byteLength(text, 'utf8') !== file.content.length) {
    throw new ToolInputError(
      `${path} is not valid UTF-8 text; editing it here would corrupt it. Use the terminal (e.g. sed) instead.`,
    );
  }
  const bom = text.startsWith(BOM);
  return { absPath: file.absPath, text: bom ? text.slice(1) : text, bom };
}

/** Line ending rule shared by both modes: a file that is CRLF throughout is edited as LF and written back as CRLF. */
function isCrlfThroughout(text: string): boolean {
  const newlines = text.split('\n').length - 1;
  return newlines > 0 && text.split('\r\n').length - 1 === newlines;
}

function encodeForDisk(text: string, bom: boolean, crlf: boolean): string {
  const withEndings = crlf ? text.replaceAll('\r\n', '\n').replaceAll('\n', '\r\n') : text;
  return bom ? BOM + withEndings : withEndings;
}

async function replaceMode(args: ToolArgs, context: ToolContext): Promise<JsonObject> {
  const path = stringArg(args, 'path', false);
  if (path === undefined || path === '') return { error: 'path required' };
  const oldArg = stringArg(args, 'old_string', false);
  const newArg = stringArg(args, 'new_string', false);
  if (oldArg === undefined || newArg === undefined) return { error: 'old_string and new_string required' };
  const replaceAll = boolArg(args, 'replace_all', false);
  const refusal = await checkPatchTarget(path, 'path-argument', context);
  if (refusal !== undefined) return { error: refusal };

  let file: EditableFile;
  try {
    file = await readEditable(context.task, path);
  } catch (err) {
    if (err instanceof ToolInputError) return failure(err.message);
    throw err;
  }
  if (file.text === undefined) return failure(`Failed to read file: ${file.absPath}`);

  // Models send LF; a CRLF file is matched and edited as LF, then written back with CRLF.
  const crlf = isCrlfThroughout(file.text);
  const toLf = (text: string): string => (crlf ? text.replaceAll('\r\n', '\n') : text);
  const content = toLf(file.text);
  const oldString = toLf(oldArg);
  const newString = toLf(newArg);
  const replaced = fuzzyFindAndReplace(content, oldString, newString, replaceAll);

  if (replaced.error !== undefined) {
    if (isAlreadyApplied(content, oldString, newString)) {
      patchFailures.reset(taskKey(context), [file.absPath]);
      return {
        success: true,
        no_change: true,
        note:
          `File already contains the target text — the edit appears to be already applied to ${file.absPath}. ` +
          'No write performed; do not re-send this patch.',
        files_modified: [file.absPath],
        resolved_path: file.absPath,
      };
    }
    const error = replaced.error + noMatchHint(replaced.error, oldString, content);
    const result = failure(error);
    if (error.includes('Could not find')) {
      const count = patchFailures.record(taskKey(context), file.absPath);
      if (count >= 3) {
        result._hint =
          `This is failure #${count} patching ${pythonRepr(path)}. Stop retrying with variations of the same ` +
          'old_string. Either: (1) re-read the file fresh to verify current content, (2) use a longer / more ' +
          'unique old_string with surrounding context lines, or (3) use write_file to replace the entire file ' +
          'if the targeted region is hard to anchor.';
      } else if (!error.includes('Did you mean one of these sections?')) {
        result._hint = NOT_FOUND_HINT;
      }
    }
    return result;
  }

  // As upstream's write_file, which patch writes through: JSON/YAML/TOML that would no longer parse is refused.
  const malformed = await structuredSyntaxRefusal(file.absPath, encodeForDisk(replaced.content, false, crlf));
  if (malformed !== undefined) return failure(`Failed to write changes: ${malformed}`);
  const onDisk = encodeForDisk(replaced.content, file.bom, crlf);
  try {
    await context.task.writeFile(path, onDisk);
  } catch (err) {
    return failure(`Failed to write changes: ${err instanceof Error ? err.message : String(err)}`);
  }
  const verifyError = await verifyWritten(context.task, path, onDisk);
  if (verifyError !== undefined) return failure(verifyError);
  patchFailures.reset(taskKey(context), [file.absPath]);

  const result: JsonObject = { success: true };
  const diff = capDiff(unifiedDiff(content, replaced.content, { oldLabel: `a/${path}`, newLabel: `b/${path}` }));
  if (diff !== '') result.diff = diff;
  result.files_modified = [file.absPath];
  result.resolved_path = file.absPath;
  return result;
}

/**
 * Re-reads a written file: an executor that silently dropped the write must
 * not be reported as success. Replace mode compares after normalizing line
 * endings and the BOM (upstream `_verify_patch_persisted`); `exact` compares
 * the bytes, as upstream's write_file does with a hash for the files of a
 * V4A patch, and answers with that text.
 */
async function verifyWritten(
  task: TaskClient,
  path: string,
  intended: string,
  mode: 'replace' | 'exact' = 'replace',
): Promise<string | undefined> {
  const back = await readIfExists(task, path);
  if (mode === 'exact') {
    if (back !== undefined && back.content.equals(Buffer.from(intended, 'utf8'))) return undefined;
    return (
      `Post-write verification failed for ${path}: on-disk content hash differs from the intended write. The ` +
      'write did not persist correctly — re-read the file and retry.'
    );
  }
  const normalize = (text: string): string => text.replace(/^\uFEFF/, '').replaceAll('\r\n', '\n').replaceAll('\r', '\n');
  const wrote = normalize(intended);
  const read = normalize(back?.content.toString('utf8') ?? '');
  if (back !== undefined && read === wrote) return undefined;
  return (
    `Post-write verification failed for ${path}: on-disk content differs from intended write (wrote ` +
    `${wrote.length} chars, read back ${read.length} chars after normalizing line endings). The patch did not ` +
    'persist. Re-read the file and try again.'
  );
}

/**
 * A file a V4A patch names, read as upstream's `read_file_raw` would see it:
 * text, absent, or an error text for a path that exists but is not a regular
 * text file (upstream's own wording for directories and binary content).
 */
async function readForPatch(task: TaskClient, path: string): Promise<EditableFile & { readError?: string }> {
  const stat = await task.stat(path);
  if (stat.isDirectory) return { absPath: stat.absPath, bom: false, readError: notRegularFileMessage(path) };
  const file = stat.exists ? await readIfExists(task, path) : undefined;
  if (file === undefined) return { absPath: stat.absPath, bom: false };
  const text = file.content.toString('utf8');
  if (isBinary(file.content) || Buffer.byteLength(text, 'utf8') !== file.content.length) {
    // Upstream reads bytes that are not UTF-8 as binary too; rewriting them as text would corrupt them.
    const readError = describeBinaryFile(file.content.subarray(0, 1000), file.content.length);
    return { absPath: file.absPath, bom: false, readError };
  }
  const bom = text.startsWith(BOM);
  return { absPath: file.absPath, text: bom ? text.slice(1) : text, bom };
}

/** Upstream's generic `_hint` on a patch failure that says "Could not find", unless it already shows candidates. */
function withNotFoundHint(result: JsonObject): JsonObject {
  const error = typeof result.error === 'string' ? result.error : '';
  if (error.includes('Could not find') && !error.includes('Did you mean one of these sections?')) {
    result._hint = NOT_FOUND_HINT;
  }
  return result;
}

/** The upstream operation a net change carries out, for `Failed to {verb} {path}`. */
function changeVerb(change: FileChange, movedSources: ReadonlySet<string>): { verb: string; path: string } {
  if (change.kind === 'create' && change.movedFrom !== undefined) return { verb: 'move', path: change.movedFrom };
  if (change.kind === 'create') return { verb: 'add', path: change.path };
  if (change.kind === 'delete') return { verb: movedSources.has(change.path) ? 'move' : 'delete', path: change.path };
  return { verb: 'update', path: change.path };
}

async function patchMode(args: ToolArgs, context: ToolContext): Promise<JsonObject> {
  const patchText = stringArg(args, 'patch', false);
  if (patchText === undefined || patchText === '') return { error: 'patch content required' };
  const { task } = context;

  let parsed: ParsedPatch;
  try {
    parsed = parsePatch(patchText);
  } catch (err) {
    if (err instanceof PatchError) return withNotFoundHint(failure(`Failed to parse patch: ${err.message}`));
    throw err;
  }
  for (const headerPath of parsed.headerPaths) {
    const refusal = await checkPatchTarget(headerPath, 'patch-header', context);
    if (refusal !== undefined) return { error: refusal };
  }

  // Read everything first: the patch is validated in full before any write.
  const paths = patchPaths(parsed.operations);
  const files = new Map<string, EditableFile>();
  const contents = new Map<string, string>();
  const unreadable = new Map<string, string>();
  for (const path of paths) {
    const file = await readForPatch(task, path);
    files.set(path, file);
    if (file.text !== undefined) contents.set(path, file.text);
    if (file.readError !== undefined) unreadable.set(path, file.readError);
  }
  let applied: ReturnType<typeof applyPatch>;
  try {
    applied = applyPatch(parsed.operations, contents, unreadable);
  } catch (err) {
    if (err instanceof PatchError) return withNotFoundHint(failure(err.message));
    throw err;
  }

  const absolute = (path: string): string => files.get(path)?.absPath ?? path;
  const movedSources = new Set(applied.changes.flatMap((change) => (change.movedFrom !== undefined ? [change.movedFrom] : [])));
  // Upstream's write_file refuses JSON/YAML/TOML that would not parse when the apply phase reaches that file,
  // after earlier files were written. Berth checks every file first and reports the same per-file text as a
  // validation failure, so a refusal leaves every file as it was. A pure move writes nothing (upstream runs `mv`).
  const malformed: string[] = [];
  for (const change of applied.changes) {
    if (change.after === undefined) continue;
    if (change.movedFrom !== undefined && change.after === contents.get(change.movedFrom)) continue;
    // Named as the header spells it: upstream's write_file gets the header path.
    const refusal = await structuredSyntaxRefusal(change.path, change.after);
    if (refusal === undefined) continue;
    const { verb, path } = changeVerb(change, movedSources);
    malformed.push(`Failed to ${verb} ${path}: ${refusal}`);
  }
  if (malformed.length > 0) return failure(validationFailure(malformed));

  const failures: string[] = [];
  const failed = new Set<string>();
  const written: FileChange[] = [];
  const attempt = async (change: FileChange, run: () => Promise<void>): Promise<void> => {
    try {
      await run();
      written.push(change);
    } catch (err) {
      const { verb, path } = changeVerb(change, movedSources);
      failures.push(`Failed to ${verb} ${path}: ${err instanceof Error ? err.message : String(err)}`);
      failed.add(change.path);
    }
  };
  // Writes before deletes, so a failed write during a move leaves the source in place.
  for (const change of applied.changes.filter((c) => c.kind !== 'delete')) {
    await attempt(change, async () => {
      // A file keeps its BOM; a moved file takes its source's.
      const bom = files.get(change.movedFrom ?? change.path)?.bom ?? false;
      const onDisk = bom ? BOM + (change.after ?? '') : (change.after ?? '');
      await task.writeFile(change.path, onDisk);
      const unverified = await verifyWritten(task, change.path, onDisk, 'exact');
      if (unverified !== undefined) throw new Error(unverified);
    });
  }
  const destinationFailed = new Set(
    applied.changes.flatMap((c) => (c.movedFrom !== undefined && failed.has(c.path) ? [c.movedFrom] : [])),
  );
  for (const change of applied.changes.filter((c) => c.kind === 'delete' && !destinationFailed.has(c.path))) {
    await attempt(change, async () => deleteFile(task, change.path, absolute(change.path), context.signal));
  }

  // Upstream's PatchResult lists, per operation as the header names it (a move as "src -> dst"), for the
  // operations that were carried out.
  const lists = { modified: [] as string[], created: [] as string[], deleted: [] as string[] };
  for (const op of parsed.operations) {
    if (failed.has(op.path) || (op.kind === 'update' && op.moveTo !== undefined && failed.has(op.moveTo))) continue;
    if (op.kind === 'add') lists.created.push(op.path);
    else if (op.kind === 'delete') lists.deleted.push(op.path);
    else lists.modified.push(op.moveTo !== undefined ? `${op.path} -> ${op.moveTo}` : op.path);
  }
  const diff = capDiff(
    written
      .filter((change) => !(change.kind === 'delete' && movedSources.has(change.path)))
      .map((change) => changeDiff(change, contents))
      .join('\n'),
  );
  const result: JsonObject = { success: failures.length === 0 };
  if (failures.length === 0 && applied.notes.length > 0) result.note = applied.notes.join('\n');
  if (diff !== '') result.diff = diff;
  Object.assign(result, nonEmptyLists({ files_modified: lists.modified, files_created: lists.created, files_deleted: lists.deleted }));
  if (failures.length > 0) {
    result.error =
      'Apply phase failed (state may be inconsistent \u2014 run `git diff` to assess):\n' + bulletList(failures);
    return withNotFoundHint(result);
  }
  // As upstream's handler: on success, files_modified (in place when present) becomes the absolute path of
  // every file the patch names.
  const named = [...new Set(paths.map(absolute))];
  result.files_modified = named;
  if (named.length === 1) result.resolved_path = named[0];
  patchFailures.reset(taskKey(context), named);
  return result;
}

function nonEmptyLists(lists: Record<string, string[]>): JsonObject {
  return Object.fromEntries(Object.entries(lists).filter(([, list]) => list.length > 0));
}

/**
 * One net change as upstream's V4A result shows it: a unified diff for an
 * update or a deletion (`# Deleted: {path}` for an empty file), the added
 * lines under `--- /dev/null` / `+++ b/{path}` for an Add, `# Moved: {src} ->
 * {dst}` for a move (followed by a diff when the moved text changed).
 */
function changeDiff(change: FileChange, contents: ReadonlyMap<string, string>): string {
  if (change.kind === 'create' && change.movedFrom !== undefined) {
    const source = contents.get(change.movedFrom) ?? '';
    const moved = `# Moved: ${change.movedFrom} -> ${change.path}`;
    const edited = unifiedDiff(source, change.after ?? '', { oldLabel: `a/${change.movedFrom}`, newLabel: `b/${change.path}` });
    return edited === '' ? moved : `${moved}\n${edited}`;
  }
  if (change.kind === 'create') {
    const lines = (change.after ?? '').replace(/\n$/, '');
    const added = lines === '' ? '' : lines.split('\n').map((line) => `+${line}`).join('\n');
    return `--- /dev/null\n+++ b/${change.path}\n${added}`;
  }
  if (change.kind === 'delete') {
    return unifiedDiff(change.before ?? '', '', { oldLabel: `a/${change.path}`, newLabel: '/dev/null' }) || `# Deleted: ${change.path}`;
  }
  return unifiedDiff(change.before ?? '', change.after ?? '', { oldLabel: `a/${change.path}`, newLabel: `b/${change.path}` });
}

/**
 * TaskClient has no delete; a stateless rm does it on every backend. A
 * failure reads as upstream's delete_file error, `Failed to delete {path}: …`.
 */
async function deleteFile(task: TaskClient, path: string, absPath: string, signal: AbortSignal): Promise<void> {
  const result = await task.exec({
    command: `rm -f -- ${shellQuote(absPath)}`,
    stateless: true,
    timeoutMs: HELPER_TIMEOUT_MS,
    maxOutputChars: 4000,
    signal,
  });
  if (result.exitCode !== 0) throw new Error(`Failed to delete ${path}: ${result.output.trim() || 'unknown error'}`);
}

function capDiff(diff: string): string {
  if (diff.length <= MAX_DIFF_CHARS) return diff;
  const omitted = diff.length - MAX_DIFF_CHARS;
  return `${diff.slice(0, MAX_DIFF_CHARS)}\n... [diff truncated: ${omitted.toLocaleString('en-US')} more chars]\n`;
}
