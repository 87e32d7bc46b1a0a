/**
 * Tool-call spans: one per call a client makes (`execute_tool NAME`, kind
 * SERVER, continuing the client's trace), and one per call an execute_code
 * script makes back through RunCode (kind INTERNAL, a child of the script's
 * execute_code span). The executor and backend spans hang below them.
 */
import { Status } from 'nice-grpc';
import { statusOf } from '../common/grpc-errors.js';
import type { TaskClient, TaskCodeRunRequest, TaskCodeRunResult } from '../common/task-client.js';
import { SPAN_ATTRIBUTES as A, type SpanAttributes, type Tracing } from '../common/tracing/tracing.js';
import { resultHasError } from './dispatcher-metrics.js';

/** Longest tool name or task id copied into an attribute: both come from clients. */
const MAX_ATTRIBUTE_ID_CHARS = 128;

/**
 * The `exit_code` of a result object (terminal's), found without parsing:
 * results can be large. In JSON text an unescaped `"` followed by
 * `exit_code":` can only open that key (see resultHasError).
 */
export function resultExitCode(result: string): number | undefined {
  for (let i = result.indexOf('"exit_code":'); i !== -1; i = result.indexOf('"exit_code":', i + 12)) {
    let backslashes = 0;
    while (result.charCodeAt(i - 1 - backslashes) === 0x5c) backslashes += 1;
    if (backslashes % 2 === 1) continue;
    const match = /^\s*(-?\d+)/.exec(result.slice(i + 12, i + 32));
    if (match) return Number(match[1]);
  }
  return undefined;
}

export interface ToolCallSpanInput {
  readonly tool: string;
  readonly tenant: string;
  readonly taskId: string;
  /** A script's call through execute_code rather than a client's. */
  readonly nested: boolean;
}

export class ToolCallTracing {
  readonly #tracing: Tracing;
  readonly #knownTool: (name: string) => boolean;

  /** `knownTool`: whether the registry has a tool (others are named `unknown` in span names). */
  constructor(tracing: Tracing, knownTool: (name: string) => boolean) {
    this.#tracing = tracing;
    this.#knownTool = knownTool;
  }

  /** Runs one tool call in its span; the outcome, exit code and failure status go on the span. */
  run(call: ToolCallSpanInput, fn: () => Promise<string>): Promise<string> {
    const attributes: Record<string, string> = {
      [A.operation]: 'execute_tool',
      [A.toolName]: call.tool.slice(0, MAX_ATTRIBUTE_ID_CHARS),
      [A.tenant]: call.tenant,
    };
    if (this.#tracing.includeTaskIds) attributes[A.task] = call.taskId.slice(0, MAX_ATTRIBUTE_ID_CHARS);
    // Span names are grouped on by backends: a client must not be able to make up new ones.
    const name = `execute_tool ${this.#knownTool(call.tool) ? call.tool : 'unknown'}`;
    return this.#tracing.span(name, { kind: call.nested ? 'internal' : 'server', attributes }, async (span) => {
      try {
        const result = await fn();
        const outcome: Record<string, string | number> = { [A.outcome]: resultHasError(result) ? 'tool_error' : 'success' };
        const exitCode = resultExitCode(result);
        if (exitCode !== undefined) outcome[A.exitCode] = exitCode;
        span.setAttributes(outcome);
        return result;
      } catch (err) {
        span.setAttributes({ [A.outcome]: Status[statusOf(err)] ?? 'UNKNOWN' });
        throw err;
      }
    });
  }

  /** Adds attributes to the current tool call's span (the backend, once routed). */
  annotate(attributes: SpanAttributes): void {
    this.#tracing.annotate(attributes);
  }

  /** A TaskClient whose execute_code scripts' tool calls each get a span. */
  traceScriptCalls(task: TaskClient, call: { readonly tenant: string; readonly taskId: string; readonly backend: string }): TaskClient {
    const inner = task.runCode?.bind(task);
    if (inner === undefined) return task;
    return {
      exec: (request) => task.exec(request),
      readFile: (path) => task.readFile(path),
      writeFile: (path, content) => task.writeFile(path, content),
      stat: (path) => task.stat(path),
      startBackground: (request) => task.startBackground(request),
      process: (request) => task.process(request),
      ...(task.mcpRequest ? { mcpRequest: task.mcpRequest.bind(task) } : {}),
      runCode: (request: TaskCodeRunRequest): Promise<TaskCodeRunResult> =>
        inner({
          ...request,
          onToolCall: (toolCall) =>
            this.run({ tool: toolCall.tool, tenant: call.tenant, taskId: call.taskId, nested: true }, () => {
              this.#tracing.annotate({ [A.backend]: call.backend });
              return request.onToolCall(toolCall);
            }),
        }),
    };
  }
}
