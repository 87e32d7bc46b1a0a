/** read_file: a page of numbered lines from a text file in the task environment. */
import type { ToolArgs, ToolContext, ToolRegistration } from '../../tool-types.js';
import { ToolInputError, fileNotFound, formatSize, guarded, intArg, isBinary, nonEmptyStringArg, readIfExists, TOOLSET, type JsonObject } from './common.js';

const READ_DEFAULT_LIMIT = 500;
const READ_MAX_LIMIT = 2000;
export const READ_MAX_LINE_CHARS = 2000;
/**
 * Characters of numbered content per read_file page. Stays under the
 * registry's default 100,000-character result cap so a page of long lines
 * ends early with a hint instead of being cut mid-JSON.
 */
const READ_MAX_CONTENT_CHARS = 90_000;

export function readFileRegistration(): ToolRegistration {
  return {
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
  };
}

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

