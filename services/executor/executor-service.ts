/**
 * gRPC adapter for the Executor service over {@link TaskEnvironments}.
 * Converts messages only; environments, runner and processes live below.
 */
import type { CallContext } from 'nice-grpc';
import { AsyncQueue } from '../common/async-queue.js';
import { NO_CONTAINERS, type TaskContainerLimits } from '../common/container-limits.js';
import { InvalidArgumentError } from '../common/errors.js';
import { CALL_ID_HEADER } from '../common/interrupts.js';
import { linkSignals } from '../common/linked-signal.js';
import type {
  ExecEvent,
  ExecutorServiceImplementation,
  TaskRef,
  TaskSnapshotRecord,
  WatchTaskEventsResponse,
} from '../gen/berth/v1/executor.js';
import type { BackendSnapshot, TaskKey } from './backend.js';
import { CallInterrupts } from './call-interrupts.js';
import { CODE_CONTAINER, type CodeRunner } from './code-execution/code-runner.js';
import { serveRunCode } from './code-execution/run-code-stream.js';
import { serveMcpRequest } from './mcp/mcp-requests.js';
import type { EgressPolicy } from './mcp/egress-fetch.js';
import type { Logger } from '../common/logging.js';
import type { TaskEnvironments } from './task-environment.js';
import type { TaskEventItem, TaskEventLog } from './task-event-log.js';

/** Longest a single Exec may run, whatever the request says (the terminal tool caps foreground at 600 s). */
const MAX_EXEC_TIMEOUT_MS = 24 * 60 * 60 * 1000;

function keyOf(task: TaskRef | undefined): TaskKey {
  if (!task || task.tenant === '' || task.taskId === '') {
    throw new InvalidArgumentError('task.tenant and task.task_id are required');
  }
  return { tenant: task.tenant, taskId: task.taskId };
}

function tenantOf(tenant: string): string {
  if (tenant === '') throw new InvalidArgumentError('tenant is required');
  return tenant;
}

/** A snapshot as the executor API carries it (the shell state stays with the backend). */
function snapshotRecord(s: BackendSnapshot, backend: string): TaskSnapshotRecord {
  return {
    snapshotId: s.id,
    tenant: s.tenant,
    sourceTaskId: s.sourceTaskId,
    label: s.label,
    createdAtMs: s.createdAtMs,
    sizeBytes: s.sizeBytes,
    includesProcesses: s.includesProcesses,
    backend,
  };
}

export interface ExecutorIdentity {
  readonly executorId: string;
}

/** What McpRequest needs: each tenant's egress policy for HTTP servers, and a logger. */
export interface McpRequestOptions {
  readonly egressFor: (tenant: string) => EgressPolicy;
  readonly logger: Logger;
}

const NONE: TaskContainerLimits = { perTask: NO_CONTAINERS, perCodeContainer: NO_CONTAINERS };

