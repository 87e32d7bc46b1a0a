/**
 * `berth mcp`: Berth's tools for MCP clients. Over stdio one MCP session is
 * one Berth task (--task, or a generated id); over streamable HTTP
 * (--listen) each MCP session gets its own task. A task is ended when its
 * MCP session closes.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { BerthClient, type BerthClientOptions } from '../client/berth-client.js';
import { McpBridge } from './mcp-bridge.js';

export interface McpCommandOptions {
  readonly server: string;
  readonly apiKey: string | undefined;
  readonly taskId: string | undefined;
  readonly sessionId: string | undefined;
  readonly toolsets: readonly string[];
  readonly disable: readonly string[];
  readonly version: string;
  readonly stderr: NodeJS.WritableStream;
  /** TLS towards the dispatcher, as the client takes it. */
  readonly tls?: BerthClientOptions['tls'];
  /** List the agent-loop tools too (see McpBridgeOptions.agentLoopTools). */
  readonly agentLoopTools?: boolean;
  /** The CLI's one line for a failed call (server unreachable, TLS mismatch). */
  readonly describeFailure?: (err: unknown) => Promise<string | undefined>;
}

/**
 * The server's backend for the session's instructions, asked once before the
 * session starts; an unreachable server is said on stderr (the desktop
 * client's log) and the session starts anyway, since Berth may come up later.
 */
async function learnBackend(client: BerthClient, options: McpCommandOptions, warn: (message: string) => void): Promise<string | undefined> {
  try {
    return (await client.listTools({ toolsets: options.toolsets, disable: options.disable })).backend;
  } catch (err) {
    const explained = await options.describeFailure?.(err).catch(() => undefined);
    warn(explained ?? (err as Error).message);
    return undefined;
  }
}

/** The bridge options every session shares. */
function bridgeOptions(options: McpCommandOptions, warn: (message: string) => void) {
  return {
    toolsets: options.toolsets,
    disable: options.disable,
    version: options.version,
    warn,
    ...(options.agentLoopTools ? { agentLoopTools: true } : {}),
    ...(options.describeFailure ? { describeFailure: options.describeFailure } : {}),
  };
}

function newClient(options: McpCommandOptions, apiKey: string | undefined): BerthClient {
  return new BerthClient(options.server, {
    ...(apiKey ? { apiKey } : {}),
    ...(options.tls === undefined ? {} : { tls: options.tls }),
  });
}

/** Serves one MCP session on stdin/stdout until the client goes away, then ends the task. */
export async function runMcpStdio(options: McpCommandOptions): Promise<number> {
  const client = newClient(options, options.apiKey);
  const taskId = options.taskId ?? `mcp-${randomBytes(4).toString('hex')}`;
  const warn = (message: string) => options.stderr.write(`berth mcp: ${message}\n`);
  const backend = await learnBackend(client, options, warn);
  const bridge = new McpBridge({
    client,
    taskId,
    ...(options.sessionId === undefined ? {} : { sessionId: options.sessionId }),
    ...(backend === undefined ? {} : { backend }),
    ...bridgeOptions(options, warn),
  });
  const transport = new StdioServerTransport();
  let onGone = () => {};
  const closed = new Promise<void>((resolve) => (onGone = resolve));
  transport.onclose = onGone;
  // The transport does not notice the client closing our stdin; this does.
  process.stdin.once('end', onGone);
  process.once('SIGINT', onGone);
  process.once('SIGTERM', onGone);
  await bridge.server.connect(transport);
  warn(`serving task ${taskId} of ${options.server} over stdio`);
  await closed;
  process.stdin.off('end', onGone);
  process.off('SIGINT', onGone);
  process.off('SIGTERM', onGone);
  await bridge.end();
  await bridge.server.close().catch(() => undefined);
  client.close();
  return 0;
}

/** `HOST:PORT` (or `[v6]:PORT`) into its parts. */
export function parseListen(value: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(value.trim());
  const port = Number(m?.[3]);
  if (!m || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`--listen must be HOST:PORT, e.g. 127.0.0.1:7710; got '${value}'`);
  }
  return { host: m[1] ?? m[2] ?? '', port };
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1']);

