/**
 * A loopback HTTP server for web tool tests: SearXNG- and Tavily-shaped APIs
 * and web pages, on an ephemeral port of 127.0.0.1 (or another loopback
 * address). It records every request, so a test can assert that a refused
 * fetch never reached it. Nothing here talks to any other host.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface StandInRequest {
  readonly method: string;
  /** Path and query as sent. */
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

export type StandInHandler = (request: StandInRequest, res: ServerResponse) => void | Promise<void>;

export interface HttpStandIn extends AsyncDisposable {
  /** http://HOST:PORT, no trailing slash. */
  readonly baseUrl: string;
  readonly host: string;
  readonly port: number;
  readonly requests: StandInRequest[];
  /** Sets the handler of every following request. */
  handle(handler: StandInHandler): void;
  close(): Promise<void>;
}

export async function startHttpStandIn(handler: StandInHandler = (_r, res) => void res.writeHead(404).end(), host = '127.0.0.1'): Promise<HttpStandIn> {
  const requests: StandInRequest[] = [];
  let current = handler;
  const sockets = new Set<Socket>();
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const recorded = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      requests.push(recorded);
      Promise.resolve(current(recorded, res)).catch((err: unknown) => {
        if (!res.headersSent) res.writeHead(500);
        res.end(String(err));
      });
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const close = async () => {
    // Handlers that never answer (slow-response tests) must not keep the server open.
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return {
    baseUrl: `http://${host}:${port}`,
    host,
    port,
    requests,
    handle(next) {
      current = next;
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** Answers JSON with a status (200 by default). */
export function sendJson(res: ServerResponse, body: unknown, status = 200): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}
