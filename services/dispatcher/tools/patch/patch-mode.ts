/** The patch tool's patch mode: a multi-file V4A patch or unified diff, validated in full before any write. */
import type { TaskClient } from '../../../common/task-client.js';
import { shellQuote } from '../../../common/shell/quote.js';
import type { ToolArgs, ToolContext } from '../../registry/tool-types.js';
import { HELPER_TIMEOUT_MS, isBinary, readIfExists, stringArg, type JsonObject } from '../file/common.js';
import { describeBinaryFile, notRegularFileMessage } from '../file/read-file.js';
import { structuredSyntaxRefusal } from '../file/syntax-check.js';
import { applyPatch, bulletList, validationFailure } from './apply-patch.js';
import { BOM, verifyWritten, type EditableFile } from './edited-file.js';
import { parsePatch } from './parse-patch.js';
import { patchFailures, taskKey } from './patch-failures.js';
import { patchPaths } from './patch-paths.js';
import { capDiff, failure, withNotFoundHint } from './patch-result.js';
import { checkPatchTarget } from './patch-target.js';
import { PatchError, type FileChange, type ParsedPatch } from './patch-types.js';
import { unifiedDiff } from './unified-diff.js';

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

/** The upstream operation a net change carries out, for `Failed to {verb} {path}`. */
function changeVerb(change: FileChange, movedSources: ReadonlySet<string>): { verb: string; path: string } {
  if (change.kind === 'create' && change.movedFrom !== undefined) return { verb: 'move', path: change.movedFrom };
  if (change.kind === 'create') return { verb: 'add', path: change.path };
  if (change.kind === 'delete') return { verb: movedSources.has(change.path) ? 'move' : 'delete', path: change.path };
  return { verb: 'update', path: change.path };
}

export async function patchMode(args: ToolArgs, context: ToolContext): Promise<JsonObject> {
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