function bearer(req: IncomingMessage): string | undefined {
  const value = req.headers.authorization;
  const m = typeof value === 'string' ? /^Bearer\s+(\S+)$/i.exec(value) : null;
  return m?.[1];
}

function readBody(req: IncomingMessage, limitBytes: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limitBytes) {
        reject(new Error(`request body over ${limitBytes} bytes`));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      try {
        resolve(chunks.length === 0 ? undefined : (JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown));
      } catch {
        reject(new Error('request body is not JSON'));
      }
    });
    req.on('error', reject);
  });
}

function jsonRpcError(res: ServerResponse, httpStatus: number, message: string): void {
  res.writeHead(httpStatus, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
}

/** A running `berth mcp --listen`. */
export interface McpHttpServer {
  readonly url: string;
  /** Sessions open now. */
  readonly sessions: () => number;
  close(): Promise<void>;
}

/** Serves streamable HTTP at /mcp; each MCP session is bridged to its own Berth task. */
export async function startMcpHttp(options: McpCommandOptions, listen: { host: string; port: number }): Promise<McpHttpServer> {
  const warn = (message: string) => options.stderr.write(`berth mcp: ${message}\n`);
  const sessions = new Map<string, { transport: StreamableHTTPServerTransport; bridge: McpBridge; client: BerthClient }>();
  let allowedHosts: string[] | undefined;

  const endSession = async (id: string) => {
    const s = sessions.get(id);
    if (s === undefined) return;
    sessions.delete(id);
    await s.bridge.end();
    await s.bridge.server.close().catch(() => undefined);
    s.client.close();
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    if (path !== '/mcp') return jsonRpcError(res, 404, 'not found: the MCP endpoint is /mcp');
    const sessionId = req.headers['mcp-session-id'];
    const body = req.method === 'POST' ? await readBody(req, 64 * 1024 * 1024) : undefined;
    if (typeof sessionId === 'string') {
      const s = sessions.get(sessionId);
      if (s === undefined) return jsonRpcError(res, 404, `unknown MCP session ${sessionId}: it ended; initialize a new one`);
      return s.transport.handleRequest(req, res, body);
    }
    if (req.method !== 'POST' || !isInitializeRequest(body)) {
      return jsonRpcError(res, 400, 'no mcp-session-id header: start with an initialize request');
    }
    const client = newClient(options, bearer(req) ?? options.apiKey);
    const backend = await learnBackend(client, options, warn);
    const bridge = new McpBridge({
      client,
      // Per MCP session; the MCP session id itself is a bearer credential, so it stays out of task ids and logs.
      taskId: `mcp-${randomBytes(6).toString('hex')}`,
      ...(backend === undefined ? {} : { backend }),
      ...bridgeOptions(options, warn),
    });
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      ...(allowedHosts === undefined ? {} : { enableDnsRebindingProtection: true, allowedHosts }),
      onsessioninitialized: (id) => {
        sessions.set(id, { transport, bridge, client });
      },
      onsessionclosed: (id) => endSession(id),
    });
    transport.onclose = () => {
      if (transport.sessionId !== undefined) void endSession(transport.sessionId);
    };
    await bridge.server.connect(transport);
    await transport.handleRequest(req, res, body);
  };

  const http: HttpServer = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      warn(`request failed: ${(err as Error).message}`);
      if (!res.headersSent) jsonRpcError(res, 400, (err as Error).message);
      else res.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(listen.port, listen.host, () => resolve());
  });
  const port = (http.address() as AddressInfo).port;
  if (LOOPBACK.has(listen.host)) {
    // A page in the user's browser must not reach a loopback MCP server through DNS rebinding.
    allowedHosts = [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`];
  } else {
    warn(`listening beyond loopback on ${listen.host}: anyone who reaches this port runs tools with the configured API key`);
  }
  const hostText = listen.host.includes(':') ? `[${listen.host}]` : listen.host;
  return {
    url: `http://${hostText}:${port}/mcp`,
    sessions: () => sessions.size,
    async close() {
      await Promise.all([...sessions.keys()].map((id) => endSession(id)));
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
