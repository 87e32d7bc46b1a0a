/**
 * What the file calls (read, write) accept, on every backend: regular files
 * only, and reads of at most {@link MAX_READ_FILE_BYTES}. A device, FIFO or
 * socket is refused before a byte is read (`/dev/zero` never ends; a FIFO
 * with no writer blocks forever), and a file over the cap is refused from its
 * size, so no backend ever holds more than the cap for one read. The
 * refusals themselves are in file-errors.ts.
 */
import { randomBytes } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import { posix } from 'node:path';

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

/** Bytes of the target's name kept in a temp file's name: with the rest it stays under NAME_MAX (255). */
const TEMP_STEM_BYTES = 200;
const TEMP_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/**
 * A fresh name for the temp file of an atomic write to `target`, in the same
 * directory: `.NAME.berth-XXXXXX` (a hidden file; a long NAME is cut to
 * {@link TEMP_STEM_BYTES} bytes on a character boundary). The exec agent
 * and the shell helpers name theirs the same way.
 */
export function writeTempPath(target: string): string {
  let stem = posix.basename(target);
  while (Buffer.byteLength(stem) > TEMP_STEM_BYTES) stem = Array.from(stem).slice(0, -1).join('');
  const suffix = Array.from(randomBytes(6), (b) => TEMP_ALPHABET[b % TEMP_ALPHABET.length]).join('');
  return posix.join(posix.dirname(target), `.${stem}.berth-${suffix}`);
}
