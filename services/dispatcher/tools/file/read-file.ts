/**
 * read_file: a page of numbered lines from a text file in the task
 * environment, with upstream Hermes' result shape, texts and guards
 * (`tools/file_tools.read_file_tool`, `tools/file_operations.read_file`).
 *
 * Order, as upstream: device paths by name (no I/O); binary extensions by
 * name; then the read, which the executor refuses at once for anything that
 * is not a regular file (it opens with O_NONBLOCK and checks what it opened,
 * on every backend); dedup of a region already returned; binary sniffing
 * (UTF-16 text is transcoded); the 100,000-character budget (the page is cut
 * on a line boundary and says where to continue: read-budget.ts); secret
 * redaction; merge-conflict markers flagged; the large-file hint and the
 * consecutive-read guard.
 */
import { posix } from 'node:path';
import { BerthError } from '../../../common/errors.js';
import { shellQuote } from '../../../common/shell/quote.js';
import type { ToolArgs, ToolContext, ToolRegistration } from '../../registry/tool-types.js';
import { HELPER_TIMEOUT_MS, guarded, intArg, nonEmptyStringArg, readIfExists, similarFiles, TOOLSET, type JsonObject } from './common.js';
import { redactFileContent } from '../../redaction/output-redaction.js';
import type { ReadPage } from './file-views.js';
import { READ_DEDUP_STATUS_MESSAGE, contentFingerprint, readRegionKey, type FileLoopGuard } from './loop-guard.js';
import { applyCharBudget, conflictHint, countConflictBlocks } from './read-budget.js';

/** Lines per read when the call names none (upstream `DEFAULT_READ_LIMIT`); the character budget bounds it. */
const READ_DEFAULT_LIMIT = 2000;
const READ_MAX_LIMIT = 2000;
export const READ_MAX_LINE_CHARS = 2000;
/** Formatted characters one read may return (upstream `file_read_max_chars` default). */
export const READ_MAX_CHARS = 100_000;
/** Above this size a wide, truncated read gets a hint to read less (upstream `_LARGE_FILE_HINT_BYTES`). */
const LARGE_FILE_HINT_BYTES = 512_000;
/** Leading bytes that decide whether a file is binary (upstream `_SAMPLE_BYTES`). */
const BINARY_SAMPLE_BYTES = 1000;
/** Leading bytes that decide whether binary-looking content is UTF-16 text. */
const UTF16_SAMPLE_BYTES = 512;
/**
 * The whole JSON result may be a little longer than the 100,000-character
 * content it carries (escaping, the other keys); a larger result cap keeps it
 * whole instead of cut mid-JSON.
 */
const READ_RESULT_CAP_CHARS = 200_000;

/** Upstream `BINARY_EXTENSIONS` (tools/binary_extensions.py). */
const BINARY_EXTENSIONS: ReadonlySet<string> = new Set([
  ...['.png', '.jpg', '.jpeg', '.gif', '.bmp', '.ico', '.webp', '.tiff', '.tif'],
  ...['.mp4', '.mov', '.avi', '.mkv', '.webm', '.wmv', '.flv', '.m4v', '.mpeg', '.mpg'],
  ...['.mp3', '.wav', '.ogg', '.flac', '.aac', '.m4a', '.wma', '.aiff', '.opus'],
  ...['.zip', '.tar', '.gz', '.bz2', '.7z', '.rar', '.xz', '.z', '.tgz', '.iso'],
  ...['.exe', '.dll', '.so', '.dylib', '.bin', '.o', '.a', '.obj', '.lib', '.app', '.msi', '.deb', '.rpm'],
  ...['.doc', '.docx', '.xls', '.xlsx', '.ppt', '.pptx', '.odt', '.ods', '.odp'],
  ...['.ttf', '.otf', '.woff', '.woff2', '.eot'],
  ...['.pyc', '.pyo', '.class', '.jar', '.war', '.ear', '.node', '.wasm', '.rlib'],
  ...['.sqlite', '.sqlite3', '.db', '.mdb', '.idx'],
  ...['.psd', '.ai', '.eps', '.sketch', '.fig', '.xd', '.blend', '.3ds', '.max'],
  ...['.swf', '.fla'],
  ...['.lockb', '.dat', '.data'],
]);

