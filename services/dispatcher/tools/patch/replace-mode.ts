/** The patch tool's replace mode: one fuzzy-matched old_string → new_string edit in one file. */
import type { TaskClient } from '../../../common/task-client.js';
import type { ToolArgs, ToolContext } from '../../registry/tool-types.js';
import { ToolInputError, boolArg, formatSize, isBinary, readIfExists, stringArg, type JsonObject } from '../file/common.js';
import { structuredSyntaxRefusal } from '../file/syntax-check.js';
import { BOM, verifyWritten, type EditableFile } from './edited-file.js';
import { fuzzyFindAndReplace, isAlreadyApplied } from './fuzzy-match.js';
import { noMatchHint } from './match-messages.js';
import { patchFailures, taskKey } from './patch-failures.js';
import { capDiff, failure, NOT_FOUND_HINT } from './patch-result.js';
import { checkPatchTarget } from './patch-target.js';
import { pythonRepr } from './python-repr.js';
import { unifiedDiff } from './unified-diff.js';

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

export async function replaceMode(args: ToolArgs, context: ToolContext): Promise<JsonObject> {
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
  // Upstream matches the LF old_string against the CRLF text, so a multi-line one is never an exact match there
  // and the indentation guards run; they run here too, on the same edits.
  const guardsOnExact = crlf && /(?:^|[^\r])\n/.test(oldArg);
  const replaced = fuzzyFindAndReplace(content, oldString, newString, replaceAll, { guardsOnExact });

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
