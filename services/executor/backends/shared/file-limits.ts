/**
 * What the file calls (read, write) accept, on every backend: regular files
 * only, and reads of at most {@link MAX_READ_FILE_BYTES}. A device, FIFO or
 * socket is refused before a byte is read (`/dev/zero` never ends; a FIFO
 * with no writer blocks forever), and a file over the cap is refused from its
 * size, so no backend ever holds more than the cap for one read. The
 * refusals themselves are in file-errors.ts.
 */
import { constants as fsConstants } from 'node:fs';

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