/** Magic bytes → name, first match wins (upstream `_MAGIC_SIGNATURES`). */
const MAGIC_SIGNATURES: readonly (readonly [Buffer, string])[] = [
  [Buffer.from('89504e470d0a1a0a', 'hex'), 'PNG image data'],
  [Buffer.from('ffd8ff', 'hex'), 'JPEG image data'],
  [Buffer.from('GIF87a'), 'GIF image data'],
  [Buffer.from('GIF89a'), 'GIF image data'],
  [Buffer.from('RIFF'), 'RIFF container (WAV/AVI/WebP family)'],
  [Buffer.from('%PDF-'), 'PDF document'],
  [Buffer.from('504b0304', 'hex'), 'ZIP archive (also docx/xlsx/jar/apk)'],
  [Buffer.from('504b0506', 'hex'), 'ZIP archive (empty)'],
  [Buffer.from('1f8b', 'hex'), 'gzip compressed data'],
  [Buffer.from('BZh'), 'bzip2 compressed data'],
  [Buffer.from('fd377a585a00', 'hex'), 'xz compressed data'],
  [Buffer.from('377abcaf271c', 'hex'), '7-Zip archive'],
  [Buffer.from('7f454c46', 'hex'), 'ELF executable'],
  [Buffer.from('MZ'), 'Windows PE executable'],
  [Buffer.from('cffaedfe', 'hex'), 'Mach-O executable (64-bit)'],
  [Buffer.from('cafebabe', 'hex'), 'Mach-O universal binary / Java class'],
  [Buffer.from('53514c69746520666f726d6174203300', 'hex'), 'SQLite database'],
  [Buffer.from('OggS'), 'Ogg container'],
  [Buffer.from('fLaC'), 'FLAC audio'],
  [Buffer.from('ID3'), 'MP3 audio (ID3 tag)'],
  [Buffer.from('000000', 'hex'), 'ISO media container (MP4/MOV family)'],
  [Buffer.from('BM'), 'BMP image data'],
  [Buffer.from('49492a00', 'hex'), 'TIFF image data (little-endian)'],
  [Buffer.from('4d4d002a', 'hex'), 'TIFF image data (big-endian)'],
];

/** Paths that block or never end, refused by name (upstream `_BLOCKED_DEVICE_PATHS`). */
const BLOCKED_DEVICE_PATHS: ReadonlySet<string> = new Set([
  '/dev/zero',
  '/dev/random',
  '/dev/urandom',
  '/dev/full',
  '/dev/stdin',
  '/dev/tty',
  '/dev/console',
  '/dev/stdout',
  '/dev/stderr',
  '/dev/fd/0',
  '/dev/fd/1',
  '/dev/fd/2',
]);
/** `/proc/<pid>/…` (and `/proc/<pid>/task/<tid>/…`) files that leak secrets or memory layout. */
const BLOCKED_PROC_SUFFIXES = [
  '/fd/0',
  '/fd/1',
  '/fd/2',
  '/environ',
  '/cmdline',
  '/maps',
  '/smaps',
  '/smaps_rollup',
  '/numa_maps',
  '/mem',
  '/auxv',
  '/pagemap',
] as const;

export interface ReadFileOptions {
  /** Dedup and repeated-read guard; without it every read returns content. */
  readonly loopGuard?: FileLoopGuard;
  /** Mask secrets in the content returned (`security.redact_secrets`); default true. */
  readonly redactSecrets?: boolean;
}

