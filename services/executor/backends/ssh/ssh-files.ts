/**
 * File transfer over SFTP: binary-safe, and streamed in chunks with several
 * requests in flight, so a large file costs a few round trips, not one per
 * 32 KiB.
 */
import { posix } from 'node:path';
import type { SFTPWrapper, Stats } from 'ssh2';
import { BerthError, UnavailableError } from '../../../common/errors.js';
import type { FileStat } from '../../backend.js';
import {
  fileErrorFromErrno,
  fileTooLargeError,
  notRegularFileError,
  parentNotDirectoryError,
  type FileOp,
} from '../shared/file-errors.js';
import { MAX_READ_FILE_BYTES, specialFileKind, writeTempPath } from '../shared/file-limits.js';

/** SFTP status codes (draft-ietf-secsh-filexfer-02 §7). */
const SFTP_NO_SUCH_FILE = 2;
const SFTP_PERMISSION_DENIED = 3;

/** Bytes per read or write request: below every server's limit. */
const CHUNK_BYTES = 32 * 1024;
/** Requests in flight at once per transfer. */
const IN_FLIGHT = 16;

function sftpCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

/** The errno name an SFTP status stands for, for the shared file-error mapper. */
const SFTP_ERRNO: Readonly<Record<number, string>> = {
  [SFTP_NO_SUCH_FILE]: 'ENOENT',
  [SFTP_PERMISSION_DENIED]: 'EACCES',
};

/** Maps an SFTP failure on `absPath` to a domain error. */
export function sftpError(err: unknown, absPath: string, op: FileOp, where: string): BerthError {
  if (err instanceof BerthError) return err;
  const code = sftpCode(err);
  const errno = code === undefined ? undefined : SFTP_ERRNO[code];
  return (
    (errno ? fileErrorFromErrno(errno, absPath, op, '', { cause: err }) : undefined) ??
    new UnavailableError(
      `file operation on ${absPath} at ${where} failed: ${err instanceof Error ? err.message : String(err)}`,
      { cause: err },
    )
  );
}

const call = <T>(fn: (cb: (err: Error | undefined | null, value: T) => void) => void): Promise<T> =>
  new Promise<T>((resolve, reject) => fn((err, value) => (err ? reject(err) : resolve(value))));

function statPath(sftp: SFTPWrapper, absPath: string): Promise<Stats> {
  return call<Stats>((cb) => sftp.stat(absPath, cb));
}

/** `stat`, following symlinks; missing is not an error. */
export async function sftpStat(sftp: SFTPWrapper, absPath: string, where: string): Promise<FileStat> {
  try {
    const info = await statPath(sftp, absPath);
    return { exists: true, isDirectory: info.isDirectory(), sizeBytes: info.size };
  } catch (err) {
    if (sftpCode(err) === SFTP_NO_SUCH_FILE) return { exists: false, isDirectory: false, sizeBytes: 0 };
    throw sftpError(err, absPath, 'stat', where);
  }
}

/** Reads a whole file: chunked reads, {@link IN_FLIGHT} at a time, until end of file. */
export async function sftpReadFile(
  sftp: SFTPWrapper,
  absPath: string,
  where: string,
  maxBytes = MAX_READ_FILE_BYTES,
): Promise<Buffer> {
  let handle: Buffer;
  try {
    const info = await statPath(sftp, absPath);
    // sftp-server opens with a blocking open(2): a FIFO would hang the whole SFTP session, /dev/zero never ends.
    if (!info.isFile()) throw notRegularFileError(absPath, specialFileKind(info.mode));
    if (info.size > maxBytes) throw fileTooLargeError(absPath, info.size, maxBytes);
    handle = await call<Buffer>((cb) => sftp.open(absPath, 'r', cb));
  } catch (err) {
    throw sftpError(err, absPath, 'read', where);
  }
  try {
    const data = await readAll(sftp, handle, 0, maxBytes + 1);
    // Grew past the cap since the stat (or a file whose size says 0, as in /proc).
    if (data.length > maxBytes) throw fileTooLargeError(absPath, data.length, maxBytes);
    return data;
  } catch (err) {
    throw sftpError(err, absPath, 'read', where);
  } finally {
    await call<void>((cb) => sftp.close(handle, (err) => cb(err, undefined))).catch(() => undefined);
  }
}

