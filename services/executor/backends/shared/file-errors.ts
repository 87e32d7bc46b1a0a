/**
 * The file calls' failures, the same on every backend: each is a typed
 * error that carries the `path` and the `op` it failed on, and the `reason`.
 * The texts are the ones the file tools show to the model, so they are made
 * here and nowhere else. {@link fileErrorFromErrno} is the one mapper: every
 * backend turns what its transport reports (a node errno, an agent reply, a
 * helper script's exit code, an SFTP status) into an errno name first.
 */
import {
  BerthError,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  ResourceExhaustedError,
} from '../../../common/errors.js';
import { MAX_READ_FILE_BYTES, specialFileKindFromStat, type SpecialFileKind } from './file-limits.js';

/** What a file call was doing. */
export type FileOp = 'read' | 'write' | 'stat';

export type FileErrorReason =
  | 'not-found'
  | 'is-directory'
  | 'parent-not-directory'
  | 'permission-denied'
  | 'not-regular'
  | 'too-large'
  | 'no-space';

/** What every file error carries besides its message. */
export interface FileErrorFields {
  readonly path: string;
  readonly op: FileOp;
  readonly reason: FileErrorReason;
}

interface ErrorOptions {
  readonly cause?: unknown;
}

export class FileNotFoundError extends NotFoundError implements FileErrorFields {
  readonly reason = 'not-found';
  constructor(
    readonly path: string,
    readonly op: FileOp,
    options?: ErrorOptions,
  ) {
    super(`File not found: ${path}`, options);
  }
}

export class FilePermissionError extends PermissionDeniedError implements FileErrorFields {
  readonly reason = 'permission-denied';
  constructor(
    readonly path: string,
    readonly op: FileOp,
    options?: ErrorOptions,
  ) {
    super(`Permission denied: ${path}`, options);
  }
}

export class FileSpaceError extends ResourceExhaustedError implements FileErrorFields {
  readonly reason = 'no-space';
  constructor(
    readonly path: string,
    readonly op: FileOp,
    options?: ErrorOptions,
  ) {
    super(`No space left to write ${path}`, options);
  }
}

/** A file call refused for what the path is: a directory, a device, a file too large, a parent that is a file. */
export class FileRefusedError extends InvalidArgumentError implements FileErrorFields {
  constructor(
    readonly path: string,
    readonly op: FileOp,
    readonly reason: 'is-directory' | 'parent-not-directory' | 'not-regular' | 'too-large',
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

export type FileError = FileNotFoundError | FilePermissionError | FileSpaceError | FileRefusedError;

export function isFileError(err: unknown): err is FileError {
  return (
    err instanceof FileNotFoundError ||
    err instanceof FilePermissionError ||
    err instanceof FileSpaceError ||
    err instanceof FileRefusedError
  );
}

/** `path` is a directory where a file was wanted. */
export function isDirectoryError(path: string, op: FileOp, options?: ErrorOptions): FileRefusedError {
  return new FileRefusedError(path, op, 'is-directory', `${path} is a directory`, options);
}

/** A parent of `path` exists and is not a directory, so `path` cannot be made. */
export function parentNotDirectoryError(path: string, op: FileOp = 'write', options?: ErrorOptions): FileRefusedError {
  return new FileRefusedError(path, op, 'parent-not-directory', `cannot create ${path}: a parent path is not a directory`, options);
}

/** The refusal for a device, FIFO or socket (directories have their own message). */
export function notRegularFileError(path: string, kind: SpecialFileKind | string, op: FileOp = 'read'): FileRefusedError {
  if (kind === 'directory') return isDirectoryError(path, op);
  return new FileRefusedError(
    path,
    op,
    'not-regular',
    `${path} is not a regular file (it is a ${kind}); the file tools only read and write regular files. ` +
      'Use the terminal for devices, FIFOs and sockets.',
  );
}

/** The refusal for a file over {@link MAX_READ_FILE_BYTES}. */
export function fileTooLargeError(path: string, sizeBytes: number, maxBytes = MAX_READ_FILE_BYTES): FileRefusedError {
  const size = sizeBytes > maxBytes ? `${sizeBytes.toLocaleString('en-US')} bytes` : `over ${maxBytes.toLocaleString('en-US')} bytes`;
  return new FileRefusedError(
    path,
    'read',
    'too-large',
    `File too large to read: ${path} is ${size}; the file tools read files up to ` +
      `${maxBytes.toLocaleString('en-US')} bytes (${maxBytes / (1024 * 1024)} MiB). ` +
      'Read parts of it with the terminal instead (head, tail, sed -n START,ENDp).',
  );
}

/**
 * The file error for `errno` on `path`, or undefined for an errno that is
 * not about the file (each backend words that failure itself). `detail` is
 * what the sandbox said beside the errno: for `ENOTREG` (Berth's own name)
 * what the file is (`fifo`, `socket`, as `stat -c %F` says it), for `EFBIG`
 * the file's size in bytes.
 */
export function fileErrorFromErrno(
  errno: string,
  path: string,
  op: FileOp,
  detail = '',
  options?: ErrorOptions,
): FileError | undefined {
  switch (errno) {
    case 'ENOENT':
      return new FileNotFoundError(path, op, options);
    case 'ENOTDIR':
    case 'EEXIST':
      return op === 'write' ? parentNotDirectoryError(path, op, options) : new FileNotFoundError(path, op, options);
    case 'EISDIR':
      return isDirectoryError(path, op, options);
    case 'EACCES':
    case 'EPERM':
    case 'EROFS':
      return new FilePermissionError(path, op, options);
    // open(2) of a Unix socket (or of a FIFO for writing with no reader).
    case 'ENXIO':
    case 'EOPNOTSUPP':
      return notRegularFileError(path, 'socket', op);
    case 'ENOTREG':
      return notRegularFileError(path, specialFileKindFromStat(detail), op);
    // The size, or the cap plus one when the file grew while read.
    case 'EFBIG':
      return fileTooLargeError(path, Number.parseInt(detail, 10) || MAX_READ_FILE_BYTES + 1);
    case 'ENOSPC':
    case 'EDQUOT':
      return new FileSpaceError(path, op, options);
    default:
      return undefined;
  }
}

/** A node error's errno name (`ENOENT`), if it has one. */
export function errnoName(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** {@link fileErrorFromErrno} for a thrown node error; a domain error or an unknown errno comes back as it is. */
export function fileErrorFromNode(err: unknown, path: string, op: FileOp): Error {
  if (err instanceof BerthError) return err;
  const code = errnoName(err);
  const mapped = code === undefined ? undefined : fileErrorFromErrno(code, path, op, '', { cause: err });
  return mapped ?? (err instanceof Error ? err : new Error(String(err)));
}
