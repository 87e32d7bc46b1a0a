/**
 * The contract every terminal backend implements (local, docker, ssh, ...,
 * and a third party's backend package): the public contract of
 * `berth/backend-kit`, semver-stable (docs/versioning.md). A backend package's
 * default export is a {@link BackendFactory}
 * (docs/backends/writing-a-backend.md), and `berth/conformance` checks that
 * what it makes behaves as agents rely on.
 *
 * A backend only has to run `bash -c SCRIPT` with stdin, a timeout and an
 * abort signal, start a long-running background script, and copy files in
 * and out. Persistent cwd/env semantics come from the shared shell-state
 * runner on top of this interface, so every backend behaves the same.
 *
 * Domain types only: backends never import generated proto code. Errors a
 * backend throws are `BerthError`s (services/common/errors.ts, re-exported
 * by the kit), each carrying the status the caller sees; anything else is
 * reported as an internal error.
 *
 * The code-runner types at the end ({@link CodeRunnersFactory} and the
 * types it names) are the executor's hook for the docker backend's
 * execute_code containers, not part of the public kit.
 */
import type { Duplex } from 'node:stream';
import type { BerthConfig } from '../common/config.js';
import type { Logger } from '../common/logging.js';

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

/** Why a task's environment is released: EndTask, the idle reaper, or the executor shutting down. */
export type DisposeReason = 'end_task' | 'idle' | 'shutdown';

/**
 * One task's environment on a backend: a host directory, a container, a
 * remote shell. The executor makes one per task (on its first call) and
 * disposes it when the task ends or idles out; calls on one environment may
 * run concurrently (a background process beside a foreground command, file
 * operations meanwhile). The kit's `ChannelEnvironment` implements all of it
 * for a sandbox reached through a channel (the exec agent over a stream).
 */
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
   * bootstrap script ({@link import('./backends/shared/shell-bootstrap.js').buildPreparedSnapshot})
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
  /**
   * Suspends the environment: no CPU, as little memory as the backend
   * allows; files, volumes and (where `processesKept`) running processes
   * stay. Nothing else is called on it until {@link resume}. Required when
   * `capabilities.lifecycle.suspend`.
   */
  suspend?(): Promise<{ readonly processesKept: boolean }>;
  /** Brings a suspended environment back, ready for commands. */
  resume?(): Promise<void>;

  exec(options: ExecOptions): Promise<ExecResult>;
  startBackground(options: BackgroundOptions): Promise<BackgroundHandle>;

  /** Absolute paths only; rejects with a NotFound domain error when missing. */
  readFile(absPath: string): Promise<Buffer>;
  /** Absolute paths only; creates parent directories. */
  writeFile(absPath: string, data: Uint8Array): Promise<void>;
  stat(absPath: string): Promise<FileStat>;

  /**
   * Kill everything still running and remove the environment. Idempotent.
   * `reason`: why the task is released (EndTask, idle, shutdown); a backend
   * that keeps a task's files across releases drops them on EndTask.
   */
  dispose(reason?: DisposeReason): Promise<void>;
}

export interface BackendCapabilities {
  /** For logs, metrics and messages (`docker`, `subprocess`). */
  readonly name: string;
  /** Whether {@link ExecOptions.pty} and {@link BackgroundOptions.pty} work (the conformance suite checks them when true). */
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
  /** What the backend can do with an environment's life (snapshot, fork, suspend); absent: none of it. */
  readonly lifecycle?: LifecycleCapabilities;
}

/**
 * What a backend can do with the life of a task's environment. Each false
 * makes the matching Dispatcher call answer FAILED_PRECONDITION naming the
 * backend and, from `notes`, why.
 */
export interface LifecycleCapabilities {
  /** Snapshots of an environment, and new environments forked from them (files; the executor adds the shell state). */
  readonly snapshot: boolean;
  /** Snapshots also hold memory and running processes (checkpoint/restore); false: files and shell state only. */
  readonly processes: boolean;
  /** Environments can be suspended (no CPU, as little memory as the backend allows) and resumed. */
  readonly suspend: boolean;
  /** Why a capability is off or weaker here (e.g. what `criu check` said), for `berth doctor` and refusals. */
  readonly notes?: readonly string[];
}

/**
 * A snapshot of one task's environment as a backend keeps it. The executor
 * makes the id and the shell state; the backend stores them with the files
 * (and memory, where it can) so that any executor of the same backend and
 * host finds the snapshot again, and lists it only once it is complete.
 */
export interface BackendSnapshot {
  /** `snap_` and random characters, made by the executor. */
  readonly id: string;
  /** The tenant that owns it: another tenant never sees it. */
  readonly tenant: string;
  /** The task it was taken of. */
  readonly sourceTaskId: string;
  /** The caller's label; may be empty. */
  readonly label: string;
  readonly createdAtMs: number;
  /** What it takes on the backend's storage. */
  readonly sizeBytes: number;
  /** True only when a fork gets the source's running processes back. */
  readonly includesProcesses: boolean;
  /** The shell state at snapshot time: the cwd, and the text of the runner's snapshot file (variables, functions, aliases). */
  readonly shell: { readonly cwd: string; readonly script: string };
}

