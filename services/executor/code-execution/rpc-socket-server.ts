/**
 * The Unix socket an execute_code script's `hermes_tools` stubs talk to
 * (spec §6): newline-delimited JSON requests `{"tool", "args", "token"}`, one
 * response line each, in order, per connection.
 *
 * Robustness: a connection's requests are handled one at a time, and its
 * socket is paused while one is pending, so a script that floods requests
 * without reading answers only fills kernel buffers and blocks itself; lines
 * have a size cap; closing the server ends every connection and abandons
 * calls still in flight.
 *
 * The script is untrusted (it may be anything the model wrote, or anything
 * else in the sandbox that found the socket), so what one run can make the
 * executor hold is bounded: {@link MAX_CONNECTIONS} connections, partial
 * request lines of all of them together at most twice the line cap, and a
 * connection that sends {@link MAX_BAD_REQUESTS_IN_A_ROW} invalid or
 * unauthorised requests in a row is closed (and after
 * {@link MAX_BAD_REQUESTS} in all, the socket stops answering for the run).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { chmod, lchown } from 'node:fs/promises';
import net from 'node:net';
import type { Duplex } from 'node:stream';
import { FailedPreconditionError } from '../../common/errors.js';
import type { Logger } from '../../common/logging.js';

/** Linux's sun_path holds 108 bytes including the terminating NUL. */
export const MAX_SOCKET_PATH_BYTES = 107;

/** Default cap on one request line: the dispatcher refuses arguments over 8 MiB anyway. */
export const DEFAULT_MAX_LINE_BYTES = 9 * 1024 * 1024;

/** Connections one script may hold open at once. */
export const MAX_CONNECTIONS = 64;

/** Invalid or unauthorised requests in a row on one connection before it is closed. */
export const MAX_BAD_REQUESTS_IN_A_ROW = 100;

/** Invalid or unauthorised requests in all, for one run, before the socket stops answering. */
export const MAX_BAD_REQUESTS = 1000;

export const UNAUTHORIZED_RESPONSE = JSON.stringify({ error: 'Unauthorized RPC request' });

export function invalidRequest(detail: string): string {
  return JSON.stringify({ error: `Invalid RPC request: ${detail}` });
}

/**
 * Constant-time token check. Both sides are hashed first so lengths never
 * leak through timing; an empty expected token matches nothing (fail closed).
 */
export function tokenMatches(expected: string, presented: unknown): boolean {
  if (expected === '' || typeof presented !== 'string') return false;
  const a = createHash('sha256').update(expected, 'utf8').digest();
  const b = createHash('sha256').update(presented, 'utf8').digest();
  return timingSafeEqual(a, b);
}

/** A validated request. */
export interface RpcRequest {
  readonly tool: string;
  readonly args: Record<string, unknown>;
}

/** Parses and checks one request line: `{ok}` or the exact error response to send. */
export function parseRpcRequest(line: string, token: string): { request: RpcRequest } | { response: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch (err) {
    return { response: invalidRequest(`not valid JSON (${(err as Error).message.slice(0, 200)})`) };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return { response: invalidRequest('expected a JSON object with "tool", "args" and "token"') };
  }
  const fields = parsed as { tool?: unknown; args?: unknown; token?: unknown };
  if (!tokenMatches(token, fields.token)) return { response: UNAUTHORIZED_RESPONSE };
  if (typeof fields.tool !== 'string' || fields.tool === '') {
    return { response: invalidRequest('"tool" must be a non-empty string') };
  }
  const args = fields.args ?? {};
  if (typeof args !== 'object' || args === null || Array.isArray(args)) {
    return { response: invalidRequest('"args" must be a JSON object') };
  }
  return { request: { tool: fields.tool, args: args as Record<string, unknown> } };
}

/**
 * One response line. A result string is sent as is when it is one line;
 * otherwise JSON-encoded as a string (the stub unwraps it), so a result with
 * newlines never breaks the framing.
 */
export function responseLine(result: string): string {
  return /[\n\r]/.test(result) ? `${JSON.stringify(result)}\n` : `${result}\n`;
}

