/**
 * Regular files on this machine, for the local backend (and the test
 * fixtures that stand in for it): the same refusals as every backend's file
 * calls (see file-limits.ts), with the errors from file-errors.ts.
 */
import { constants as fsConstants, type Stats } from 'node:fs';
import { open, stat, type FileHandle } from 'node:fs/promises';
import { fileErrorFromNode, fileTooLargeError, notRegularFileError, type FileOp } from './file-errors.js';
import { MAX_READ_FILE_BYTES, specialFileKind } from './file-limits.js';

/**
 * Opens without blocking (a FIFO with no writer, or for writing with no
 * reader, would block open(2) forever) and checks what was opened.
 */
async function openRegular(absPath: string, flags: number, op: FileOp): Promise<{ handle: FileHandle; info: Stats }> {
  let handle: FileHandle;
  try {
    handle = await open(absPath, flags | fsConstants.O_NONBLOCK | fsConstants.O_NOCTTY, 0o666);
  } catch (err) {
    // A FIFO opened for writing with no reader fails with ENXIO, like a socket: say which it is.
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENXIO' || code === 'EOPNOTSUPP') {
      const info = await stat(absPath).catch(() => undefined);
      if (info !== undefined && !info.isFile()) throw notRegularFileError(absPath, specialFileKind(info.mode), op);
    }
    throw fileErrorFromNode(err, absPath, op);
  }
  try {
    const info = await handle.stat();
    if (!info.isFile()) throw notRegularFileError(absPath, specialFileKind(info.mode), op);
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
    throw fileErrorFromNode(err, absPath, 'read');
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
    throw fileErrorFromNode(err, absPath, 'write');
  } finally {
    await handle.close().catch(() => undefined);
  }
}
