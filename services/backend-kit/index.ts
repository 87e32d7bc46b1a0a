/**
 * `berth/backend-kit`: what a terminal backend is built from, for Berth's
 * own backends and a third party's alike. A backend package's default
 * export is a {@link BackendFactory}; `terminal.backend` names the package
 * (docs/backends/writing-a-backend.md), and `berth/conformance` proves it.
 *
 * Every name exported here is semver-stable (docs/versioning.md): within a
 * major version it is only added to. What is not exported here (the rest of
 * `services/executor/`) is internal and may change in any release.
 */

// --- the contract: a backend, its task environments, what they run --------------
export type {
  Backend,
  BackendCapabilities,
  BackendEnvironment,
  BackendFactory,
  BackgroundHandle,
  BackgroundOptions,
  ContainerStartKind,
  ContainerStartSink,
  DiagnosisPhase,
  DiagnosticFinding,
  ExecOptions,
  ExecResult,
  FileStat,
  RelayedSocket,
  RpcRelay,
  TaskKey,
} from '../executor/backend.js';
export { taskKeyString } from '../executor/backend.js';
/** What a factory is given: the validated configuration and a logger. */
export type { BerthConfig } from '../common/config.js';
export type { Logger } from '../common/logging.js';

// --- errors: each carries the status the caller sees ---------------------------
export {
  BerthError,
  FailedPreconditionError,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  ResourceExhaustedError,
  UnavailableError,
  type ErrorCode,
} from '../common/errors.js';
export {
  FileNotFoundError,
  FilePermissionError,
  FileRefusedError,
  FileSpaceError,
  errnoName,
  fileErrorFromErrno,
  fileErrorFromNode,
  fileTooLargeError,
  isDirectoryError,
  isFileError,
  notRegularFileError,
  parentNotDirectoryError,
  type FileError,
  type FileErrorFields,
  type FileErrorReason,
  type FileOp,
} from '../executor/backends/shared/file-errors.js';

// --- guards every environment puts around the caller's code --------------------
export { assertAbsolute, assertNotReleased, deliverExit, deliverOutput } from '../executor/backends/shared/guards.js';
export { ExecDeadline, interruptedBeforeStart } from '../executor/backends/shared/exec-deadline.js';
export { withoutProviderSecrets, isProviderSecretName } from '../executor/backends/shared/secret-names.js';
export { executorStateDir } from '../executor/backends/shared/state-root.js';

// --- files on a host the executor reaches directly ------------------------------
export { readRegularFile, writeRegularFile } from '../executor/backends/shared/host-files.js';
export { MAX_READ_FILE_BYTES, specialFileKind, type SpecialFileKind } from '../executor/backends/shared/file-limits.js';

// --- the channel environment: a backend that reaches its sandbox through a channel
export {
  ChannelEnvironment,
  PlacedChannelEnvironment,
  newAgentReplacement,
  type ChannelEnvironmentSettings,
  type ChannelLink,
  type PlacedLink,
  type DroppedStreamWords,
  type RelayingChannel,
  type ReplaceCause,
  type Replacement,
} from '../executor/backends/shared/channel-environment.js';
export { LiveLink, type CommandStart, type LinkRenewal } from '../executor/backends/shared/live-link.js';
export {
  SandboxLostError,
  fileErrnoError,
  type ProcessExit,
  type SandboxChannel,
  type SandboxProcess,
  type SandboxStat,
  type SpawnOptions,
} from '../executor/backends/shared/sandbox-channel.js';

// --- the exec agent: one channel for any sandbox that runs python3 --------------
export { AgentChannel } from '../executor/backends/shared/agent/agent-channel.js';
export {
  AgentUnavailableError,
  startStdioAgent,
  type AgentProcess,
  type AgentSpawn,
  type AgentUnavailableReason,
  type StartStdioAgentOptions,
} from '../executor/backends/shared/agent/stdio-agent.js';
export { findAgentScript } from '../executor/backends/shared/agent/agent-script.js';
