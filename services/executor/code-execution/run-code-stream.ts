/**
 * The executor's side of the RunCode bidi stream: the first client message
 * starts the script; each of the script's tool calls goes out as `tool_call`
 * and waits for the matching `tool_result`; the stream ends with `result`.
 * If the client cancels or closes its side before the result, the script is
 * killed: nobody would answer its tool calls any more.
 */
import { AsyncQueue } from '../../common/async-queue.js';
import { InvalidArgumentError } from '../../common/errors.js';
import {
  CodeExecutionMode,
  type RunCodeClientMessage,
  type RunCodeServerMessage,
  type RunCodeStart,
} from '../../gen/berth/v1/executor.js';
import type { TaskKey } from '../backend.js';
import type { CallRegistration } from '../call-interrupts.js';
import type { CodeRunner } from './code-runner.js';

function keyOf(start: RunCodeStart): TaskKey {
  const task = start.task;
  if (!task || task.tenant === '' || task.taskId === '') {
    throw new InvalidArgumentError('task.tenant and task.task_id are required');
  }
  return { tenant: task.tenant, taskId: task.taskId };
}

function modeOf(mode: CodeExecutionMode): 'project' | 'strict' {
  switch (mode) {
    case CodeExecutionMode.CODE_EXECUTION_MODE_STRICT:
      return 'strict';
    case CodeExecutionMode.CODE_EXECUTION_MODE_PROJECT:
    case CodeExecutionMode.CODE_EXECUTION_MODE_UNSPECIFIED:
      return 'project';
    default:
      throw new InvalidArgumentError(`unknown code execution mode ${String(mode)}`);
  }
}

interface PendingCall {
  readonly resolve: (resultJson: string) => void;
  readonly reject: (err: Error) => void;
}

/**
 * Serves one RunCode call. `signal` is the call's (client gone, executor
 * shutting down); `register` enrols it for InterruptTask once its task is known.
 */
export async function* serveRunCode(
  runner: CodeRunner,
  requests: AsyncIterable<RunCodeClientMessage>,
  signal: AbortSignal,
  register?: (key: TaskKey) => CallRegistration,
): AsyncGenerator<RunCodeServerMessage> {
  const input = requests[Symbol.asyncIterator]();
  const first = await input.next();
  const message = first.done ? undefined : first.value.message;
  if (message?.$case !== 'start') throw new InvalidArgumentError('RunCode must begin with a start message');
  const start = message.value;
  const key = keyOf(start);
  const mode = modeOf(start.mode);
  const call = register?.(key);

  const out = new AsyncQueue<RunCodeServerMessage>();
  const pending = new Map<string, PendingCall>();
  const inputClosed = new AbortController();
  let finished = false;
  let nextCallId = 0;

  const pump = (async () => {
    try {
      for (;;) {
        const next = await input.next();
        if (next.done) break;
        const m = next.value.message;
        if (m?.$case !== 'toolResult') continue;
        const call = pending.get(m.value.callId);
        if (call === undefined) continue; // Its script connection is gone; nothing waits for it.
        pending.delete(m.value.callId);
        call.resolve(m.value.resultJson);
      }
    } catch {
      // The call was cancelled; `signal` covers it.
    } finally {
      for (const call of pending.values()) call.reject(new Error('the caller closed the RunCode stream'));
      pending.clear();
      if (!finished) inputClosed.abort();
    }
  })();

  const run = runner
    .run(key, {
      code: start.code,
      stubModule: start.stubModule,
      mode,
      timeoutMs: start.timeoutMs,
      maxStdoutBytes: start.maxStdoutBytes,
      maxStderrBytes: start.maxStderrBytes,
      envPassthrough: start.envPassthrough,
      credentialEnv: start.credentialEnv,
      allowedTools: start.allowedTools,
      allowHostSubprocess: start.allowHostSubprocess,
      timezone: start.timezone,
      signal: AbortSignal.any([signal, inputClosed.signal, ...(call ? [call.signal] : [])]),
      onToolCall: ({ tool, argsJson }) => {
        if (inputClosed.signal.aborted) return Promise.reject(new Error('the caller closed the RunCode stream'));
        const callId = String(++nextCallId);
        const answer = new Promise<string>((resolve, reject) => pending.set(callId, { resolve, reject }));
        out.push({ message: { $case: 'toolCall', value: { callId, tool, argsJson } } });
        return answer;
      },
    })
    .then((result) => {
      finished = true;
      out.push({
        message: {
          $case: 'result',
          value: {
            stdout: result.stdout,
            stderr: result.stderr,
            exitCode: result.exitCode,
            timedOut: result.timedOut,
            interrupted: result.interrupted,
            ranIn: result.ranIn,
            notices: [...result.notices],
            interpreter: result.interpreter,
          },
        },
      });
    })
    .finally(() => {
      finished = true;
      call?.end();
      out.close();
    });
  // Handled below; marked now so a cancelled call (no one awaiting) does not leave an unhandled rejection.
  run.catch(() => undefined);
  yield* out;
  await run;
  void pump;
}
