/**
 * A task's MCP servers on this executor: one SDK client per server, made on
 * the task's first request to it and made again after the server exited (a
 * crash fails the calls in flight with a clear error; the next call starts
 * it afresh). A stdio server runs inside the task's environment
 * (sandbox-stdio-transport.ts); an HTTP server is reached from here under
 * the tenant's egress policy (egress-fetch.ts). Lives as a companion of the
 * task: released with it, which stops every server.
 *
 * Every failure comes back as text for the model (it names the server, says
 * what happened and what to do); nothing here throws at the gRPC layer except
 * a malformed request.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { mcpServerSchema, type McpServerConfig } from '../../common/config.js';
import { InvalidArgumentError } from '../../common/errors.js';
import type { Logger } from '../../common/logging.js';
import type { TaskCompanion } from '../task-companions.js';
import { egressFetch, EgressRefusedError, type EgressPolicy } from './egress-fetch.js';
import { SandboxStdioTransport, type SandboxLauncher } from './sandbox-stdio-transport.js';

/** Companion name of a task's MCP servers. */
export const MCP_COMPANION = 'mcp-servers';

/** Longest result handed back to the dispatcher (it caps what the model sees far lower). */
const MAX_RESULT_JSON_CHARS = 4 * 1024 * 1024;

export interface McpRequestInput {
  readonly serverName: string;
  readonly serverJson: string;
  readonly method: string;
  readonly tool: string;
  readonly argumentsJson: string;
}

export type McpOutcome = { readonly resultJson: string } | { readonly error: string };

interface Connection {
  readonly fingerprint: string;
  client: Promise<Client>;
  readonly transport: Transport;
  closed: boolean;
}

/** Parses what the dispatcher sent; the config schema is the one the dispatcher validated it with. */
export function parseServerSpec(request: McpRequestInput): McpServerConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(request.serverJson);
  } catch {
    throw new InvalidArgumentError('server_json is not JSON');
  }
  const spec = mcpServerSchema.safeParse(raw);
  if (!spec.success) throw new InvalidArgumentError(`server_json is not an MCP server entry: ${spec.error.message}`);
  return spec.data;
}

export class McpConnections implements TaskCompanion {
  readonly #launcher: SandboxLauncher;
  readonly #egress: EgressPolicy;
  readonly #logger: Logger;
  readonly #connections = new Map<string, Connection>();
  #disposed = false;

  constructor(launcher: SandboxLauncher, egress: EgressPolicy, logger: Logger) {
    this.#launcher = launcher;
    this.#egress = egress;
    this.#logger = logger;
  }

