/** An error the exec agent answered a request with (`op: error`, an errno and a message). */
import type { FrameHeader } from './agent-protocol.js';
import type { FileOp } from '../file-errors.js';
import { fileErrnoError } from '../sandbox-channel.js';

export class AgentOpError extends Error {
  constructor(
    readonly errno: string,
    message: string,
  ) {
    super(message);
  }
}

/** The error an `error` frame carries (EIO when it names none). */
export function replyError(header: FrameHeader): AgentOpError {
  const errno = typeof header.errno === 'string' ? header.errno : 'EIO';
  const message = typeof header.message === 'string' ? header.message : errno;
  return new AgentOpError(errno, message);
}

/** A failed file operation on `absPath` as the domain error its errno means; other errors as they are. */
export function agentFileError(err: unknown, absPath: string, op: FileOp): Error {
  if (err instanceof AgentOpError) return fileErrnoError(err.errno, absPath, err.message, op);
  return err instanceof Error ? err : new Error(String(err));
}