export function createExecutorService(
  environments: TaskEnvironments,
  identity: ExecutorIdentity,
  shutdownSignal: AbortSignal,
  codeRunner: CodeRunner,
  limits: TaskContainerLimits = NONE,
  mcp?: McpRequestOptions,
  events?: TaskEventLog,
): ExecutorServiceImplementation {
  const callSignal = (context: CallContext) => AbortSignal.any([context.signal, shutdownSignal]);
  const calls = new CallInterrupts();
  /**
   * Registers a call of the task before anything else happens, so an
   * Interrupt (or the caller going away) reaches it whatever it waits for.
   */
  async function asCall<T>(task: TaskRef | undefined, context: CallContext, fn: (key: TaskKey, signal: AbortSignal) => Promise<T>): Promise<T> {
    const key = keyOf(task);
    const header = context.metadata.get(CALL_ID_HEADER);
    const call = calls.begin(key, typeof header === 'string' ? header : '');
    // Linked by hand, not with AbortSignal.any: this is every call's path (see linked-signal.ts).
    const signal = linkSignals(context.signal, shutdownSignal, call.signal);
    try {
      return await fn(key, signal.signal);
    } finally {
      signal.done();
      call.end();
    }
  }

  return {
    async *exec(request, context): AsyncGenerator<ExecEvent> {
      const timeoutMs = Math.min(request.timeoutMs > 0 ? request.timeoutMs : 180_000, MAX_EXEC_TIMEOUT_MS);
      const events = new AsyncQueue<ExecEvent>();
      const run = asCall(request.task, context, (key, signal) =>
        environments.exec(key, {
          command: request.command,
          timeoutMs,
          ...(request.workdir ? { workdir: request.workdir } : {}),
          ...(request.stdin.length > 0 ? { stdin: request.stdin.toString('utf8') } : {}),
          pty: request.pty,
          stateless: request.stateless,
          ...(request.maxOutputChars > 0 ? { maxOutputChars: request.maxOutputChars } : {}),
          signal,
          ...(request.streamOutput
            ? {
                onOutput: (text: string) =>
                  events.push({ event: { $case: 'output', value: { data: Buffer.from(text, 'utf8') } } }),
              }
            : {}),
        }),
      )
        .then((result) => {
          events.push({
            event: {
              $case: 'exit',
              value: {
                output: result.output,
                exitCode: result.exitCode,
                timedOut: result.timedOut,
                interrupted: result.interrupted,
                notices: [...result.notices],
                startCwd: result.startCwd ?? '',
                endCwd: result.endCwd ?? '',
                environmentRecreated: result.environmentRecreated ?? false,
              },
            },
          });
        })
        .finally(() => events.close());
      yield* events;
      await run;
    },

    async startBackground(request, context) {
      const r = await asCall(request.task, context, (key, signal) => environments.startBackground(key, {
        command: request.command,
        ...(request.workdir ? { workdir: request.workdir } : {}),
        pty: request.pty,
        pipeStdin: request.pipeStdin,
        notifyOnComplete: request.notifyOnComplete,
        watchPatterns: request.watchPatterns,
        heartbeatSeconds: request.heartbeatSeconds,
        persistOnRelease: request.persistOnRelease,
      }, signal));
      return { sessionId: r.sessionId, pid: r.pid };
    },

    async processAction(request, context) {
      const resultJson = await asCall(request.task, context, (key, signal) => environments.process(
        key,
        {
          action: request.action,
          ...(request.sessionId ? { sessionId: request.sessionId } : {}),
          ...(request.data ? { data: request.data } : {}),
          ...(request.timeoutMs > 0 ? { timeoutMs: request.timeoutMs } : {}),
          ...(request.hasOffset ? { offset: request.offset } : {}),
          ...(request.hasLimit ? { limit: request.limit } : {}),
        },
        signal,
      ));
      return { resultJson };
    },

    async readFile(request, context) {
      const r = await asCall(request.task, context, (key, signal) => environments.readFile(key, request.path, signal));
      return { absPath: r.absPath, content: r.content };
    },

    async writeFile(request, context) {
      const r = await asCall(request.task, context, (key, signal) => environments.writeFile(key, request.path, request.content, signal));
      return { absPath: r.absPath, bytesWritten: r.bytesWritten, dirsCreated: r.dirsCreated };
    },

    async statFile(request, context) {
      const r = await asCall(request.task, context, (key, signal) => environments.stat(key, request.path, signal));
      return { absPath: r.absPath, exists: r.exists, isDirectory: r.isDirectory, sizeBytes: r.sizeBytes };
    },

    async interruptTask(request) {
      return { interrupted: calls.interrupt(keyOf(request.task), request.callIds) };
    },

    async releaseTask(request) {
      return { released: await environments.release(keyOf(request.task)) };
    },

    runCode(requests, context) {
      const header = context.metadata.get(CALL_ID_HEADER);
      const callId = typeof header === 'string' ? header : '';
      return serveRunCode(codeRunner, requests, callSignal(context), (key) => calls.begin(key, callId));
    },

    async taskUsage() {
      const { perTask, perCodeContainer } = limits;
      return {
        tasks: environments.liveTasks().map(({ key, companions }) => {
          const code = companions.includes(CODE_CONTAINER) ? perCodeContainer : NO_CONTAINERS;
          return {
            task: { tenant: key.tenant, taskId: key.taskId },
            held: {
              containers: perTask.containers + code.containers,
              memoryMb: perTask.memoryMb + code.memoryMb,
              cpus: perTask.cpus + code.cpus,
            },
          };
        }),
        perTask,
        perCodeContainer,
      };
    },

    async mcpRequest(request, context) {
      if (mcp === undefined) return { resultJson: '', error: 'this executor does not serve MCP servers' };
      const outcome = await serveMcpRequest(
        { environments, egressFor: mcp.egressFor, logger: mcp.logger },
        keyOf(request.task),
        {
          serverName: request.serverName,
          serverJson: request.serverJson,
          method: request.method,
          tool: request.tool,
          argumentsJson: request.argumentsJson,
        },
        callSignal(context),
      );
      return 'error' in outcome ? { resultJson: '', error: outcome.error } : { resultJson: outcome.resultJson, error: '' };
    },

    async *watchTaskEvents(request, context): AsyncGenerator<WatchTaskEventsResponse> {
      const key = keyOf(request.task);
      if (!events) throw new InvalidArgumentError('this executor keeps no task events');
      const items = events.follow(key, {
        afterId: request.afterId,
        fromLatest: request.fromLatest,
        signal: callSignal(context),
      });
      for await (const item of items) yield { message: eventMessage(item) };
    },

    async snapshotTask(request) {
      const key = keyOf(request.task);
      return { snapshot: snapshotRecord(await environments.lifecycle.snapshot(key, request.label), environments.capabilities.name) };
    },

    async forkTask(request) {
      const key = keyOf(request.task);
      return { snapshot: snapshotRecord(await environments.lifecycle.fork(key, request.snapshotId), environments.capabilities.name) };
    },

    async listTaskSnapshots(request) {
      const name = environments.capabilities.name;
      return { snapshots: (await environments.lifecycle.list(tenantOf(request.tenant))).map((s) => snapshotRecord(s, name)) };
    },

    async deleteTaskSnapshot(request) {
      return { deleted: await environments.lifecycle.delete(tenantOf(request.tenant), request.snapshotId) };
    },

    async capabilities() {
      const caps = environments.capabilities;
      return {
        backend: caps.name,
        pty: caps.pty,
        hostFilesystem: caps.hostFilesystem,
        executorId: identity.executorId,
      };
    },

    async suspendTask(request) {
      return environments.suspend(keyOf(request.task));
    },

    async resumeTask(request) {
      return { resumed: await environments.resume(keyOf(request.task)) };
    },
  };
}

function eventMessage(item: TaskEventItem): WatchTaskEventsResponse['message'] {
  switch (item.kind) {
    case 'subscribed':
      return { $case: 'subscribed', value: { lastId: item.lastId } };
    case 'event':
      return { $case: 'event', value: { id: item.id, eventJson: item.json } };
    case 'dropped':
      return { $case: 'dropped', value: { id: item.id, count: item.count } };
  }
}