/** What the server needs besides where to listen. */
export interface RpcServeOptions {
  readonly token: string;
  readonly maxLineBytes?: number;
  /** Answers one validated request with the tool's result string. */
  readonly onRequest: (request: RpcRequest) => Promise<string>;
  readonly logger?: Logger;
}

export interface RpcSocketServerOptions extends RpcServeOptions {
  /** Where to listen, as the executor sees it (in a directory only we can write to yet). */
  readonly path: string;
  /** chown the socket to this owner (the sandbox user) when it differs from ours. */
  readonly owner?: { readonly uid: number; readonly gid: number };
}

/**
 * A listening RPC socket for one execute_code run: a Unix socket of the
 * executor's ({@link listen}), or connections that arrive another way, such
 * as relayed from inside the sandbox by its exec agent ({@link serve}, then
 * {@link accept} per connection).
 */
export class RpcSocketServer implements AsyncDisposable {
  readonly #server: net.Server | undefined;
  readonly #sockets = new Set<Duplex>();
  readonly #options: RpcServeOptions;
  readonly #maxLineBytes: number;
  /** Bytes of unfinished request lines held for all connections together, and their cap. */
  readonly #buffered: LineBudget;
  #badRequests = 0;
  #closed = false;

  private constructor(server: net.Server | undefined, options: RpcServeOptions) {
    this.#server = server;
    this.#options = options;
    this.#maxLineBytes = options.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES;
    this.#buffered = { bytes: 0, maxBytes: 2 * this.#maxLineBytes };
  }

  /** True once closed (by its owner, or after {@link MAX_BAD_REQUESTS}). */
  get isClosed(): boolean {
    return this.#closed;
  }

  /** Invalid or unauthorised requests answered so far in this run. */
  get badRequests(): number {
    return this.#badRequests;
  }

  /** A server with no socket of its own: hand it each connection with {@link accept}. */
  static serve(options: RpcServeOptions): RpcSocketServer {
    return new RpcSocketServer(undefined, options);
  }

