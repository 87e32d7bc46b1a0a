/**
 * One MCP server session bridged onto one Berth task: the MCP tools are the
 * tools ListTools gives (same names, descriptions, JSON schemas); each MCP
 * tool call runs on its own Session stream, so cancelling it stops that call
 * only; live output becomes progress notifications; approval requests become
 * elicitations where the MCP client supports them; the task's
 * background-process events (notify_on_complete, watch_patterns, heartbeats)
 * become logging notifications (`notifications/message`, logger
 * `berth.events`) with the text the agent would get.
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
  type CallToolResult,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { Status } from 'nice-grpc';
import type { BerthClient, BerthTask, ToolDefinition } from '../client/berth-client.js';
import { BerthError } from '../client/errors.js';
import type { ApprovalChoice, ApprovalEvent } from '../client/session.js';
import type { BackgroundEvent, TaskEventStream } from '../client/task-events.js';
import { AGENT_LOOP_TOOLS } from '../dispatcher/registry/agent-loop-tools.js';
import { canonicalToolName } from '../dispatcher/registry/tool-aliases.js';

export interface McpBridgeOptions {
  readonly client: BerthClient;
  readonly taskId: string;
  readonly sessionId?: string;
  /** As `berth tools --toolsets`. */
  readonly toolsets: readonly string[];
  /** As `berth tools --disable`. */
  readonly disable: readonly string[];
  readonly version: string;
  /** Told about problems that are not any one call's (stderr in the CLI: stdout may be the protocol). */
  readonly warn: (message: string) => void;
  /**
   * Also list the agent-loop tools (todo_list, memory, ...). Hidden by
   * default: Berth only answers them with an error, so an MCP client that
   * lists them would offer its model tools that never work.
   */
  readonly agentLoopTools?: boolean;
  /** The CLI's one line for a failed call (server unreachable, TLS mismatch), when it has one. */
  readonly describeFailure?: (err: unknown) => Promise<string | undefined>;
  /** The server's backend, when it was learnt before the session started: the instructions say what it isolates. */
  readonly backend?: string;
}

/** What the MCP client's model is told about where the tools run, without claiming a sandbox the backend lacks. */
export function mcpInstructions(taskId: string, backend: string | undefined): string {
  const persist = "The task's working directory, environment variables and background processes persist between calls.";
  switch (backend) {
    case undefined:
    case '':
      return (
        `Tools run in the Berth task '${taskId}'. ${persist} Whether they run in a sandbox depends on the Berth ` +
        "server's backend: on its local backend they run directly on the server's machine, as its user."
      );
    case 'local':
      return (
        `Tools run in the Berth task '${taskId}' on the Berth server's local backend: directly on the server's machine, ` +
        `as its user, with no sandbox. ${persist}`
      );
    case 'ssh':
      return `Tools run in the Berth task '${taskId}' on the Berth server's ssh host, as its configured user. ${persist}`;
    default:
      return `Tools run in the Berth task '${taskId}', in a ${backend} sandbox of its own. ${persist}`;
  }
}

/** JSON-RPC code for a gRPC failure: bad arguments are the client's, an unreachable server is a server error. */
function jsonRpcCode(err: unknown): number {
  if (!(err instanceof BerthError)) return ErrorCode.InternalError;
  if (err.code === Status.INVALID_ARGUMENT) return ErrorCode.InvalidParams;
  // -32000 to -32099 are the implementation's own server errors.
  if (err.code === Status.UNAVAILABLE || err.code === Status.DEADLINE_EXCEEDED) return -32000;
  return ErrorCode.InternalError;
}

/** Whether a result string is a tool error: an `error` that is set (terminal's `"error": null` is not). */
export function isErrorResult(resultJson: string): boolean {
  let parsed: unknown;
  try {
    parsed = JSON.parse(resultJson);
  } catch {
    return false;
  }
  if (typeof parsed !== 'object' || parsed === null || !('error' in parsed)) return false;
  const error = (parsed as { error: unknown }).error;
  return error !== null && error !== '' && error !== false && error !== undefined;
}

