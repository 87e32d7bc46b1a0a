/**
 * A stand-in for an OpenAI-compatible chat-completions endpoint, on an
 * ephemeral local port: it answers `POST /v1/chat/completions` in the
 * chat-completions response format with a reply the test chooses, and records
 * every request (headers and parsed body) for assertions. It proves our
 * client speaks the format; it does not prove any real provider accepts it.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: {
    model?: string;
    temperature?: number;
    messages?: Array<{ role: string; content: string }>;
    [key: string]: unknown;
  };
}

/** What the stand-in does for one request. */
export type StandInReply =
  | { readonly content: string }
  | { readonly status: number; readonly body?: string }
  | { readonly delayMs: number; readonly content: string };

export interface ChatCompletionsStandIn extends AsyncDisposable {
  /** Base URL to configure as `approvals.smart.base_url` (ends in /v1). */
  readonly baseUrl: string;
  readonly requests: RecordedRequest[];
  /** Sets the reply to every following request. */
  reply(next: StandInReply | ((request: RecordedRequest) => StandInReply)): void;
  close(): Promise<void>;
}

export async function startChatCompletionsStandIn(initial: StandInReply = { content: 'ESCALATE' }): Promise<ChatCompletionsStandIn> {
  const requests: RecordedRequest[] = [];
  let replyFor: (request: RecordedRequest) => StandInReply = () => initial;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body: RecordedRequest['body'] = {};
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as RecordedRequest['body'];
      } catch {
        res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"invalid JSON"}}');
        return;
      }
      const recorded: RecordedRequest = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, body };
      requests.push(recorded);
      if (recorded.method !== 'POST' || recorded.path !== '/v1/chat/completions') {
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"message":"not found"}}');
        return;
      }
      const reply = replyFor(recorded);
      const send = (content: string) =>
        res.writeHead(200, { 'content-type': 'application/json' }).end(
          JSON.stringify({
            id: `chatcmpl-${requests.length}`,
            object: 'chat.completion',
            created: Math.floor(Date.now() / 1000),
            model: body.model ?? 'stand-in',
            choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
            usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
          }),
        );
      if ('status' in reply) {
        res.writeHead(reply.status, { 'content-type': 'application/json' }).end(reply.body ?? '{"error":{"message":"stand-in error"}}');
      } else if ('delayMs' in reply) {
        const timer = setTimeout(() => send(reply.content), reply.delayMs);
        res.on('close', () => clearTimeout(timer));
      } else {
        send(reply.content);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    reply(next) {
      replyFor = typeof next === 'function' ? next : () => next;
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
