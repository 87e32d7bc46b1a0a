/**
 * TaskClient over the executor's gRPC API: how the dispatcher's tools reach a
 * task's environment. Errors from the executor come back as domain errors.
 */
import {
  CodeExecutionMode,
  type ExecutorClient,
  type RunCodeClientMessage,
  type TaskRef,
} from '../../gen/berth/v1/executor.js';
import { Metadata, type CallOptions } from 'nice-grpc';
import { AsyncQueue } from '../../common/async-queue.js';
import { fromClientError } from '../../common/grpc-errors.js';
import { CALL_ID_HEADER, InterruptedBeforeStartError } from '../../common/interrupts.js';
import { linkSignals } from '../../common/linked-signal.js';
import type {
  TaskBackgroundRequest,
  TaskClient,
  TaskCodeRunRequest,
  TaskCodeRunResult,
  TaskExecRequest,
  TaskExecResult,
  TaskFile,
  TaskMcpRequest,
  TaskMcpResult,
  TaskProcessRequest,
  TaskStat,
  TaskWriteResult,
} from '../../common/task-client.js';

async function mapErrors<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw fromClientError(err);
  }
}

/** The tool call a task client works for: its id (sent to the executor) and its Interrupt. */
export interface ToolCallInterrupt {
  readonly callId: string;
  /** Aborted by an Interrupt of the task while the call runs. */
  readonly signal: AbortSignal;
}

/** What a command interrupted before it reached the executor reports: nothing ran. */
const INTERRUPTED_EXEC: TaskExecResult = { output: '', exitCode: 130, timedOut: false, interrupted: true, notices: [] };

export class ExecutorTaskClient implements TaskClient {
  readonly #client: ExecutorClient;
  readonly #task: TaskRef;
  readonly #signal: AbortSignal | undefined;
  readonly #call: ToolCallInterrupt | undefined;

  /**
   * `signal` cancels every call made through this client (client gone,
   * server shutdown). `call`: the tool call's id goes with every executor
   * call, so the executor's InterruptTask reaches them; once its signal is
   * aborted, commands and scripts answer "interrupted" without reaching the
   * executor and other operations throw InterruptedBeforeStartError.
   */
  constructor(client: ExecutorClient, task: TaskRef, signal?: AbortSignal, call?: ToolCallInterrupt) {
    this.#client = client;
    this.#task = task;
    this.#signal = signal;
    this.#call = call;
  }

