/**
 * What the file calls (read, write) accept, on every backend: regular files
 * only, and reads of at most {@link MAX_READ_FILE_BYTES}. A device, FIFO or
 * socket is refused before a byte is read (`/dev/zero` never ends; a FIFO
 * with no writer blocks forever), and a file over the cap is refused from its
 * size, so no backend ever holds more than the cap for one read.
 */
import { constants as fsConstants, type Stats } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { InvalidArgumentError, NotFoundError, PermissionDeniedError } from '../common/errors.js';

/**
 * The largest file a file call reads: 8 MiB. It is the most write_file can
 * put in a file in one call (the dispatcher refuses tool arguments over
 * 8 MiB), it fits a gRPC message between dispatcher and executor (16 MiB)
 * with room, and read_file pages at most 2,000 lines of 2,000 characters, so
 * a model never sees more than a fraction of it in one call anyway.
 */
export const MAX_READ_FILE_BYTES = 8 * 1024 * 1024;

/** What a file that is not a regular file is, in error messages. */
export type SpecialFileKind = 'directory' | 'character device' | 'block device' | 'FIFO' | 'socket' | 'special file';

/** The kind of a non-regular file from its `stat` mode bits. */
export function specialFileKind(mode: number): SpecialFileKind {
  switch (mode & fsConstants.S_IFMT) {
    case fsConstants.S_IFDIR:
      return 'directory';
    case fsConstants.S_IFCHR:
      return 'character device';
    case fsConstants.S_IFBLK:
      return 'block device';
    case fsConstants.S_IFIFO:
      return 'FIFO';
    case fsConstants.S_IFSOCK:
      return 'socket';
    default:
      return 'special file';
  }
}

const KINDS_BY_NAME: Readonly<Record<string, SpecialFileKind>> = {
  directory: 'directory',
  'character special file': 'character device',
  'character device': 'character device',
  'block special file': 'block device',
  'block device': 'block device',
  fifo: 'FIFO',
  FIFO: 'FIFO',
  socket: 'socket',
};

/**
 * The kind from what a helper in the sandbox said: `stat -c %F` output
 * (`fifo`, `character special file`, ...) or the exec agent's own names.
 * Anything else is a `special file`: the text comes from the sandbox and is
 * not repeated.
 */
export function specialFileKindFromStat(text: string): SpecialFileKind {
  return KINDS_BY_NAME[text.trim()] ?? 'special file';
}

/** The refusal for a device, FIFO or socket (directories have their own message). */
export function notRegularFileError(absPath: string, kind: SpecialFileKind | string): InvalidArgumentError {
  if (kind === 'directory') return new InvalidArgumentError(`${absPath} is a directory`);
  return new InvalidArgumentError(
    `${absPath} is not a regular file (it is a ${kind}); the file tools only read and write regular files. ` +
      'Use the terminal for devices, FIFOs and sockets.',
  );
}

/** The refusal for a file over {@link MAX_READ_FILE_BYTES}. */
export function fileTooLargeError(absPath: string, sizeBytes: number, maxBytes = MAX_READ_FILE_BYTES): InvalidArgumentError {
  const size = sizeBytes > maxBytes ? `${sizeBytes.toLocaleString('en-US')} bytes` : `over ${maxBytes.toLocaleString('en-US')} bytes`;
  return new InvalidArgumentError(
    `File too large to read: ${absPath} is ${size}; the file tools read files up to ` +
      `${maxBytes.toLocaleString('en-US')} bytes (${maxBytes / (1024 * 1024)} MiB). ` +
      'Read parts of it with the terminal instead (head, tail, sed -n START,ENDp).',
  );
}

/** Maps an fs error on `absPath` to a domain error; anything unexpected is rethrown. */
function fsError(err: unknown, absPath: string, op: 'read' | 'write'): Error {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  switch (code) {
    case 'ENOENT':
      return new NotFoundError(`File not found: ${absPath}`);
    case 'ENOTDIR':
      return op === 'write'
        ? new InvalidArgumentError(`cannot create ${absPath}: a parent path is not a directory`)
        : new NotFoundError(`File not found: ${absPath}`);
    case 'EISDIR':
      return new InvalidArgumentError(`${absPath} is a directory`);
    case 'EACCES':
    case 'EPERM':
    case 'EROFS':
      return new PermissionDeniedError(`Permission denied: ${absPath}`);
    // open(2) of a Unix socket.
    case 'ENXIO':
    case 'EOPNOTSUPP':
      return notRegularFileError(absPath, 'socket');
    default:
      return err instanceof Error ? err : new Error(String(err));
  }
}

/**
 * Opens without blocking (a FIFO with no writer, or for writing with no
 * reader, would block open(2) forever) and checks what was opened.
 */
async function openRegular(absPath: string, flags: number, op: 'read' | 'write'): Promise<{ handle: FileHandle; info: Stats }> {
  let handle: FileHandle;
  try {
    handle = await open(absPath, flags | fsConstants.O_NONBLOCK | fsConstants.O_NOCTTY, 0o666);
  } catch (err) {
    // A FIFO opened for writing with no reader: ENXIO, like a socket; say which.
    throw fsError(err, absPath, op);
  }
  try {
    const info = await handle.stat();
    if (!info.isFile()) throw notRegularFileError(absPath, specialFileKind(info.mode));
    return { handle, info };
  } catch (err) {
    await handle.close().catch(() => undefined);
    throw err;
  }
}

/**
 * Reads a regular file on this machine, at most `maxBytes`: refused from its
 * size when larger, and read only up to `maxBytes + 1` bytes in any case (a
 * file in /proc reports size 0; one that grows while read is caught too).
 */
export async function readRegularFile(absPath: string, maxBytes = MAX_READ_FILE_BYTES): Promise<Buffer> {
  const { handle, info } = await openRegular(absPath, fsConstants.O_RDONLY, 'read');
  try {
    if (info.size > maxBytes) throw fileTooLargeError(absPath, info.size, maxBytes);
    const chunks: Buffer[] = [];
    let total = 0;
    for (;;) {
      const want = Math.min(256 * 1024, maxBytes + 1 - total);
      const buf = Buffer.allocUnsafe(want);
      const { bytesRead } = await handle.read(buf, 0, want, null);
      if (bytesRead === 0) break;
      chunks.push(buf.subarray(0, bytesRead));
      total += bytesRead;
      if (total > maxBytes) throw fileTooLargeError(absPath, total, maxBytes);
    }
    return Buffer.concat(chunks, total);
  } catch (err) {
    throw err instanceof InvalidArgumentError || err instanceof NotFoundError ? err : fsError(err, absPath, 'read');
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/**
 * Writes a regular file on this machine (created when missing, truncated
 * otherwise). A device, FIFO or socket in its place is refused untouched.
 */
export async function writeRegularFile(absPath: string, data: Uint8Array): Promise<void> {
  const { handle } = await openRegular(absPath, fsConstants.O_WRONLY | fsConstants.O_CREAT, 'write');
  try {
    await handle.truncate(0);
    let written = 0;
    while (written < data.byteLength) {
      const { bytesWritten } = await handle.write(data, written, data.byteLength - written, written);
      written += bytesWritten;
    }
  } catch (err) {
    throw fsError(err, absPath, 'write');
  } finally {
    await handle.close().catch(() => undefined);
  }
}