  /** Listens at `options.path` with mode 0600 (owned by the sandbox user when given). */
  static async listen(options: RpcSocketServerOptions): Promise<RpcSocketServer> {
    if (Buffer.byteLength(options.path) > MAX_SOCKET_PATH_BYTES) {
      throw new FailedPreconditionError(
        `the execute_code socket path ${options.path} is longer than ${MAX_SOCKET_PATH_BYTES} bytes; ` +
          'configure a shorter state root (executor.state_root)',
      );
    }
    // Half-open: a script may shut down its writing side and still read the answers.
    const server = net.createServer({ pauseOnConnect: true, allowHalfOpen: true });
    const rpc = new RpcSocketServer(server, options);
    server.on('connection', (socket: net.Socket) => rpc.accept(socket));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.path, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (err) => options.logger?.warn({ err }, 'execute_code socket error'));
    try {
      // The run dir is private (0700) until here, so nobody could connect in between.
      await chmod(options.path, 0o600);
      const owner = options.owner;
      if (owner && process.getuid?.() === 0 && owner.uid !== 0) await lchown(options.path, owner.uid, owner.gid);
    } catch (err) {
      await rpc.close();
      throw err;
    }
    return rpc;
  }

  /** Stops listening and ends every connection; pending answers are dropped. */
  close(): Promise<void> {
    this.#closed = true;
    for (const socket of this.#sockets) socket.destroy();
    this.#sockets.clear();
    const server = this.#server;
    if (!server) return Promise.resolve();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** Serves one connection (at most {@link MAX_CONNECTIONS} at once; more are closed). */
  accept(socket: Duplex): void {
    if (this.#closed || this.#sockets.size >= MAX_CONNECTIONS) {
      socket.destroy();
      return;
    }
    this.#sockets.add(socket);
    socket.on('error', () => undefined);
    socket.once('close', () => this.#sockets.delete(socket));
    void this.#serve(socket).then(
      () => socket.end(),
      (err: unknown) => {
        this.#options.logger?.warn({ err }, 'execute_code connection failed');
        socket.destroy();
      },
    );
  }

  /** Answers with `response`, then discards whatever else the client sends so its blocked write can finish. */
  #endWith(socket: Duplex, response: string): void {
    socket.on('data', () => undefined);
    socket.resume();
    socket.end(`${response}\n`);
  }

  async #serve(socket: Duplex): Promise<void> {
    let badInARow = 0;
    for await (const line of readLines(socket, this.#maxLineBytes, this.#buffered)) {
      if (this.#closed || socket.destroyed) return;
      let response: string;
      if ('tooLong' in line) {
        this.#endWith(socket, invalidRequest(`request line longer than ${this.#maxLineBytes} bytes`));
        return;
      }
      if ('overBudget' in line) {
        this.#endWith(
          socket,
          invalidRequest(
            `requests waiting on the socket exceed ${this.#buffered.maxBytes} bytes in all; ` +
              'send large content in fewer calls at a time',
          ),
        );
        return;
      }
      const text = line.text;
      if (text.trim() === '') continue;
      const parsed = parseRpcRequest(text, this.#options.token);
      if ('response' in parsed) {
        badInARow++;
        if (++this.#badRequests === MAX_BAD_REQUESTS) {
          this.#options.logger?.warn({ badRequests: MAX_BAD_REQUESTS }, 'execute_code socket: too many invalid requests; closing it');
          void this.close();
          return;
        }
        if (badInARow >= MAX_BAD_REQUESTS_IN_A_ROW) {
          this.#endWith(socket, invalidRequest(`${badInARow} invalid requests in a row; closing this connection`));
          return;
        }
        response = `${parsed.response}\n`;
      } else {
        badInARow = 0;
        response = responseLine(await this.#options.onRequest(parsed.request));
      }
      if (this.#closed || socket.destroyed) return;
      await write(socket, response);
    }
  }
}

/** Writes and waits until the kernel took it (or the socket went away). */
function write(socket: Duplex, data: string): Promise<void> {
  if (socket.destroyed) return Promise.resolve();
  if (socket.write(data)) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = () => {
      socket.off('drain', done);
      socket.off('close', done);
      resolve();
    };
    socket.on('drain', done);
    socket.on('close', done);
  });
}

type Line = { readonly text: string } | { readonly tooLong: true } | { readonly overBudget: true };

/** Bytes of unfinished lines held across the connections of one server. */
interface LineBudget {
  bytes: number;
  readonly maxBytes: number;
}

/**
 * The socket's lines, read only as fast as they are consumed: the socket is
 * paused whenever a complete line is waiting. A line over `maxBytes` yields
 * `tooLong` and ends the stream.
 */
async function* readLines(socket: Duplex, maxBytes: number, budget: LineBudget): AsyncGenerator<Line> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const setPending = (bytes: number) => {
    budget.bytes += bytes - pendingBytes;
    pendingBytes = bytes;
  };
  const ready: Line[] = [];
  let ended = false;
  let wake: (() => void) | undefined;
  const notify = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const onData = (chunk: Buffer) => {
    let start = 0;
    for (let nl = chunk.indexOf(0x0a, start); nl >= 0; nl = chunk.indexOf(0x0a, start)) {
      pending.push(chunk.subarray(start, nl));
      ready.push(
        pendingBytes + (nl - start) > maxBytes ? { tooLong: true } : { text: Buffer.concat(pending).toString('utf8') },
      );
      pending = [];
      setPending(0);
      start = nl + 1;
    }
    if (start < chunk.length) {
      pending.push(chunk.subarray(start));
      setPending(pendingBytes + chunk.length - start);
      if (pendingBytes > maxBytes || budget.bytes > budget.maxBytes) {
        ready.push(pendingBytes > maxBytes ? { tooLong: true } : { overBudget: true });
        pending = [];
        setPending(0);
      }
    }
    if (ready.length > 0) socket.pause();
    notify();
  };
  const finish = () => {
    ended = true;
    notify();
  };
  socket.on('data', onData);
  socket.once('end', finish);
  socket.once('close', finish);
  socket.resume();
  try {
    for (;;) {
      const line = ready.shift();
      if (line !== undefined) {
        yield line;
        if (!('text' in line)) return;
        continue;
      }
      if (ended || socket.destroyed) return;
      socket.resume();
      await new Promise<void>((resolve) => (wake = resolve));
    }
  } finally {
    pending = [];
    setPending(0);
    socket.off('data', onData);
    socket.off('end', finish);
    socket.off('close', finish);
  }
}