  /** Runs one request; `signal` is the call's (interrupt, cancellation). */
  async request(request: McpRequestInput, spec: McpServerConfig, signal: AbortSignal): Promise<McpOutcome> {
    const name = request.serverName;
    const connection = this.#connection(name, spec);
    let client: Client;
    try {
      client = await connection.client;
    } catch (err) {
      this.#forget(name, connection);
      return { error: await this.#startFailure(name, spec, connection, err) };
    }
    const timeoutMs = Math.round(spec.timeout * 1000);
    try {
      let result: unknown;
      if (request.method === 'list_tools') {
        result = await listAllTools(client, signal, Math.round(spec.connect_timeout * 1000));
      } else if (request.method === 'call_tool') {
        const args = JSON.parse(request.argumentsJson || '{}') as Record<string, unknown>;
        result = await client.callTool({ name: request.tool, arguments: args }, undefined, { signal, timeout: timeoutMs });
      } else {
        throw new InvalidArgumentError(`unknown MCP method '${request.method}': list_tools or call_tool`);
      }
      const resultJson = JSON.stringify(result);
      if (resultJson.length > MAX_RESULT_JSON_CHARS) {
        return { error: `MCP server '${name}' returned a result larger than ${MAX_RESULT_JSON_CHARS} characters; it was dropped` };
      }
      return { resultJson };
    } catch (err) {
      if (err instanceof InvalidArgumentError) throw err;
      return { error: await this.#callFailure(name, spec, request, connection, err, signal) };
    }
  }

  async dispose(): Promise<void> {
    this.#disposed = true;
    const all = [...this.#connections.values()];
    this.#connections.clear();
    await Promise.all(all.map((c) => this.#close(c)));
  }

  #connection(name: string, spec: McpServerConfig): Connection {
    if (this.#disposed) throw new InvalidArgumentError('the task is being released');
    const fingerprint = JSON.stringify(spec);
    const existing = this.#connections.get(name);
    if (existing !== undefined && !existing.closed && existing.fingerprint === fingerprint) return existing;
    if (existing !== undefined) {
      this.#connections.delete(name);
      void this.#close(existing);
    }
    const transport = this.#transport(name, spec);
    const client = new Client({ name: 'berth', version: '1' });
    const connection: Connection = { fingerprint, transport, closed: false, client: Promise.resolve(client) };
    // The SDK calls this when the transport closes (the server exited): the next request starts it again.
    client.onclose = () => {
      connection.closed = true;
      this.#logger.info({ mcpServer: name }, 'MCP server connection closed');
    };
    connection.client = client.connect(transport, { timeout: Math.round(spec.connect_timeout * 1000) }).then(() => client);
    connection.client.catch(() => undefined);
    this.#connections.set(name, connection);
    return connection;
  }

  #transport(name: string, spec: McpServerConfig): Transport {
    if (spec.url !== undefined) {
      return new StreamableHTTPClientTransport(new URL(spec.url), {
        requestInit: { headers: spec.headers },
        fetch: egressFetch(this.#egress),
      });
    }
    return new SandboxStdioTransport(this.#launcher, { name, command: spec.command!, args: spec.args, env: spec.env });
  }

  #forget(name: string, connection: Connection): void {
    if (this.#connections.get(name) === connection) this.#connections.delete(name);
    void this.#close(connection);
  }

  async #close(connection: Connection): Promise<void> {
    connection.closed = true;
    await connection.transport.close().catch(() => undefined);
  }

  async #diagnostics(connection: Connection): Promise<string> {
    if (!(connection.transport instanceof SandboxStdioTransport)) return '';
    const text = await connection.transport.diagnostics();
    return text === '' ? '' : ` Its stderr ends with: ${text}`;
  }

  #exitText(connection: Connection): string {
    if (!(connection.transport instanceof SandboxStdioTransport)) return '';
    const exit = connection.transport.exit;
    if (exit === undefined) return '';
    if (exit.reason !== undefined) return ` It was stopped: ${exit.reason}.`;
    return exit.exitCode === undefined ? '' : ` It exited with code ${exit.exitCode}.`;
  }

  async #startFailure(name: string, spec: McpServerConfig, connection: Connection, err: unknown): Promise<string> {
    this.#logger.warn({ err, mcpServer: name }, 'MCP server did not start');
    const where = spec.url !== undefined ? `at ${spec.url}` : `(${spec.command} in the task's environment)`;
    if (err instanceof EgressRefusedError || (err instanceof Error && err.cause instanceof EgressRefusedError)) {
      return `MCP server '${name}' ${where} was not contacted: ${messageOf(err)}`;
    }
    if (isTimeout(err)) {
      return (
        `MCP server '${name}' ${where} did not finish the MCP handshake within ${spec.connect_timeout}s (connect_timeout).` +
        `${this.#exitText(connection)}${await this.#diagnostics(connection)} Check its command and that it speaks MCP over stdio; the next call tries again.`
      );
    }
    return (
      `MCP server '${name}' ${where} could not be started: ${messageOf(err)}.${this.#exitText(connection)}` +
      `${await this.#diagnostics(connection)} Check that the command exists in the task's environment and runs; the next call tries again.`
    );
  }

  async #callFailure(
    name: string,
    spec: McpServerConfig,
    request: McpRequestInput,
    connection: Connection,
    err: unknown,
    signal: AbortSignal,
  ): Promise<string> {
    const what = request.method === 'call_tool' ? `tool '${request.tool}'` : 'the tool list';
    if (signal.aborted) return `The call to MCP server '${name}' (${what}) was interrupted.`;
    if (isTimeout(err)) {
      const seconds = request.method === 'call_tool' ? spec.timeout : spec.connect_timeout;
      this.#logger.warn({ mcpServer: name, tool: request.tool }, 'MCP request timed out');
      return (
        `MCP server '${name}' did not answer ${what} within ${seconds}s (its timeout); the request was cancelled. ` +
        'The server is still running: retry later, or raise mcp_servers.' + `${name}.timeout.`
      );
    }
    if (connection.closed || isConnectionClosed(err)) {
      this.#forget(name, connection);
      this.#logger.warn({ err, mcpServer: name }, 'MCP server exited during a request');
      return (
        `MCP server '${name}' exited while answering ${what}.${this.#exitText(connection)}` +
        `${await this.#diagnostics(connection)} It will be started again on the next call.`
      );
    }
    this.#logger.warn({ err, mcpServer: name }, 'MCP request failed');
    return `MCP call failed: ${errorName(err)}: ${messageOf(err)}`;
  }
}

/** Pages of tools/list followed at most (upstream's cap: a server whose cursor never ends cannot spin discovery). */
const MAX_LIST_PAGES = 50;

/** Every page of the server's tool list, following `nextCursor`. */
async function listAllTools(client: Client, signal: AbortSignal, timeout: number): Promise<{ tools: unknown[] }> {
  const tools: unknown[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < MAX_LIST_PAGES; page++) {
    const r = await client.listTools(cursor === undefined ? undefined : { cursor }, { signal, timeout });
    tools.push(...r.tools);
    cursor = typeof r.nextCursor === 'string' && r.nextCursor !== '' ? r.nextCursor : undefined;
    if (cursor === undefined) break;
  }
  return { tools };
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function errorName(err: unknown): string {
  return err instanceof Error ? err.constructor.name : typeof err;
}

function isTimeout(err: unknown): boolean {
  return err instanceof McpError && err.code === ErrorCode.RequestTimeout;
}

function isConnectionClosed(err: unknown): boolean {
  return err instanceof McpError && err.code === ErrorCode.ConnectionClosed;
}