export function readFileRegistration(options: ReadFileOptions = {}): ToolRegistration {
  return {
    name: 'read_file',
    toolset: TOOLSET,
    emoji: '📖',
    maxResultSizeChars: READ_RESULT_CAP_CHARS,
    ...(options.loopGuard ? { callObserver: options.loopGuard } : {}),
    schema: {
      name: 'read_file',
      description:
        'Read a text file from the task environment with line numbers and pagination. Returns its lines as ' +
        `"LINE_NUM|CONTENT" (${READ_DEFAULT_LIMIT} lines per call by default) plus total_lines and file_size; when ` +
        'more lines remain, truncated is true and hint gives the offset to continue from. Use offset and limit for ' +
        'large files. Reads over ~100K characters are cut on a line boundary and return a next_offset; continue ' +
        'with that offset to read the rest. Unresolved git merge-conflict markers in the range are flagged. ' +
        'Suggests similar names when the file is not found. Images and other binary files cannot be read. Use ' +
        'this instead of cat/head/tail in the terminal.',
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
            description:
              `Maximum number of lines to read (default: ${READ_DEFAULT_LIMIT}, max: ${READ_MAX_LIMIT}). Reads are ` +
              'additionally capped at a ~100K-character budget with a next_offset continuation.',
            minimum: 1,
            maximum: READ_MAX_LIMIT,
            default: READ_DEFAULT_LIMIT,
          },
        },
        required: ['path'],
      },
    },
    handler: guarded((args, context) => readFileTool(args, context, options.loopGuard, options.redactSecrets ?? true)),
  };
}

/** Fields of a read result, in upstream `ReadResult` order; the defaults are always present. */
interface ReadResultFields {
  content?: string;
  total_lines?: number;
  file_size?: number;
  truncated?: boolean;
  hint?: string;
  is_binary?: boolean;
  is_image?: boolean;
  error?: string;
  similar_files?: string[];
}

/** Upstream `ReadResult.to_dict()`: every field that is set and not an empty list, in declaration order. */
export function readResult(fields: ReadResultFields): JsonObject {
  const result: JsonObject = {
    content: fields.content ?? '',
    total_lines: fields.total_lines ?? 0,
    file_size: fields.file_size ?? 0,
    truncated: fields.truncated ?? false,
  };
  if (fields.hint !== undefined) result.hint = fields.hint;
  result.is_binary = fields.is_binary ?? false;
  result.is_image = fields.is_image ?? false;
  if (fields.error !== undefined) result.error = fields.error;
  if (fields.similar_files !== undefined && fields.similar_files.length > 0) result.similar_files = fields.similar_files;
  return result;
}

export function notRegularFileMessage(path: string): string {
  return `Cannot read '${path}': not a regular file (directory, FIFO, socket, or device). Reading it could block indefinitely.`;
}

export function deviceFileMessage(path: string): string {
  return `Cannot read '${path}': this is a device file that would block or produce infinite output.`;
}

/** Whether an absolute, normalised path names a device or /proc file that read_file refuses. */
export function isBlockedDevicePath(absPath: string): boolean {
  if (BLOCKED_DEVICE_PATHS.has(absPath)) return true;
  return absPath.startsWith('/proc/') && BLOCKED_PROC_SUFFIXES.some((suffix) => absPath.endsWith(suffix));
}

/** Upstream `has_binary_extension`: the text after the path's last dot, lower-cased. */
export function binaryExtension(path: string): string | undefined {
  const dot = path.lastIndexOf('.');
  if (dot === -1 || !BINARY_EXTENSIONS.has(path.slice(dot).toLowerCase())) return undefined;
  // Named in the message as Python's `Path.suffix` would name it (a dotfile has none).
  const base = posix.basename(path);
  const baseDot = base.lastIndexOf('.');
  return baseDot > 0 ? base.slice(baseDot).toLowerCase() : '';
}