/** The MCP tool of an OpenAI tool object. */
export function mcpTool(tool: ToolDefinition): Tool {
  const parameters = tool.function.parameters;
  return {
    name: tool.function.name,
    description: tool.function.description,
    inputSchema: { ...parameters, type: 'object' } as Tool['inputSchema'],
  };
}

function textResult(text: string, isError: boolean): CallToolResult {
  return { content: [{ type: 'text', text }], ...(isError ? { isError: true } : {}) };
}

/** A call that failed as a call, in one line: the CLI's explanation where it has one, else the status and details. */
async function failureMessage(err: unknown, describe: McpBridgeOptions['describeFailure']): Promise<string> {
  const explained = await describe?.(err).catch(() => undefined);
  if (explained !== undefined) return explained;
  return err instanceof BerthError ? `${err.status}: ${err.details}` : (err as Error).message;
}

const CHOICE_TITLES: Readonly<Record<ApprovalChoice, string>> = {
  once: 'Allow once',
  session: 'Allow for this session',
  always: 'Always allow (saved in the server config)',
  deny: 'Deny',
};

/** An MCP server for one Berth task; connect it to a transport, and {@link McpBridge.end} the task on close. */
export class McpBridge {
  readonly server: Server;
  readonly task: BerthTask;
  readonly #options: McpBridgeOptions;
  #known: Set<string> | undefined;
  #events: TaskEventStream | undefined;

