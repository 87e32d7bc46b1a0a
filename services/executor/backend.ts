/**
 * The contract every terminal backend implements (local, docker, ssh, ...).
 *
 * A backend only has to run `bash -c SCRIPT` with stdin, a timeout and an
 * abort signal, start a long-running background script, and copy files in
 * and out. Persistent cwd/env semantics come from the shared shell-state
 * runner on top of this interface, so every backend behaves the same.
 *
 * Domain types only: backends never import generated proto code.
 */
import type { Duplex } from 'node:stream';

/** Identifies one task's environment. The tenant namespaces the task id. */
export interface TaskKey {
  readonly tenant: string;
  readonly taskId: string;
}

/** Stable string form of a task key, safe to use in file and container names. */
export function taskKeyString(key: TaskKey): string {
  return `${key.tenant}/${key.taskId}`;
}

export interface ExecOptions {
  /** Passed to `bash -c` verbatim. */
  readonly script: string;
  /** Written to the process's stdin, which is then closed. Empty: stdin is closed at once. */
  readonly stdin?: Uint8Array | string;
  /** Hard limit; on expiry the whole process group is killed and `timedOut` is set. */
  readonly timeoutMs: number;
  /** Aborting kills the whole process group and sets `interrupted`. */
  readonly signal?: AbortSignal;
  /** Between SIGTERM and SIGKILL of the group on timeout or abort; the backend's default when absent. */
  readonly killGraceMs?: number;
  /** Extra environment for this run only (already scrubbed by the caller). */
  readonly env?: Readonly<Record<string, string>>;
  /** Run under a pseudo-terminal (stdout and stderr arrive merged). */
  readonly pty?: boolean;
  /** Receives output as it is produced: stdout and stderr interleaved in arrival order. */
  readonly onOutput?: (chunk: Buffer) => void;
}

export interface ExecResult {
  /** The script's exit code; 124 when timed out, 130 when interrupted. */
  readonly exitCode: number;
  readonly timedOut: boolean;
  readonly interrupted: boolean;
}

export interface BackgroundOptions {
  readonly script: string;
  readonly env?: Readonly<Record<string, string>>;
  readonly pty?: boolean;
  /** Output as produced (stdout and stderr merged). */
  readonly onOutput: (chunk: Buffer) => void;
  /** Called once with the exit code (-15 when killed by SIGTERM, 128+n style codes otherwise). */
  readonly onExit: (exitCode: number) => void;
}

/** A background process started by {@link BackendEnvironment.startBackground}. */
export interface BackgroundHandle {
  /** Process id as seen inside the environment. */
  readonly pid: number;
  /** Write to the process's stdin. Rejects when stdin is closed or the process has exited. */
  write(data: string | Uint8Array): Promise<void>;
  /** Close the process's stdin (EOF). */
  closeStdin(): Promise<void>;
  /** Kill the whole process group: SIGTERM, then SIGKILL after a grace period. */
  kill(): Promise<void>;
}

/** A socket inside an environment whose connections reach the executor over the exec agent's stream. */
export interface RpcRelay {
  /** A directory inside the environment, private to the task, where run dirs are made (it exists). */
  readonly sandboxDir: string;
  /**
   * Listens at `socketPath` inside the environment (its directory is made
   * 0700 unless it exists; the socket is 0600); each connection is handed to
   * `onConnection`.
   */
  listen(socketPath: string, onConnection: (socket: Duplex) => void): Promise<RelayedSocket>;
}

export interface RelayedSocket {
  /** Closes the socket and its connections; removes `removeDir` (a run dir) too when given. */
  close(removeDir?: string): Promise<void>;
}

export interface FileStat {
  readonly exists: boolean;
  readonly isDirectory: boolean;
  readonly sizeBytes: number;
}

/** One task's environment on a backend: a host directory, a container, a remote shell. */
export interface BackendEnvironment {
  /** Human-readable identity for logs and error messages (container id, host:dir, ...). */
  readonly description: string;
  /** Home directory inside the environment; used to resolve `~`. */
  readonly homeDir: string;
  /** Directory where a new task starts. */
  readonly initialCwd: string;
  /** Directory inside the environment private to this task, for the runner's state files. */
  readonly stateDir: string;
  /**
   * A directory both the executor (hostPath) and processes in the environment
   * (sandboxPath) see, for Unix sockets: the exec agent's and execute_code's
   * `rpc.sock`. Absent when the backend cannot share one (ssh, cloud sandboxes).
   */
  readonly rpcDir?: { readonly hostPath: string; readonly sandboxPath: string };
  /**
   * Where the environment has no {@link rpcDir} but runs the exec agent: a
   * Unix socket inside it, relayed over the agent's stream, so execute_code
   * runs the script in the task's own environment all the same. Absent
   * where there is neither (the script then needs a per-task code container).
   */
  readonly rpcRelay?: RpcRelay;
  /**
   * A shell snapshot the environment already holds, written by the runner's
   * bootstrap script ({@link import('./shell-state-runner.js').buildPreparedSnapshot})
   * for `initialCwd` while it waited to be used (a warm pool container does
   * this); the runner starts from it instead of running a login shell on the
   * task's first call. Optional.
   */
  readonly preparedSnapshot?: string;
  /**
   * Notices about the environment itself gathered since the last call (its
   * container was replaced, a resource limit killed a process), handed out
   * once with the next command's result. Optional.
   */
  takeNotices?(): string[];
  /**
   * True once after the environment replaced the task's container or sandbox
   * (the old one was gone or had to be renewed), so background processes and
   * files outside persisted paths may be lost; the flag is cleared by the
   * call. Taken with {@link takeNotices}, whose text says what happened.
   * Optional: environments that never replace themselves leave it out.
   */
  takeRecreated?(): boolean;

  exec(options: ExecOptions): Promise<ExecResult>;
  startBackground(options: BackgroundOptions): Promise<BackgroundHandle>;

  /** Absolute paths only; rejects with a NotFound domain error when missing. */
  readFile(absPath: string): Promise<Buffer>;
  /** Absolute paths only; creates parent directories. */
  writeFile(absPath: string, data: Uint8Array): Promise<void>;
  stat(absPath: string): Promise<FileStat>;

  /** Kill everything still running and remove the environment. Idempotent. */
  dispose(): Promise<void>;
}

export interface BackendCapabilities {
  readonly name: string;
  readonly pty: boolean;
  /** True when the environment shares the host filesystem (approval cannot be skipped). */
  readonly hostFilesystem: boolean;
  /**
   * True when every environment has an {@link BackendEnvironment.rpcDir} or
   * an {@link BackendEnvironment.rpcRelay} (daytona, modal: no agent-less fallback),
   * so execute_code runs scripts in the task's own environment and the
   * executor needs no code containers. False (ssh, singularity): an
   * environment may have neither (a host without python3), and then its
   * scripts need a per-task code container.
   */
  readonly sharesRpcDir: boolean;
}

/** A terminal backend: creates per-task environments. */
export interface Backend {
  readonly capabilities: BackendCapabilities;
  createEnvironment(key: TaskKey): Promise<BackendEnvironment>;
  /** Release everything the backend holds (connections, containers it created). */
  close(): Promise<void>;
}