/** How {@link Backend.createEnvironment} makes an environment. */
export interface CreateEnvironmentOptions {
  /** A fork: the new environment starts with this snapshot's files (and processes, when it includes them). */
  readonly fromSnapshot?: BackendSnapshot;
}

/**
 * One line of `berth doctor`: `ok`, `warn` (works, but weaker or slower than
 * it could be) or `fail` (with what to do).
 */
export interface DiagnosticFinding {
  readonly verdict: 'ok' | 'warn' | 'fail';
  readonly text: string;
}

/**
 * When `berth doctor` asks about its throwaway task: `live` once the task
 * ran its commands (its environment is still there), `released` after the
 * task was released.
 */
export type DiagnosisPhase = 'live' | 'released';

/** A terminal backend: creates per-task environments. */
export interface Backend {
  readonly capabilities: BackendCapabilities;
  /**
   * A new environment for task `key`, ready for commands. Called once per
   * task until that environment is disposed (then again, for a fresh one).
   * Rejects with a `BerthError` (`UnavailableError` when the sandbox cannot
   * be made now) when it cannot.
   */
  createEnvironment(key: TaskKey, options?: CreateEnvironmentOptions): Promise<BackendEnvironment>;
  /**
   * Snapshots task `key`'s environment `env` (no foreground command runs on
   * it meanwhile) as `snapshot` describes, filling in `sizeBytes` and
   * `includesProcesses`. Crash-safe: a snapshot interrupted half-way is never
   * listed, and what it left is removed later. Required when
   * `capabilities.lifecycle.snapshot`.
   */
  snapshot?(key: TaskKey, env: BackendEnvironment, snapshot: Omit<BackendSnapshot, 'sizeBytes' | 'includesProcesses'>): Promise<BackendSnapshot>;
  /** The complete snapshots of `tenant` this backend holds. Required with `snapshot`. */
  listSnapshots?(tenant: string): Promise<BackendSnapshot[]>;
  /** Deletes one of `tenant`'s snapshots; false when it has none of that id. Forks made from it keep working. */
  deleteSnapshot?(tenant: string, id: string): Promise<boolean>;
  /**
   * What only this backend can tell `berth doctor` about task `key`: while
   * `live`, how commands reach its sandbox and whether the sandbox's limits
   * and network policy hold; once `released`, whether the release did its
   * work, after removing what such a task alone leaves behind (volumes kept
   * for a task's return, a stopped cloud sandbox). Failures to check are
   * findings (`warn`), not errors. Optional.
   */
  diagnose?(key: TaskKey, phase: DiagnosisPhase): Promise<DiagnosticFinding[]>;
  /** The warm pool's state for metrics: ready sandboxes and the number it aims at now. Optional. */
  warmPoolStatus?(): { readonly ready: number; readonly target: number };
  /** Release everything the backend holds (connections, containers it created). */
  close(): Promise<void>;
}

/**
 * How a docker container came to serve a task: `cold` started for it,
 * `warm` claimed from the warm pool, `replacement` started because the
 * task's container was lost.
 */
export type ContainerStartKind = 'cold' | 'warm' | 'replacement';

/** What the docker backend reports: `role` is `task` or `code` (execute_code's code containers). */
export type ContainerStartSink = (role: string, kind: ContainerStartKind) => void;

/**
 * Makes a started backend from the executor's validated configuration: the
 * default export of a backend package. Reject (a `BerthError` saying what to
 * set) when the configuration does not fit; the executor then does not
 * start. `onContainerStart`: told of each docker container made ready
 * (metrics); other backends leave it unused.
 */
export type BackendFactory = (config: BerthConfig, logger: Logger, onContainerStart?: ContainerStartSink) => Promise<Backend>;

/**
 * Where execute_code runs a script for a task whose own environment can
 * run none (neither {@link BackendEnvironment.rpcDir} nor
 * {@link BackendEnvironment.rpcRelay}): a sandbox of its own beside the
 * task's environment, with a directory shared with the executor.
 */
export type CodeRunnerEnvironment = BackendEnvironment & {
  readonly rpcDir: { readonly hostPath: string; readonly sandboxPath: string };
};

/** execute_code's per-task code-runner environments, for a backend whose capabilities do not share an rpc dir. */
export interface CodeRunnerEnvironments {
  /** A new code-runner environment for the task (the caller disposes it with the task's environment). */
  create(key: TaskKey): Promise<CodeRunnerEnvironment>;
  /** Removes every one still there. */
  close(): Promise<void>;
}

/**
 * Makes the code-runner environments of the `backend` named (for messages)
 * from config; undefined when config turns them off (such backends then
 * refuse execute_code).
 */
export type CodeRunnersFactory = (
  config: BerthConfig,
  backend: string,
  logger: Logger,
  onContainerStart?: ContainerStartSink,
) => Promise<CodeRunnerEnvironments | undefined>;