/**
 * Reads from `handle` from `start` to end of file. Chunks are requested in
 * rounds that double in width (1, 2, 4, ... {@link IN_FLIGHT}), so a small
 * read costs one request and a large one keeps many in flight. The first
 * short read marks the end: a file that grows while we read (a log) keeps
 * the rest for the next read.
 */
export async function readAll(sftp: SFTPWrapper, handle: Buffer, start = 0, maxBytes = Infinity): Promise<Buffer> {
  const readChunk = (position: number) =>
    new Promise<Buffer>((resolve, reject) => {
      const buf = Buffer.allocUnsafe(CHUNK_BYTES);
      sftp.read(handle, buf, 0, CHUNK_BYTES, position, (err, bytesRead) => {
        // ssh2 reports end of file as an error with code EOF (1).
        if (err && sftpCode(err) !== 1) reject(err);
        else resolve(buf.subarray(0, err ? 0 : bytesRead));
      });
    });
  const out: Buffer[] = [];
  let position = start;
  for (let width = 1; ; width = Math.min(width * 2, IN_FLIGHT)) {
    const round = await Promise.all(Array.from({ length: width }, (_, i) => readChunk(position + i * CHUNK_BYTES)));
    for (const chunk of round) {
      out.push(chunk);
      position += chunk.length;
      if (chunk.length < CHUNK_BYTES || position - start >= maxBytes) return Buffer.concat(out);
    }
  }
}

/** Creates `dir` and its missing parents, like `mkdir -p`. */
async function mkdirp(sftp: SFTPWrapper, dir: string): Promise<void> {
  try {
    await call<void>((cb) => sftp.mkdir(dir, (err) => cb(err, undefined)));
    return;
  } catch (err) {
    if (sftpCode(err) === SFTP_NO_SUCH_FILE && dir !== '/') {
      await mkdirp(sftp, posix.dirname(dir));
      await call<void>((cb) => sftp.mkdir(dir, (e) => cb(e, undefined))).catch(async (again: unknown) => {
        // Someone else made it meanwhile.
        if (!(await statPath(sftp, dir).then((s) => s.isDirectory(), () => false))) throw again;
      });
      return;
    }
    const info = await statPath(sftp, dir).catch(() => undefined);
    if (info?.isDirectory()) return;
    if (info) throw parentNotDirectoryError(dir);
    throw err;
  }
}

/** Symlinks followed from a write's path before giving up (the kernel's own limit). */
const MAX_SYMLINK_HOPS = 40;

/**
 * The file a write to `absPath` lands on: symlinks in its last component are
 * followed, so the temp file and the rename happen beside the link's target
 * and the link stays a link. A missing path is returned as is.
 */
async function sftpWriteTarget(sftp: SFTPWrapper, absPath: string): Promise<string> {
  let current = absPath;
  for (let hops = 0; hops <= MAX_SYMLINK_HOPS; hops++) {
    let info: Stats;
    try {
      info = await call<Stats>((cb) => sftp.lstat(current, cb));
    } catch (err) {
      if (sftpCode(err) === SFTP_NO_SUCH_FILE) return current;
      throw err;
    }
    if (!info.isSymbolicLink()) return current;
    const link = await call<string>((cb) => sftp.readlink(current, cb));
    current = posix.resolve(posix.dirname(current), link);
  }
  throw new UnavailableError(`too many levels of symbolic links: ${absPath}`);
}

/** ssh2's words for an extension the server lacks (thrown before anything is sent). */
const isUnsupportedExtension = (err: unknown) => err instanceof Error && /does not support this extended request/.test(err.message);

/** Writes `bytes` through `handle`, {@link IN_FLIGHT} chunks at a time. */
async function writeAll(sftp: SFTPWrapper, handle: Buffer, bytes: Buffer): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < bytes.length) {
      const position = next;
      next += CHUNK_BYTES;
      const length = Math.min(CHUNK_BYTES, bytes.length - position);
      await call<void>((cb) => sftp.write(handle, bytes, position, length, position, (err) => cb(err, undefined)));
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
}

const closeHandle = (sftp: SFTPWrapper, handle: Buffer) =>
  call<void>((cb) => sftp.close(handle, (err) => cb(err, undefined))).catch(() => undefined);

