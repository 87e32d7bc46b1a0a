/**
 * One MCP server session bridged onto one Berth task: the MCP tools are the
 * tools ListTools gives (same names, descriptions, JSON schemas); each MCP
 * tool call runs on its own Session stream, so cancelling it stops that call
 * only; live output becomes progress notifications; approval requests become
 * elicitations where the MCP client supports them.
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  ListToolsRequestSchema,
  type CallToolResult,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import type { BerthClient, BerthTask, ToolDefinition } from '../client/berth-client.js';
import { BerthError } from '../client/errors.js';
import type { ApprovalChoice, ApprovalEvent } from '../client/session.js';
import { canonicalToolName } from '../dispatcher/tool-aliases.js';

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

/** A call that failed as a call: the status and details, as a tool error the model can read. */
function failureResult(err: unknown): CallToolResult {
  const message = err instanceof BerthError ? `${err.status}: ${err.details}` : (err as Error).message;
  return textResult(JSON.stringify({ error: message }), true);
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

  constructor(options: McpBridgeOptions) {
    this.#options = options;
    this.task = options.client.task(options.taskId, options.sessionId === undefined ? {} : { sessionId: options.sessionId });
    this.server = new Server(
      { name: 'berth', version: options.version },
      {
        capabilities: { tools: {} },
        instructions: `Tools run in the sandboxed Berth task '${options.taskId}': its working directory, environment variables and background processes persist between calls.`,
      },
    );
    this.server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: await this.#listTools() }));
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
    this.#known = new Set(listing.tools.map((t) => t.function.name));
    return listing.tools.map(mcpTool);
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
        return failureResult(err);
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
      return failureResult(err);
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

  /** Ends the Berth task (its processes, container, files). */
  async end(): Promise<void> {
    try {
      await this.task.end();
    } catch (err) {
      this.#options.warn(`could not end task ${this.task.taskId}: ${(err as Error).message}`);
    }
  }
}
