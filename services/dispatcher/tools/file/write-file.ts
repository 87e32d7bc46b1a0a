/**
 * write_file: create or replace a whole file in the task environment, with
 * upstream Hermes' texts, refusals and result shape (`tools/file_tools.write_file_tool`,
 * `_handle_write_file`, `tools/file_operations.write_file`).
 *
 * Order, as upstream: argument checks; sensitive system paths; read_file
 * display text offered as content; the credential deny list; a lone
 * surrogate; JSON/YAML/TOML content that does not parse (checked as sent,
 * before the line-ending and BOM shims); an existing file this task has no
 * current, full view of (file-views.ts: never read in full, only patched,
 * changed on disk since); then the write, keeping an existing file's CRLF
 * line endings and UTF-8 BOM.
 */
import type { ToolArgs, ToolContext, ToolRegistration } from '../../registry/tool-types.js';
import { pythonTypeName } from '../python-type-name.js';
import { ToolInputError, guarded, TOOLSET, type JsonObject } from './common.js';
import { resolveWriteTarget, sensitivePathError, writeDeniedError } from './file-safety.js';
import { overwriteBlocker, staleWriteRefusal } from './file-views.js';
import { READ_DEDUP_STATUS_MESSAGE, contentFingerprint, type FileLoopGuard } from './loop-guard.js';
import { structuredSyntaxRefusal } from './syntax-check.js';

/** An existing file is looked at for its line endings and BOM up to this size (the executor's read cap). */
const EXISTING_FILE_PROBE_MAX_BYTES = 8 * 1024 * 1024;

export interface WriteFileOptions {
  /**
   * What each task has seen of its files: an overwrite needs a current full
   * view, and every write is told, so a later read returns content again.
   * Without it existing files are overwritten unchecked.
   */
  readonly loopGuard?: FileLoopGuard;
}

export function writeFileRegistration(options: WriteFileOptions = {}): ToolRegistration {
  return {
    name: 'write_file',
    toolset: TOOLSET,
    emoji: '✍️',
    schema: {
      name: 'write_file',
      description:
        'Create a file or replace its entire content, creating missing parent directories. For an EXISTING file, ' +
        'call read_file first: write_file refuses (file untouched) when this task has no current full read or ' +
        'write of the file, or the file changed on disk since; on refusal, read_file, merge, then retry. An ' +
        'existing file keeps its CRLF line endings and UTF-8 BOM. To change part of an existing file use patch ' +
        'instead. Use this instead of echo/cat heredocs in the terminal.',
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
          cross_profile: {
            type: 'boolean',
            description: 'Accepted for compatibility with Hermes (its cross-profile guard); has no effect here.',
            default: false,
          },
        },
        required: ['path', 'content'],
      },
    },
    handler: guarded((args, context) => writeFileTool(args, context, options.loopGuard)),
  };
}

/**
 * Content that is read_file's own display (numbered `N|` lines, or its
 * "unchanged" status message) rather than file bytes (upstream
 * `_is_internal_file_tool_content`).
 */
export function isReadFileDisplayText(content: string): boolean {
  const stripped = content.trim();
  if (stripped === '') return false;
  if (stripped === READ_DEDUP_STATUS_MESSAGE) return true;
  if (stripped.includes(READ_DEDUP_STATUS_MESSAGE) && stripped.length <= 2 * READ_DEDUP_STATUS_MESSAGE.length) return true;

  const lines = content.split(/\r\n|\r|\n/).filter((line) => line.trim() !== '');
  if (lines.length < 2) return false;
  const numbered: number[] = [];
  for (const line of lines) {
    const match = /^(\d+)\|/.exec(line.trimStart());
    if (match?.[1] !== undefined) numbered.push(Number(match[1]));
  }
  if (numbered.length < 2 || numbered.length / lines.length < 0.6) return false;
  let consecutive = 0;
  for (let i = 1; i < numbered.length; i++) if (numbered[i] === (numbered[i - 1] ?? NaN) + 1) consecutive++;
  return consecutive >= numbered.length - 1;
}

/**
 * The hex code of the first unpaired UTF-16 surrogate (which UTF-8 cannot
 * encode; it would be written as U+FFFD), or undefined.
 */
export function loneSurrogate(content: string): string | undefined {
  const match = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/u.exec(content);
  return match === null ? undefined : match[0].charCodeAt(0).toString(16);
}