  constructor(options: McpBridgeOptions) {
    this.#options = options;
    this.task = options.client.task(options.taskId, options.sessionId === undefined ? {} : { sessionId: options.sessionId });
    this.server = new Server(
      { name: 'berth', version: options.version },
      {
        capabilities: { tools: {}, logging: {} },
        instructions: mcpInstructions(options.taskId, options.backend),
      },
    );
    this.server.oninitialized = () => this.#followEvents();
    this.server.setRequestHandler(ListToolsRequestSchema, async () => {
      try {
        return { tools: await this.#listTools() };
      } catch (err) {
        // The SDK would pass a gRPC status number on as the JSON-RPC code; say what failed instead.
        throw new McpError(jsonRpcCode(err), await failureMessage(err, this.#options.describeFailure), {
          ...(err instanceof BerthError ? { grpc_status: err.status } : {}),
        });
      }
    });
    this.server.setRequestHandler(CallToolRequestSchema, (request, extra) =>
      this.#callTool(request.params.name, request.params.arguments ?? {}, {
        signal: extra.signal,
        requestId: extra.requestId,
        progressToken: extra._meta?.progressToken,
        sendProgress: (params) => extra.sendNotification({ method: 'notifications/progress', params }),
      }),
    );
  }

  async #listTools(): Promise<Tool[]> {
    const listing = await this.#options.client.listTools({ toolsets: this.#options.toolsets, disable: this.#options.disable });
    if (listing.unknownToolsets.length > 0) this.#options.warn(`unknown toolsets ignored: ${listing.unknownToolsets.join(', ')}`);
    const offered = this.#options.agentLoopTools ? listing.tools : listing.tools.filter((t) => !AGENT_LOOP_TOOLS.has(t.function.name));
    this.#known = new Set(offered.map((t) => t.function.name));
    return offered.map(mcpTool);
  }

  async #callTool(
    calledName: string,
    args: Record<string, unknown>,
    call: {
      signal: AbortSignal;
      requestId: string | number;
      progressToken: string | number | undefined;
      sendProgress: (params: { progressToken: string | number; progress: number; message: string }) => Promise<void>;
    },
  ): Promise<CallToolResult> {
    // An old name (process) calls the tool offered under the current one (process_manage).
    const name = canonicalToolName(calledName);
    // Only the tools offered may be called: --toolsets/--disable narrow what the MCP client can do.
    if (this.#known === undefined || !this.#known.has(name)) {
      try {
        await this.#listTools();
      } catch (err) {
        return textResult(JSON.stringify({ error: await failureMessage(err, this.#options.describeFailure) }), true);
      }
    }
    if (!this.#known?.has(name)) return textResult(JSON.stringify({ error: `Unknown tool: ${name}` }), true);

    const canAsk = this.server.getClientCapabilities()?.elicitation?.form !== undefined;
    // Cancelling the MCP request cancels this stream; the server then stops the call's command.
    const session = this.task.session({ signal: call.signal, interactive: canAsk });
    let progress = 0;
    try {
      for await (const event of session.run(name, args)) {
        if (event.type === 'output') {
          if (call.progressToken === undefined || event.text === '') continue;
          progress += event.text.length;
          await call.sendProgress({ progressToken: call.progressToken, progress, message: event.text }).catch(() => undefined);
        } else if (event.type === 'approval') {
          void this.#ask(event, call.requestId, call.signal);
        } else {
          return textResult(event.resultJson, isErrorResult(event.resultJson));
        }
      }
      return textResult(JSON.stringify({ error: 'the Berth server ended the call without a result' }), true);
    } catch (err) {
      if (call.signal.aborted) throw err;
      return textResult(JSON.stringify({ error: await failureMessage(err, this.#options.describeFailure) }), true);
    } finally {
      await session.close().catch(() => undefined);
    }
  }

  /** Asks the MCP client's user; anything but an accepted choice denies. */
  async #ask(event: ApprovalEvent, requestId: string | number, signal: AbortSignal): Promise<void> {
    const { request } = event;
    let choice: ApprovalChoice = 'deny';
    try {
      const answer = await this.server.elicitInput(
        {
          mode: 'form',
          message: `Berth asks before running this command (${request.description}):\n\n${request.command}`,
          requestedSchema: {
            type: 'object',
            properties: {
              choice: {
                type: 'string',
                title: 'Decision',
                description: `No answer within ${request.timeoutSeconds} s denies.`,
                oneOf: request.choices.map((c) => ({ const: c, title: CHOICE_TITLES[c] ?? c })),
              },
            },
            required: ['choice'],
          },
        },
        { relatedRequestId: requestId, signal, timeout: Math.max(1, request.timeoutSeconds) * 1000 },
      );
      const picked = answer.action === 'accept' ? answer.content?.choice : undefined;
      if (typeof picked === 'string' && (request.choices as readonly string[]).includes(picked)) choice = picked as ApprovalChoice;
    } catch (err) {
      if (signal.aborted) return;
      this.#options.warn(`approval question failed, denying: ${(err as Error).message}`);
    }
    event.answer(choice);
  }

  /** Sends the task's background-process events to the MCP client as they come, until {@link McpBridge.end}. */
  #followEvents(): void {
    if (this.#events !== undefined) return;
    const stream = this.task.events();
    this.#events = stream;
    void (async () => {
      try {
        for await (const event of stream) await this.#notify(event);
      } catch (err) {
        this.#options.warn(`background-process events of task ${this.task.taskId} stopped: ${(err as Error).message}`);
      }
    })();
  }

  async #notify(event: BackgroundEvent): Promise<void> {
    // A completion or a dropped-events note needs the agent's attention; heartbeats are routine.
    const level = event.type === 'heartbeat' ? 'info' : 'notice';
    await this.server
      .sendLoggingMessage({
        level,
        logger: 'berth.events',
        data: { text: event.text, type: event.type, id: event.id, task_id: event.taskId, event: event.event },
      })
      .catch((err: unknown) => this.#options.warn(`could not send an event notification: ${(err as Error).message}`));
  }

  /** Ends the Berth task (its processes, container, files). */
  async end(): Promise<void> {
    this.#events?.close();
    try {
      await this.task.end();
    } catch (err) {
      this.#options.warn(`could not end task ${this.task.taskId}: ${(err as Error).message}`);
    }
  }
}
