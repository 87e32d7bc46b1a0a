/**
 * How the executor reaches into one task container: the exec agent over its
 * Unix socket, or `docker exec` when the image cannot run the agent. The
 * environment builds exec semantics (timeouts, interrupts, exit codes) on
 * top of this, identically for both.
 */
import { UnavailableError, type BerthError } from '../../../common/errors.js';
import type { FileStat } from '../../backend.js';
import { fileErrorFromErrno, type FileOp } from './file-errors.js';

export interface SpawnOptions {
  /** Run as `bash -c script` in a new session (its own process group). */
  readonly script: string;
  /** Added to the container's environment for this process. */
  readonly env?: Readonly<Record<string, string>>;
  /** Starting directory; `/` when it does not exist. */
  readonly cwd: string;
  readonly pty?: boolean;
  /** Written to stdin first. */
  readonly stdin?: Uint8Array | string;
  /** Keep stdin open for {@link SandboxProcess.write}; otherwise it is closed after `stdin`. */
  readonly keepStdin?: boolean;
  /**
   * A background process: where the channel can survive a dropped stream
   * (the exec agent's resume), it keeps running and is found again; a
   * foreground one ends with the stream.
   */
  readonly background?: boolean;
  /** stdout and stderr, in arrival order. */
  readonly onOutput: (chunk: Buffer) => void;
}

export interface ProcessExit {
  /** Exit status, or null when a signal ended the process. */
  readonly code: number | null;
  readonly signal: number | null;
  /**
   * The container's cgroup event counters when the process ended (the agent
   * reports them; the docker exec fallback does not): OOM kills and forks
   * refused at the pids limit.
   */
  readonly counters?: { readonly oomKills?: number; readonly pidsMaxHits?: number };
}

/** A process started in the container. */
export interface SandboxProcess {
  /** Process id inside the container. */
  readonly pid: number;
  /**
   * Resolves once the process exited and its output ended; rejects with a
   * {@link SandboxLostError} when the container went away first.
   */
  readonly exited: Promise<ProcessExit>;
  write(data: Uint8Array | string): Promise<void>;
  closeStdin(): Promise<void>;
  /** SIGTERM to the process group (and session), SIGKILL after `graceMs`; resolves when none of it is left. */
  kill(graceMs: number): Promise<void>;
}

export interface SandboxStat extends FileStat {
  /** Owner uid; -1 when the file does not exist. */
  readonly uid: number;
}

export interface SandboxChannel {
  /** `agent`: the in-container agent; `docker-exec`, `pod-exec`: a process per command (docker's, kubernetes' fallback). */
  readonly kind: 'agent' | 'docker-exec' | 'pod-exec';
  /** True once the channel can no longer reach the container. */
  readonly isLost: boolean;
  spawn(options: SpawnOptions): Promise<SandboxProcess>;
  readFile(absPath: string): Promise<Buffer>;
  writeFile(absPath: string, data: Uint8Array): Promise<void>;
  stat(absPath: string): Promise<SandboxStat>;
  /** Stops using the channel; running operations fail with {@link SandboxLostError}. */
  close(): void;
  /**
   * After a {@link SandboxLostError}: resolves true once the channel has
   * its stream back (a dropped stream was resumed, same sandbox, background
   * processes kept), false when it is lost for good. Absent: never recovers.
   */
  recover?(): Promise<boolean>;
}

/** The container (or its agent) went away under an operation. */
export class SandboxLostError extends UnavailableError {}

/** Maps an errno name reported from inside the container to a domain error about `absPath`. */
export function fileErrnoError(errno: string, absPath: string, message: string, op: FileOp): BerthError {
  return (
    fileErrorFromErrno(errno, absPath, op, message) ??
    new UnavailableError(`cannot ${op} ${absPath} in the container: ${message} (${errno})`)
  );
}
