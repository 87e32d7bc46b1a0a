/**
 * Kubernetes stand-in (a test double): reading request bodies (JSON, or YAML
 * as the API server also takes) and writing JSON answers and Status errors.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parse as parseYaml } from 'yaml';
import { badRequest, StatusError } from './errors.js';

const MAX_BODY_BYTES = 3 * 1024 * 1024;

export async function readBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new StatusError(413, 'RequestEntityTooLarge', 'Request entity too large: limit is 3145728');
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return undefined;
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim();
  try {
    return type.endsWith('yaml') ? parseYaml(text) : JSON.parse(text);
  } catch (err) {
    throw badRequest(`error decoding request body: ${(err as Error).message}`);
  }
}

export function sendJson(res: ServerResponse, status: number, body: unknown, warnings: readonly string[] = []): void {
  const text = JSON.stringify(body);
  const headers: Record<string, string | string[] | number> = {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    'cache-control': 'no-cache, private',
  };
  // Warnings as the server sends them: `299 - "text"`.
  if (warnings.length > 0) headers.warning = warnings.map((w) => `299 - ${JSON.stringify(w)}`);
  res.writeHead(status, headers);
  res.end(text);
}

export function sendError(res: ServerResponse, err: unknown): void {
  const e = err instanceof StatusError ? err : new StatusError(500, 'InternalError', `Internal error occurred: ${err instanceof Error ? err.message : String(err)}`);
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, e.code, e.toStatus());
}
