/**
 * gRPC adapter for the Executor service over {@link TaskEnvironments}.
 * Converts messages only; environments, runner and processes live below.
 */
import type { CallContext } from 'nice-grpc';
import { AsyncQueue } from '../common/async-queue.js';
import { NO_CONTAINERS, type TaskContainerLimits } from '../common/container-limits.js';
import { InvalidArgumentError } from '../common/errors.js';
import type { ExecEvent, ExecutorServiceImplementation, TaskRef } from '../gen/berth/v1/executor.js';
import type { TaskKey } from './backend.js';
import { CODE_CONTAINER, type CodeRunner } from './code-execution/code-runner.js';
import { serveRunCode } from './code-execution/run-code-stream.js';
import type { TaskEnvironments } from './task-environment.js';

/** Longest a single Exec may run, whatever the request says (the terminal tool caps foreground at 600 s). */
const MAX_EXEC_TIMEOUT_MS = 24 * 60 * 60 * 1000;

function keyOf(task: TaskRef | undefined): TaskKey {
  if (!task || task.tenant === '' || task.taskId === '') {
    throw new InvalidArgumentError('task.tenant and task.task_id are required');
  }
  return { tenant: task.tenant, taskId: task.taskId };
}

export interface ExecutorIdentity {
  readonly executorId: string;
}

const NONE: TaskContainerLimits = { perTask: NO_CONTAINERS, perCodeContainer: NO_CONTAINERS };

export function createExecutorService(
  environments: TaskEnvironments,
  identity: ExecutorIdentity,
  shutdownSignal: AbortSignal,
  codeRunner: CodeRunner,
  limits: TaskContainerLimits = NONE,
): ExecutorServiceImplementation {
  const callSignal = (context: CallContext) => AbortSignal.any([context.signal, shutdownSignal]);

  return {
    async *exec(request, context): AsyncGenerator<ExecEvent> {
      const key = keyOf(request.task);
      const timeoutMs = Math.min(request.timeoutMs > 0 ? request.timeoutMs : 180_000, MAX_EXEC_TIMEOUT_MS);
      const events = new AsyncQueue<ExecEvent>();
      const run = environments
        .exec(key, {
          command: request.command,
          timeoutMs,
          ...(request.workdir ? { workdir: request.workdir } : {}),
          ...(request.stdin.length > 0 ? { stdin: request.stdin.toString('utf8') } : {}),
          pty: request.pty,
          stateless: request.stateless,
          ...(request.maxOutputChars > 0 ? { maxOutputChars: request.maxOutputChars } : {}),
          signal: callSignal(context),
          ...(request.streamOutput
            ? {
                onOutput: (text: string) =>
                  events.push({ event: { $case: 'output', value: { data: Buffer.from(text, 'utf8') } } }),
              }
            : {}),
        })
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

    async startBackground(request) {
      const r = await environments.startBackground(keyOf(request.task), {
        command: request.command,
        ...(request.workdir ? { workdir: request.workdir } : {}),
        pty: request.pty,
        notifyOnComplete: request.notifyOnComplete,
        watchPatterns: request.watchPatterns,
      });
      return { sessionId: r.sessionId, pid: r.pid };
    },

    async processAction(request, context) {
      const resultJson = await environments.process(
        keyOf(request.task),
        {
          action: request.action,
          ...(request.sessionId ? { sessionId: request.sessionId } : {}),
          ...(request.data ? { data: request.data } : {}),
          ...(request.timeoutMs > 0 ? { timeoutMs: request.timeoutMs } : {}),
          ...(request.hasOffset ? { offset: request.offset } : {}),
          ...(request.hasLimit ? { limit: request.limit } : {}),
        },
        callSignal(context),
      );
      return { resultJson };
    },

    async readFile(request) {
      const r = await environments.readFile(keyOf(request.task), request.path);
      return { absPath: r.absPath, content: r.content };
    },

    async writeFile(request) {
      const r = await environments.writeFile(keyOf(request.task), request.path, request.content);
      return { absPath: r.absPath, bytesWritten: r.bytesWritten, dirsCreated: r.dirsCreated };
    },

    async statFile(request) {
      const r = await environments.stat(keyOf(request.task), request.path);
      return { absPath: r.absPath, exists: r.exists, isDirectory: r.isDirectory, sizeBytes: r.sizeBytes };
    },

    async interruptTask(request) {
      return { interrupted: environments.interrupt(keyOf(request.task)) };
    },

    async releaseTask(request) {
      return { released: await environments.release(keyOf(request.task)) };
    },

    runCode(requests, context) {
      return serveRunCode(codeRunner, requests, callSignal(context));
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

    async capabilities() {
      const caps = environments.capabilities;
      return {
        backend: caps.name,
        pty: caps.pty,
        hostFilesystem: caps.hostFilesystem,
        executorId: identity.executorId,
      };
    },
  };
}
