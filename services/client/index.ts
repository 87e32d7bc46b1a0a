/**
 * `berth/client`: the TypeScript client of a Berth dispatcher.
 *
 * ```ts
 * import { BerthClient } from 'berth/client';
 * const berth = new BerthClient('127.0.0.1:7700', { apiKey });
 * const task = berth.task('t1');
 * const r = await task.terminal({ command: 'pwd' });
 * for await (const ev of task.session().run('terminal', { command: 'make' })) { ... }
 * ```
 */
export {
  BerthClient,
  BerthTask,
  INTERACTIVE_METADATA_KEY,
  READ_ONLY_TOOLS,
  type BerthClientOptions,
  type ListToolsOptions,
  type TaskOptions,
  type ToolDefinition,
  type ToolAvailability,
  type ToolListing,
} from './berth-client.js';
export { BerthError } from './errors.js';
export { backoffDelayMs, type RetryOptions } from './retry.js';
export { readPem, type PemSource, type TlsOptions } from './credentials.js';
export {
  BerthSession,
  SessionStream,
  parseResult,
  type ApprovalChoice,
  type ApprovalEvent,
  type ApprovalPrompt,
  type OutputEvent,
  type ResultEvent,
  type SessionEvent,
  type SessionRun,
} from './session.js';
export {
  TaskEventStream,
  type BackgroundEvent,
  type BackgroundEventType,
  type TaskEventsOptions,
} from './task-events.js';
export { BerthSnapshots, type ForkSource, type SnapshotInfo } from './snapshots.js';
export * from './tool-results.js';
export * from './generated/tools.js';
export { Status } from 'nice-grpc';
