/**
 * Regular files on this machine, for the local backend (and the test
 * fixtures that stand in for it): the same refusals as every backend's file
 * calls (see file-limits.ts), with the errors from file-errors.ts.
 */
import { constants as fsConstants, type Stats } from 'node:fs';
import { access, lstat, open, readlink, rename, stat, unlink, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { errnoName, fileErrorFromNode, fileTooLargeError, notRegularFileError, type FileOp } from './file-errors.js';
import { MAX_READ_FILE_BYTES, specialFileKind, writeTempPath } from './file-limits.js';

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

/** Symlinks followed from a write's path before giving up (the kernel's own limit). */
const MAX_SYMLINK_HOPS = 40;

/**
 * The file a write to `absPath` lands on: symlinks in its last component are
 * followed (a write goes through a link, as open(2) would), so the temp file
 * and the rename happen beside the link's target and the link stays a link.
 * A missing path, or a dangling link's missing target, is returned as is.
 */
async function writeTarget(absPath: string): Promise<string> {
  let current = absPath;
  for (let hops = 0; hops <= MAX_SYMLINK_HOPS; hops++) {
    let info: Stats;
    try {
      info = await lstat(current);
    } catch (err) {
      if (errnoName(err) === 'ENOENT') return current;
      throw err;
    }
    if (!info.isSymbolicLink()) return current;
    current = path.resolve(path.dirname(current), await readlink(current));
  }
  throw Object.assign(new Error(`ELOOP: too many symbolic links: ${absPath}`), { code: 'ELOOP' });
}

/** Creates the temp file beside `target`, exclusively and never through a link; retried on a name clash. */
async function createTemp(target: string, mode: number): Promise<{ handle: FileHandle; tempPath: string }> {
  const flags = fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW;
  for (let attempt = 0; ; attempt++) {
    const tempPath = writeTempPath(target);
    try {
      return { handle: await open(tempPath, flags, mode), tempPath };
    } catch (err) {
      if (errnoName(err) !== 'EEXIST' || attempt >= 7) throw err;
    }
  }
}

/**
 * Writes a regular file on this machine atomically: the content goes to a
 * temp file in the target's directory (0600 while written, fsynced), which
 * then takes the old file's mode (and owner, when allowed) and is renamed
 * over it, so a reader sees the old file or the new one, never a part. A
 * new file gets the mode open(2) gives it under the umask. A device, FIFO,
 * socket or directory in its place is refused untouched, and so is an
 * existing file we may not write (as the in-place write did). Whatever
 * fails, the temp file is removed.
 */
export async function writeRegularFile(absPath: string, data: Uint8Array): Promise<void> {
  let tempPath: string | undefined;
  let handle: FileHandle | undefined;
  try {
    const target = await writeTarget(absPath);
    const existing = await stat(target).catch((err: unknown) => {
      if (errnoName(err) === 'ENOENT') return undefined;
      throw err;
    });
    if (existing !== undefined) {
      if (!existing.isFile()) throw notRegularFileError(absPath, specialFileKind(existing.mode), 'write');
      await access(target, fsConstants.W_OK);
    }
    ({ handle, tempPath } = await createTemp(target, existing === undefined ? 0o666 : 0o600));
    // A new file: what the umask made of 0666 is its mode; write it as 0600 meanwhile.
    const mode = existing === undefined ? (await handle.stat()).mode & 0o7777 : existing.mode & 0o7777;
    if (existing === undefined) await handle.chmod(0o600);
    let written = 0;
    while (written < data.byteLength) {
      const { bytesWritten } = await handle.write(data, written, data.byteLength - written, written);
      written += bytesWritten;
    }
    await handle.sync();
    if (existing !== undefined && (existing.uid !== process.getuid?.() || existing.gid !== process.getgid?.())) {
      // Only root (or the owner, for a group it is in) may; otherwise the new file is the writer's.
      await handle.chown(existing.uid, existing.gid).catch(() => undefined);
    }
    await handle.chmod(mode);
    await handle.close();
    handle = undefined;
    await rename(tempPath, target);
    tempPath = undefined;
  } catch (err) {
    throw fileErrorFromNode(err, absPath, 'write');
  } finally {
    await handle?.close().catch(() => undefined);
    if (tempPath !== undefined) await unlink(tempPath).catch(() => undefined);
  }
}
