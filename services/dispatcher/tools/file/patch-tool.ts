/** patch: replace-mode edits and multi-file patches, applied all or nothing. */
import type { TaskClient } from '../../../common/task-client.js';
import type { ToolArgs, ToolContext, ToolRegistration } from '../../tool-types.js';
import { applyPatch, parsePatch, patchPaths, replaceText, type FileChange } from '../patch-parser.js';
import { shellQuote } from '../shell-quote.js';
import { unifiedDiff } from '../unified-diff.js';
import {
  ToolInputError,
  boolArg,
  enumArg,
  fileNotFound,
  formatSize,
  guarded,
  HELPER_TIMEOUT_MS,
  isBinary,
  nonEmptyStringArg,
  readIfExists,
  stringArg,
  TOOLSET,
  type JsonObject,
} from './common.js';

const MAX_DIFF_CHARS = 50_000;


export function patchRegistration(): ToolRegistration {
  return {
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
  };
}

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