/**
 * Writes a whole file atomically, creating parent directories: the content
 * goes to a temp file beside the file (exclusive, 0600 while written,
 * fsynced when the server can), which takes the old file's mode (and owner
 * when allowed) and is renamed over the file (posix-rename@openssh.com), so
 * nobody sees a half-written file. A new file gets the mode the server's
 * umask gives it, as before. An existing file must be writable, as for an
 * in-place write. A server without posix-rename gets the in-place write for
 * an existing file (its plain rename will not replace one). Whatever fails,
 * the temp file is removed.
 */
export async function sftpWriteFile(sftp: SFTPWrapper, absPath: string, data: Uint8Array, where: string): Promise<void> {
  const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  let target: string;
  let existing: Stats | undefined;
  try {
    const parent = posix.dirname(absPath);
    existing = await statPath(sftp, absPath).catch(() => undefined);
    if (existing && !existing.isFile()) throw notRegularFileError(absPath, specialFileKind(existing.mode), 'write');
    const parentInfo = await statPath(sftp, parent).catch(() => undefined);
    if (!parentInfo) await mkdirp(sftp, parent);
    else if (!parentInfo.isDirectory()) {
      throw parentNotDirectoryError(absPath);
    }
    target = await sftpWriteTarget(sftp, absPath);
    if (existing) {
      // Writable, as an in-place write needed it to be (opened without truncating, closed again).
      await closeHandle(sftp, await call<Buffer>((cb) => sftp.open(target, 'r+', cb)));
    }
  } catch (err) {
    throw sftpError(err, absPath, 'write', where);
  }
  let tempPath: string | undefined = writeTempPath(target);
  let handle: Buffer | undefined;
  try {
    handle = await call<Buffer>((cb) => sftp.open(tempPath!, 'wx', existing ? { mode: 0o600 } : {}, cb));
    // A new file: what the server's umask made of 0666 is its mode; write it as 0600 meanwhile.
    const mode = (existing ?? (await call<Stats>((cb) => sftp.fstat(handle!, cb)))).mode & 0o7777;
    if (!existing) await call<void>((cb) => sftp.fchmod(handle!, 0o600, (err) => cb(err, undefined)));
    await writeAll(sftp, handle, bytes);
    await call<void>((cb) => sftp.ext_openssh_fsync(handle!, (err) => cb(err, undefined))).catch((err: unknown) => {
      if (!isUnsupportedExtension(err)) throw err;
    });
    if (existing) {
      const { uid, gid } = existing;
      // Only root (or the owner, for its own groups) may; otherwise the new file is the writer's.
      await call<void>((cb) => sftp.fchown(handle!, uid, gid, (err) => cb(err, undefined))).catch(() => undefined);
    }
    await call<void>((cb) => sftp.fchmod(handle!, mode, (err) => cb(err, undefined)));
    await call<void>((cb) => sftp.close(handle!, (err) => cb(err, undefined)));
    handle = undefined;
    try {
      await call<void>((cb) => sftp.ext_openssh_rename(tempPath!, target, (err) => cb(err, undefined)));
      tempPath = undefined;
    } catch (err) {
      if (!isUnsupportedExtension(err)) throw err;
      if (existing) {
        // The temp file is removed below.
        await sftpWriteInPlace(sftp, target, bytes);
      } else {
        await call<void>((cb) => sftp.rename(tempPath!, target, (e) => cb(e, undefined)));
        tempPath = undefined;
      }
    }
  } catch (err) {
    throw sftpError(err, absPath, 'write', where);
  } finally {
    if (handle) await closeHandle(sftp, handle);
    if (tempPath !== undefined) {
      const stale = tempPath;
      await call<void>((cb) => sftp.unlink(stale, (err) => cb(err, undefined))).catch(() => undefined);
    }
  }
}

/** The write of a server without posix-rename: truncate and rewrite the file in place. */
async function sftpWriteInPlace(sftp: SFTPWrapper, absPath: string, bytes: Buffer): Promise<void> {
  const handle = await call<Buffer>((cb) => sftp.open(absPath, 'w', cb));
  try {
    await writeAll(sftp, handle, bytes);
  } finally {
    await closeHandle(sftp, handle);
  }
}