/** An existing file's line ending: CRLF when any CRLF is in its first 4 KB (upstream `_detect_line_ending`). */
function existingLineEnding(head: Buffer): '\r\n' | '\n' | undefined {
  const sample = head.subarray(0, 4096).toString('latin1');
  if (sample.includes('\r\n')) return '\r\n';
  return sample.includes('\n') ? '\n' : undefined;
}

async function writeFileTool(args: ToolArgs, context: ToolContext, guard: FileLoopGuard | undefined): Promise<JsonObject> {
  const path = args.path;
  if (typeof path !== 'string' || path === '') {
    throw new ToolInputError(
      "write_file: missing required field 'path'. Re-emit the tool call with both 'path' and 'content' set.",
    );
  }
  if (!('content' in args) || args.content === undefined) {
    throw new ToolInputError(
      "write_file: missing required field 'content'. The tool call included a path but no content argument — " +
        'this is almost always a dropped-arg bug under context pressure. Re-emit the tool call with the full ' +
        'content payload, or use execute_code with hermes_tools.write_file() for very large files.',
    );
  }
  if (typeof args.content !== 'string') {
    throw new ToolInputError(`write_file: 'content' must be a string, got ${pythonTypeName(args.content)}.`);
  }
  let content: string = args.content;

  const stat = await context.task.stat(path);
  const target = await resolveWriteTarget(context, stat.absPath);
  const sensitive = sensitivePathError(path, target);
  if (sensitive !== undefined) throw new ToolInputError(sensitive);
  if (isReadFileDisplayText(content)) {
    throw new ToolInputError(
      'Refusing to write internal read_file display text as file content. Strip read_file line-number prefixes ' +
        'or reconstruct the intended file contents before writing.',
    );
  }
  const denied = writeDeniedError(stat.absPath, target);
  if (denied !== undefined) {
    return { bytes_written: 0, dirs_created: false, error: denied, resolved_path: stat.absPath };
  }
  const surrogate = loneSurrogate(content);
  if (surrogate !== undefined) {
    return {
      bytes_written: 0,
      dirs_created: false,
      error:
        `Refusing to write '${stat.absPath}': content contains a lone surrogate character ('\\u${surrogate}') that ` +
        'cannot be encoded as UTF-8. The file was NOT created or modified.',
      resolved_path: stat.absPath,
    };
  }
  const malformed = await structuredSyntaxRefusal(stat.absPath, content);
  if (malformed !== undefined) {
    return { bytes_written: 0, dirs_created: false, error: malformed, resolved_path: stat.absPath };
  }
  if (stat.isDirectory) throw new ToolInputError(`${path} is a directory; give a file path to write.`);

  // read_file strips the BOM and shows lines without CR, and models send LF text: without this a round trip
  // would turn a CRLF file into LF and drop its BOM.
  let existing: Buffer | undefined;
  if (stat.exists && stat.sizeBytes === 0) existing = Buffer.alloc(0);
  else if (stat.exists && stat.sizeBytes <= EXISTING_FILE_PROBE_MAX_BYTES) {
    existing = await context.task.readFile(path).then(
      (file) => file.content,
      () => undefined,
    );
  }
  if (existing !== undefined && existing.length > 0) {
    if (existingLineEnding(existing) === '\r\n') content = content.replace(/\r\n|\r|\n/g, '\r\n');
    const hasBom = existing[0] === 0xef && existing[1] === 0xbb && existing[2] === 0xbf;
    if (hasBom && !content.startsWith('\ufeff')) content = `\ufeff${content}`;
  }
  // An empty file loses nothing (and a FIFO or device, which also reads as size 0, gets the environment's own refusal).
  if (stat.exists && stat.sizeBytes > 0 && guard !== undefined) {
    // Refused before anything is written (upstream #65604): a stale conversation copy must not replace what is on disk.
    const current = existing === undefined ? undefined : contentFingerprint(existing);
    const reason = overwriteBlocker(guard.view(context, stat.absPath), current, stat.absPath);
    if (reason !== undefined) return staleWriteRefusal(path, reason, stat.absPath);
  }

  const written = await context.task.writeFile(path, content);
  guard?.forgetPath(context, written.absPath);
  guard?.noteWrite(context, written.absPath, contentFingerprint(Buffer.from(content, 'utf8')));
  return {
    bytes_written: written.bytesWritten,
    dirs_created: written.dirsCreated,
    resolved_path: written.absPath,
    files_modified: [written.absPath],
  };
}