  get #interrupted(): boolean {
    return this.#call?.signal.aborted === true;
  }

  /** `signal`: this client's, or one linked from it and the request's (see {@link linkSignals}). */
  #options(signal: AbortSignal | undefined = this.#signal): CallOptions {
    return {
      ...(signal ? { signal } : {}),
      ...(this.#call ? { metadata: Metadata({ [CALL_ID_HEADER]: this.#call.callId }) } : {}),
    };
  }

  /** Throws when the tool call was interrupted: `what` is not started. */
  #startOrRefuse(what: string): void {
    if (this.#interrupted) throw new InterruptedBeforeStartError(what);
  }

  exec(request: TaskExecRequest): Promise<TaskExecResult> {
    if (this.#interrupted) return Promise.resolve(INTERRUPTED_EXEC);
    return mapErrors(async () => {
      const signal = linkSignals(this.#signal, request.signal);
      try {
        const stream = this.#client.exec(
          {
            task: this.#task,
            command: request.command,
            timeoutMs: request.timeoutMs,
            workdir: request.workdir ?? '',
            stdin: request.stdin === undefined ? Buffer.alloc(0) : Buffer.from(request.stdin, 'utf8'),
            pty: request.pty ?? false,
            stateless: request.stateless ?? false,
            maxOutputChars: request.maxOutputChars ?? 0,
            streamOutput: request.onOutput !== undefined,
          },
          this.#options(signal.signal),
        );
        const decoder = new TextDecoder('utf-8');
        for await (const event of stream) {
          const e = event.event;
          if (e?.$case === 'output') {
            request.onOutput?.(decoder.decode(e.value.data, { stream: true }));
          } else if (e?.$case === 'exit') {
            return {
              output: e.value.output,
              exitCode: e.value.exitCode,
              timedOut: e.value.timedOut,
              interrupted: e.value.interrupted,
              notices: e.value.notices,
              // Both or neither: an executor that predates the fields sends two empty strings.
              ...(e.value.startCwd !== '' && e.value.endCwd !== ''
                ? { startCwd: e.value.startCwd, endCwd: e.value.endCwd }
                : {}),
              ...(e.value.environmentRecreated ? { environmentRecreated: true } : {}),
            };
          }
        }
        throw new Error('executor closed the Exec stream without an exit event');
      } finally {
        signal.done();
      }
    });
  }

  readFile(path: string): Promise<TaskFile> {
    return mapErrors(async () => {
      this.#startOrRefuse('the read');
      const r = await this.#client.readFile({ task: this.#task, path }, this.#options());
      return { absPath: r.absPath, content: Buffer.from(r.content) };
    });
  }

  writeFile(path: string, content: string | Uint8Array): Promise<TaskWriteResult> {
    return mapErrors(async () => {
      this.#startOrRefuse('the write');
      const bytes = typeof content === 'string' ? Buffer.from(content, 'utf8') : Buffer.from(content);
      const r = await this.#client.writeFile({ task: this.#task, path, content: bytes }, this.#options());
      return { absPath: r.absPath, bytesWritten: r.bytesWritten, dirsCreated: r.dirsCreated };
    });
  }

  stat(path: string): Promise<TaskStat> {
    return mapErrors(async () => {
      this.#startOrRefuse('the stat');
      const r = await this.#client.statFile({ task: this.#task, path }, this.#options());
      return { absPath: r.absPath, exists: r.exists, isDirectory: r.isDirectory, sizeBytes: r.sizeBytes };
    });
  }

  startBackground(request: TaskBackgroundRequest): Promise<{ sessionId: string; pid: number }> {
    return mapErrors(async () => {
      this.#startOrRefuse('the background start');
      const r = await this.#client.startBackground(
        {
          task: this.#task,
          command: request.command,
          workdir: request.workdir ?? '',
          pty: request.pty ?? false,
          pipeStdin: request.pipeStdin ?? false,
          notifyOnComplete: request.notifyOnComplete ?? false,
          watchPatterns: [...(request.watchPatterns ?? [])],
          heartbeatSeconds: request.heartbeatSeconds ?? 0,
          persistOnRelease: request.persistOnRelease ?? false,
        },
        this.#options(),
      );
      return { sessionId: r.sessionId, pid: r.pid };
    });
  }

  /**
   * Runs an execute_code script over the RunCode stream, answering each of
   * its tool calls through `request.onToolCall` (concurrently, in any order).
   */
  runCode(request: TaskCodeRunRequest): Promise<TaskCodeRunResult> {
    if (this.#interrupted) {
      return Promise.resolve({ stdout: '', stderr: '', exitCode: 130, timedOut: false, interrupted: true, ranIn: '', interpreter: '', notices: [] });
    }
    return mapErrors(async () => {
      const outgoing = new AsyncQueue<RunCodeClientMessage>();
      outgoing.push({
        message: {
          $case: 'start',
          value: {
            task: this.#task,
            code: request.code,
            stubModule: request.stubModule,
            mode:
              request.mode === 'strict'
                ? CodeExecutionMode.CODE_EXECUTION_MODE_STRICT
                : CodeExecutionMode.CODE_EXECUTION_MODE_PROJECT,
            timeoutMs: request.timeoutMs,
            maxStdoutBytes: request.maxStdoutBytes,
            maxStderrBytes: request.maxStderrBytes,
            envPassthrough: [...request.envPassthrough],
            credentialEnv: [...request.credentialEnv],
            allowedTools: [...request.allowedTools],
            allowHostSubprocess: request.allowHostSubprocess,
            timezone: request.timezone ?? '',
          },
        },
      });
      const signal = linkSignals(this.#signal, request.signal);
      try {
        const responses = this.#client.runCode(outgoing, this.#options(signal.signal));
        for await (const message of responses) {
          const m = message.message;
          if (m?.$case === 'toolCall') {
            const { callId, tool, argsJson } = m.value;
            void request
              .onToolCall({ tool, argsJson })
              .catch((err: unknown) =>
                JSON.stringify({ error: `[TOOL_ERROR] Error executing ${tool}: ${(err as Error).message}` }),
              )
              .then((resultJson) => outgoing.push({ message: { $case: 'toolResult', value: { callId, resultJson } } }));
          } else if (m?.$case === 'result') {
            const r = m.value;
            return {
              stdout: r.stdout,
              stderr: r.stderr,
              exitCode: r.exitCode,
              timedOut: r.timedOut,
              interrupted: r.interrupted,
              ranIn: r.ranIn,
              interpreter: r.interpreter,
              notices: r.notices,
            };
          }
        }
        throw new Error('executor closed the RunCode stream without a result');
      } finally {
        signal.done();
        outgoing.close();
      }
    });
  }

  process(request: TaskProcessRequest): Promise<string> {
    return mapErrors(async () => {
      const r = await this.#client.processAction(
        {
          task: this.#task,
          action: request.action,
          sessionId: request.sessionId ?? '',
          data: request.data ?? '',
          timeoutMs: request.timeoutMs ?? 0,
          offset: request.offset ?? 0,
          limit: request.limit ?? 0,
          hasOffset: request.offset !== undefined,
          hasLimit: request.limit !== undefined,
        },
        this.#options(),
      );
      return r.resultJson;
    });
  }

  mcpRequest(request: TaskMcpRequest): Promise<TaskMcpResult> {
    return mapErrors(async () => {
      const r = await this.#client.mcpRequest(
        {
          task: this.#task,
          serverName: request.serverName,
          serverJson: request.serverJson,
          method: request.method,
          tool: request.tool ?? '',
          argumentsJson: request.argumentsJson ?? '',
        },
        { signal: this.#signal },
      );
      return r.error !== '' ? { error: r.error } : { resultJson: r.resultJson };
    });
  }
}