/** `Binary file (PNG image data, 4.1 KB) — cannot display as text.` (upstream `describe_binary_file`). */
export function describeBinaryFile(sample: Buffer, fileSize: number): string {
  let kind = 'unknown binary';
  for (const [magic, name] of MAGIC_SIGNATURES) {
    if (sample.length < magic.length || !sample.subarray(0, magic.length).equals(magic)) continue;
    if (name.startsWith('ISO media') && sample.subarray(4, 8).toString('latin1') !== 'ftyp') continue;
    kind = name;
    break;
  }
  let size: string;
  if (fileSize >= 1024 * 1024) size = `${(fileSize / (1024 * 1024)).toFixed(1)} MB`;
  else if (fileSize >= 1024) size = `${(fileSize / 1024).toFixed(1)} KB`;
  else size = `${fileSize} bytes`;
  return `Binary file (${kind}, ${size}) — cannot display as text.`;
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

function decodesAsUtf8(bytes: Uint8Array): boolean {
  try {
    strictUtf8.decode(bytes);
    return true;
  } catch {
    return false;
  }
}

/**
 * Text iff the leading bytes are valid UTF-8 without NUL; one broken sequence
 * in the last three bytes is the sample's cut, not binary.
 */
export function looksBinary(sample: Buffer): boolean {
  if (sample.length === 0) return false;
  if (sample.includes(0)) return true;
  if (decodesAsUtf8(sample)) return false;
  for (let cut = 1; cut <= 3 && cut < sample.length; cut++) {
    if (decodesAsUtf8(sample.subarray(0, sample.length - cut))) return false;
  }
  return true;
}

/** The UTF-16 flavour of binary-looking content: a BOM, else zero bytes all at odd (LE) or all at even (BE) indices. */
function utf16Encoding(content: Buffer): 'utf-16-le' | 'utf-16-be' | undefined {
  if (content[0] === 0xfe && content[1] === 0xff) return 'utf-16-be';
  if (content[0] === 0xff && content[1] === 0xfe) return 'utf-16-le';
  const sample = content.subarray(0, UTF16_SAMPLE_BYTES);
  let odd = 0;
  let even = 0;
  for (let i = 0; i < sample.length; i++) {
    if (sample[i] !== 0) continue;
    if (i % 2 === 1) odd++;
    else even++;
  }
  if (even === 0 && odd >= 2) return 'utf-16-le';
  if (odd === 0 && even >= 2) return 'utf-16-be';
  return undefined;
}

function decodeUtf16(content: Buffer, encoding: 'utf-16-le' | 'utf-16-be'): string {
  const even = content.subarray(0, content.length - (content.length % 2));
  const bytes = encoding === 'utf-16-le' ? even : Buffer.from(even).swap16();
  let text = bytes.toString('utf16le');
  if (text.startsWith('\ufeff')) text = text.slice(1);
  return text;
}

function numberLines(lines: readonly string[], firstLine: number): string {
  return lines
    .map((line, i) => {
      const shown = line.length > READ_MAX_LINE_CHARS ? `${line.slice(0, READ_MAX_LINE_CHARS)}... [truncated]` : line;
      return `${firstLine + i}|${shown}`;
    })
    .join('\n');
}

function continueHint(offset: number, endLine: number, totalLines: number): string {
  return `Use offset=${endLine + 1} to continue reading (showing ${offset}-${endLine} of ${totalLines} lines)`;
}

/** Whether the executor refused the path for not being a regular file (its texts in executor/file-limits.ts). */
function isNotRegularRefusal(err: unknown): boolean {
  if (!(err instanceof BerthError) || err.code !== 'INVALID_ARGUMENT') return false;
  return / is not a regular file \(it is a /.test(err.message) || / is a directory$/.test(err.message);
}

/**
 * The target with symlinks followed, for the device check, asked only for
 * files whose size says 0: /proc files do, and so do the devices, so a link
 * to one of them is caught; an ordinary file of size 0 costs one command.
 */
async function resolvedInEnvironment(context: ToolContext, absPath: string): Promise<string | undefined> {
  try {
    const result = await context.task.exec({
      command: `readlink -f -- ${shellQuote(absPath)}`,
      stateless: true,
      timeoutMs: HELPER_TIMEOUT_MS,
      maxOutputChars: 10_000,
      signal: context.signal,
    });
    const line = result.output.replace(/\n$/, '');
    return result.exitCode === 0 && line.startsWith('/') && !line.includes('\n') ? posix.normalize(line) : undefined;
  } catch {
    return undefined;
  }
}

async function readFileTool(
  args: ToolArgs,
  context: ToolContext,
  guard: FileLoopGuard | undefined,
  redact: boolean,
): Promise<JsonObject> {
  const path = nonEmptyStringArg(args, 'path');
  const offset = intArg(args, 'offset', 1, 1);
  const limit = intArg(args, 'limit', READ_DEFAULT_LIMIT, 1, READ_MAX_LIMIT);
  const { task } = context;

  // By name, before any I/O.
  if (path.startsWith('/') && isBlockedDevicePath(posix.normalize(path))) return { error: deviceFileMessage(path) };
  const extension = binaryExtension(path);
  if (extension !== undefined) {
    return {
      error: `Cannot read binary file '${path}' (${extension}). Use vision_analyze for images, or terminal to inspect binary files.`,
    };
  }

  const stat = await task.stat(path);
  if (isBlockedDevicePath(stat.absPath)) return { error: deviceFileMessage(path) };
  if (stat.exists && !stat.isDirectory && stat.sizeBytes === 0) {
    const real = await resolvedInEnvironment(context, stat.absPath);
    if (real !== undefined && isBlockedDevicePath(real)) return { error: deviceFileMessage(path) };
  }

  const callKey = JSON.stringify([path, offset, limit]);
  const region = readRegionKey(stat.absPath, offset, limit);
  let result: JsonObject;
  let fingerprint: string | undefined;
  if (stat.isDirectory) {
    result = readResult({ error: notRegularFileMessage(path) });
  } else {
    let file: Awaited<ReturnType<typeof readIfExists>>;
    try {
      file = stat.exists ? await readIfExists(task, path) : undefined;
    } catch (err) {
      if (!isNotRegularRefusal(err)) throw err;
      file = undefined;
      result = readResult({ error: notRegularFileMessage(path) });
    }
    if (file === undefined) {
      result ??= readResult({
        error: `File not found: ${path}`,
        similar_files: await similarFiles(path, stat.absPath, context).catch(() => []),
      });
    } else {
      fingerprint = contentFingerprint(file.content);
      const verdict = guard?.checkDedup(context, region, fingerprint);
      if (verdict?.kind === 'unchanged') {
        return { status: 'unchanged', message: READ_DEDUP_STATUS_MESSAGE, path, dedup: true, content_returned: false };
      }
      if (verdict?.kind === 'blocked') {
        return {
          error:
            `BLOCKED: You have called read_file on this exact region ${verdict.count} times and the file has NOT ` +
            'changed. STOP calling read_file for this path — the content from your earlier read_file result in ' +
            'this conversation is still current. Proceed with your task using the information you already have.',
          path,
          already_read: verdict.count,
        };
      }
      result = pageOf(file.content, offset, limit);
      applyCharBudget(result, offset, READ_MAX_CHARS);
      const content = typeof result.content === 'string' ? result.content : '';
      // As upstream: after the budget, the text the model sees; secret-bearing files get the assignment passes.
      if (redact && content !== '') result.content = redactFileContent(content, stat.absPath);
      if (guard !== undefined && result.error === undefined) guard.noteRead(context, stat.absPath, readPage(result, offset, limit, fingerprint, content));
      const conflicts = countConflictBlocks(typeof result.content === 'string' ? result.content : '');
      if (conflicts > 0) {
        result.conflict_blocks = conflicts;
        result._hint = conflictHint(conflicts);
      }
      const fileSize = file.content.length;
      if (fileSize > LARGE_FILE_HINT_BYTES && limit > 200 && result.truncated === true && result._hint === undefined) {
        result._hint =
          `This file is large (${fileSize.toLocaleString('en-US')} bytes). Consider reading only the section you ` +
          'need with offset and limit to keep context usage efficient.';
      }
    }
  }

  if (guard === undefined) return result;
  const count = guard.recordRead(context, callKey, region, fingerprint);
  if (count >= 4) {
    return {
      error:
        `BLOCKED: You have read this exact file region ${count} times in a row. The content has NOT changed. ` +
        'You already have this information. STOP re-reading and proceed with your task.',
      path,
      already_read: count,
    };
  }
  if (count >= 3) {
    result._warning =
      `You have read this exact file region ${count} times consecutively. The content has not changed since your ` +
      'last read. Use the information you already have. If you are stuck in a loop, stop reading and proceed with ' +
      'writing or responding.';
  }
  return result;
}

/**
 * The page a read returned, for write_file's overwrite rule: which lines,
 * and whether each is the file's own text (not masked by redaction, not cut
 * at the display width or by the character budget).
 */
function readPage(result: JsonObject, offset: number, limit: number, fingerprint: string, unmasked: string): ReadPage {
  const totalLines = typeof result.total_lines === 'number' ? result.total_lines : 0;
  const content = typeof result.content === 'string' ? result.content : '';
  const endLine =
    typeof result.next_offset === 'number'
      ? result.next_offset - 1
      : result.truncated === true
        ? offset + limit - 1
        : totalLines;
  const cutLine = content.split('\n').some((row) => row.length > READ_MAX_LINE_CHARS + String(endLine).length + 1);
  const unaltered = content === unmasked && result.truncated_lines !== true && !cutLine;
  return { fingerprint, offset, endLine: content === '' ? offset - 1 : endLine, totalLines, unaltered };
}

/** The page of a regular file's content (binary, UTF-16 or text), shaped as upstream's ReadResult. */
function pageOf(content: Buffer, offset: number, limit: number): JsonObject {
  const fileSize = content.length;
  const endLine = offset + limit - 1;
  if (fileSize === 0) return readResult({ hint: 'File is empty (0 bytes).' });

  if (looksBinary(content.subarray(0, BINARY_SAMPLE_BYTES))) {
    const encoding = utf16Encoding(content);
    if (encoding === undefined) {
      return readResult({ file_size: fileSize, is_binary: true, error: describeBinaryFile(content.subarray(0, BINARY_SAMPLE_BYTES), fileSize) });
    }
    const lines = decodeUtf16(content, encoding).replaceAll('\r\n', '\n').split('\n');
    const truncated = lines.length > endLine;
    let hint = `Transcoded from ${encoding.toUpperCase()} to UTF-8 for display. Text edits via patch/write_file would re-encode as UTF-8.`;
    if (truncated) hint += ` ${continueHint(offset, endLine, lines.length)}`;
    return readResult({
      content: numberLines(lines.slice(offset - 1, endLine), offset),
      total_lines: lines.length,
      file_size: fileSize,
      truncated,
      hint,
    });
  }

  let text = content.toString('utf8');
  // Only a leading BOM: U+FEFF further in is data.
  if (text.startsWith('\ufeff')) text = text.slice(1);
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  const totalLines = lines.length;
  if (offset > totalLines && totalLines > 0) {
    return readResult({
      total_lines: totalLines,
      file_size: fileSize,
      hint: `Note: offset ${offset} is beyond the end of the file (${totalLines} lines total). Retry with offset <= ${totalLines}.`,
    });
  }
  const page = lines.slice(offset - 1, endLine).map((line) => (line.endsWith('\r') ? line.slice(0, -1) : line));
  const truncated = totalLines > endLine;
  return readResult({
    content: numberLines(page, offset),
    total_lines: totalLines,
    file_size: fileSize,
    truncated,
    ...(truncated ? { hint: continueHint(offset, endLine, totalLines) } : {}),
  });
}
