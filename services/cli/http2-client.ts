/**
 * The Dispatcher's ListTools and Session methods over node:http2, for
 * `berth call` and `berth tools`: loading @grpc/grpc-js and nice-grpc took
 * about two thirds of a short-lived call's start-up (docs/performance.md).
 * Speaks the gRPC wire protocol a grpc-js server expects: POST to
 * /berth.v1.Dispatcher/METHOD with content-type application/grpc and
 * te: trailers, messages in 5-byte-prefixed frames (never compressed), the
 * status from grpc-status/grpc-message in the trailers (or in the headers
 * of a trailers-only response). Failures are nice-grpc ClientErrors with
 * the codes and, for a connection that could not be made or was lost, the
 * details grpc-js gives, so client-failure.ts explains both alike.
 */
import { connect, constants, type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type SecureClientSessionOptions } from 'node:http2';
import { MAX_MESSAGE_BYTES } from '../common/channel-options.js';
import { AsyncQueue } from '../common/async-queue.js';
import { ClientError, Status, type Metadata } from '../common/nice-grpc-common-cjs.js';
import { clientTlsMaterial, hostPort } from '../common/tls-material.js';
import {
  ListToolsRequest,
  ListToolsResponse,
  SessionClientMessage,
  SessionServerMessage,
  type DeepPartial,
  type DispatcherClient,
} from '../gen/berth/v1/dispatcher.js';
import { readTlsFlags, type ClientTarget } from './client-options.js';

/** How long a connection may take to be made, as grpc-js's minimum connect timeout. */
const CONNECT_TIMEOUT_MS = 20_000;

/** What `berth call` and `berth tools` use of the Dispatcher client. */
export type CallClient = Pick<DispatcherClient, 'listTools' | 'session'>;

interface RpcOptions {
  readonly metadata?: Metadata;
  readonly signal?: AbortSignal;
}

interface MessageCodec<T> {
  encode(message: T): { finish(): Uint8Array };
  decode(input: Uint8Array): T;
  fromPartial(object: DeepPartial<T>): T;
}

/** grpc-js's reading of an HTTP status that is not 200 (the gRPC spec's table). */
function statusOfHttp(code: number): Status {
  switch (code) {
    case 400:
      return Status.INTERNAL;
    case 401:
      return Status.UNAUTHENTICATED;
    case 403:
      return Status.PERMISSION_DENIED;
    case 404:
      return Status.UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
      return Status.UNAVAILABLE;
    default:
      return Status.UNKNOWN;
  }
}

/** grpc-js's reading of a stream reset without a status. */
function statusOfReset(code: number): Status {
  switch (code) {
    case constants.NGHTTP2_REFUSED_STREAM:
      return Status.UNAVAILABLE;
    case constants.NGHTTP2_CANCEL:
      return Status.CANCELLED;
    case constants.NGHTTP2_ENHANCE_YOUR_CALM:
      return Status.RESOURCE_EXHAUSTED;
    case constants.NGHTTP2_INADEQUATE_SECURITY:
      return Status.PERMISSION_DENIED;
    default:
      return Status.INTERNAL;
  }
}

/** grpc-message is percent-encoded (the gRPC spec); a malformed one is kept as sent. */
function decodeGrpcMessage(value: string | string[] | undefined): string {
  const text = Array.isArray(value) ? value.join(',') : (value ?? '');
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** A message in its 5-byte prefix: compressed flag 0, then the length (big-endian). */
function frame(bytes: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + bytes.length);
  out[0] = 0;
  out.writeUInt32BE(bytes.length, 1);
  out.set(bytes, 5);
  return out;
}

function abortError(): Error {
  const err = new Error('The operation has been aborted');
  err.name = 'AbortError';
  return err;
}

type Item<T> = { readonly message: T } | { readonly error: unknown };

/** One HTTP/2 connection to the server, made at the first call. */
export class Http2Channel {
  readonly #authority: string;
  readonly #url: string;
  readonly #options: SecureClientSessionOptions;
  #session: ClientHttp2Session | undefined;
  #connected = false;
  #error: Error | undefined;

  constructor(target: ClientTarget) {
    if (hostPort(target.address) === undefined) throw new Error(`not a host:port address: ${target.address}`);
    this.#authority = target.address.replace(/^dns:(\/\/\/)?/, '');
    const files = target.tls;
    if (files === undefined) {
      this.#url = `http://${this.#authority}`;
      this.#options = {};
    } else {
      const { ca, cert, key } = readTlsFlags(() => clientTlsMaterial(files));
      this.#url = `https://${this.#authority}`;
      this.#options = {
        ALPNProtocols: ['h2'],
        ...(ca === null ? {} : { ca }),
        ...(cert === null || key === null ? {} : { cert, key }),
      };
    }
  }

  /** Whether `address` is one this client dials (host:port); other forms (unix:) are grpc-js's. */
  static handles(address: string): boolean {
    return hostPort(address) !== undefined;
  }

  #connection(): ClientHttp2Session {
    if (this.#session !== undefined && !this.#session.closed && !this.#session.destroyed) return this.#session;
    this.#connected = false;
    this.#error = undefined;
    const session = connect(this.#url, this.#options);
    // grpc-js gives up on a connection attempt after 20 s; the system's own limit (SYN retries) is minutes.
    const timer = setTimeout(() => session.destroy(new Error(`connect ETIMEDOUT: no answer from ${this.#authority} in ${CONNECT_TIMEOUT_MS / 1000} s`)), CONNECT_TIMEOUT_MS);
    timer.unref();
    session.once('connect', () => {
      clearTimeout(timer);
      this.#connected = true;
    });
    session.once('close', () => clearTimeout(timer));
    session.on('error', (err: Error) => (this.#error ??= err));
    this.#session = session;
    return session;
  }

  /** Why a stream ended without a status: grpc-js's words for a connection not made, or lost. */
  #lostConnection(path: string, streamError: Error | undefined): ClientError | undefined {
    const cause = this.#error ?? (streamError as { cause?: Error } | undefined)?.cause ?? streamError;
    if (!this.#connected) return new ClientError(path, Status.UNAVAILABLE, `No connection established. Last error: ${String(cause ?? 'the connection closed')}`);
    if (this.#error !== undefined || this.#session?.destroyed === true) {
      return new ClientError(path, Status.UNAVAILABLE, `Connection dropped${cause === undefined ? '' : `: ${String(cause)}`}`);
    }
    return undefined;
  }

  /**
   * One call: `requests` framed onto the stream (ended when they end), the
   * responses decoded as they come, then the status; anything but OK ends
   * the iteration with a ClientError.
   */
  async *call<Req, Res>(
    path: string,
    requestCodec: MessageCodec<Req>,
    responseCodec: MessageCodec<Res>,
    requests: AsyncIterable<DeepPartial<Req>>,
    options: RpcOptions,
  ): AsyncGenerator<Res, void> {
    const signal = options.signal;
    if (signal?.aborted) throw abortError();
    const headers: Record<string, string | string[]> = {
      ':method': 'POST',
      ':path': path,
      ':authority': this.#authority,
      'content-type': 'application/grpc',
      te: 'trailers',
      'grpc-accept-encoding': 'identity',
      'user-agent': 'berth-cli',
    };
    for (const [key, values] of options.metadata ?? []) {
      headers[key] = values.map((v) => (typeof v === 'string' ? v : Buffer.from(v).toString('base64')));
    }
    const stream = this.#connection().request(headers);
    const items = new AsyncQueue<Item<Res>>();
    const fail = (code: Status, details: string) => items.push({ error: new ClientError(path, code, details) });
    let responseHeaders: IncomingHttpHeaders | undefined;
    let trailers: IncomingHttpHeaders | undefined;
    let streamError: Error | undefined;
    // Received bytes not yet a whole message, joined only once enough have arrived for the next step
    // (a frame header, then its whole frame), so a large message is copied twice, not once per chunk.
    let chunks: Buffer[] = [];
    let buffered = 0;
    let needed = 5;
    let broken = false;
    stream.on('response', (h) => {
      responseHeaders = h;
      const http = Number(h[':status']);
      if (http !== 200) {
        broken = true;
        fail(statusOfHttp(http), `Received HTTP status code ${http}`);
        stream.close(constants.NGHTTP2_CANCEL);
      } else if (!String(h['content-type'] ?? '').startsWith('application/grpc')) {
        broken = true;
        fail(Status.UNKNOWN, `Received invalid content-type ${String(h['content-type'])}`);
        stream.close(constants.NGHTTP2_CANCEL);
      }
    });
    stream.on('data', (chunk: Buffer) => {
      if (broken) return;
      chunks.push(chunk);
      buffered += chunk.length;
      while (buffered >= needed) {
        const pending = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, buffered);
        chunks = [pending];
        const length = pending.readUInt32BE(1);
        if (pending[0] !== 0) {
          broken = true;
          fail(Status.INTERNAL, 'Received a compressed message, which this client did not ask for');
          stream.close(constants.NGHTTP2_CANCEL);
          return;
        }
        if (length > MAX_MESSAGE_BYTES) {
          broken = true;
          fail(Status.RESOURCE_EXHAUSTED, `Received message larger than max (${length} vs. ${MAX_MESSAGE_BYTES})`);
          stream.close(constants.NGHTTP2_CANCEL);
          return;
        }
        if (buffered < 5 + length) {
          needed = 5 + length;
          break;
        }
        const bytes = pending.subarray(5, 5 + length);
        const rest = pending.subarray(5 + length);
        chunks = rest.length === 0 ? [] : [rest];
        buffered = rest.length;
        needed = 5;
        try {
          items.push({ message: responseCodec.decode(bytes) });
        } catch (err) {
          broken = true;
          fail(Status.INTERNAL, `Failed to parse server response: ${(err as Error).message}`);
          stream.close(constants.NGHTTP2_CANCEL);
        }
      }
    });
    stream.on('trailers', (t) => (trailers = t));
    stream.on('error', (err: Error) => (streamError ??= err));
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      // A session error reaches its streams first; its own 'error' event follows on the next tick.
      setImmediate(() => {
        if (!broken) items.push({ error: this.#statusError(path, stream, responseHeaders, trailers, streamError) });
        items.close();
      });
    };
    // The server's end of the stream (after its trailers) ends the call, though the requests may still be open.
    stream.on('end', finish);
    stream.on('close', finish);
    const onAbort = () => {
      broken = true;
      items.push({ error: abortError() });
      stream.close(constants.NGHTTP2_CANCEL);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    void this.#send(stream, requestCodec, requests).catch((err: unknown) => {
      broken = true;
      fail(err instanceof ClientError ? err.code : Status.CANCELLED, err instanceof ClientError ? err.details : `the request failed: ${String(err)}`);
      stream.close(constants.NGHTTP2_CANCEL);
    });
    try {
      for await (const item of items) {
        if ('error' in item) {
          if (item.error !== undefined) throw item.error;
          return;
        }
        yield item.message;
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      if (!stream.closed) stream.close(constants.NGHTTP2_CANCEL);
    }
  }

  async #send<Req>(stream: ClientHttp2Stream, codec: MessageCodec<Req>, requests: AsyncIterable<DeepPartial<Req>>): Promise<void> {
    for await (const request of requests) {
      if (stream.closed || stream.destroyed) return;
      const bytes = codec.encode(codec.fromPartial(request)).finish();
      if (bytes.length > MAX_MESSAGE_BYTES) {
        throw new ClientError('', Status.RESOURCE_EXHAUSTED, `Sent message larger than max (${bytes.length} vs. ${MAX_MESSAGE_BYTES})`);
      }
      stream.write(frame(bytes));
    }
    if (!stream.closed && !stream.destroyed) stream.end();
  }

  /** The call's end: undefined for OK, else the error it ended with. */
  #statusError(
    path: string,
    stream: ClientHttp2Stream,
    headers: IncomingHttpHeaders | undefined,
    trailers: IncomingHttpHeaders | undefined,
    streamError: Error | undefined,
  ): unknown {
    const status = trailers?.['grpc-status'] ?? headers?.['grpc-status'];
    if (status !== undefined) {
      const code = Number(status) as Status;
      if (code === Status.OK) return undefined;
      const message = trailers?.['grpc-status'] !== undefined ? trailers['grpc-message'] : headers?.['grpc-message'];
      return new ClientError(path, code, decodeGrpcMessage(message));
    }
    const lost = this.#lostConnection(path, streamError);
    if (lost !== undefined) return lost;
    if (stream.rstCode !== undefined && stream.rstCode !== constants.NGHTTP2_NO_ERROR) {
      return new ClientError(path, statusOfReset(stream.rstCode), `Received RST_STREAM with code ${stream.rstCode}`);
    }
    return new ClientError(path, Status.UNKNOWN, 'the server ended the call without a status');
  }

  /** Ends the connection once its calls have ended. */
  close(): void {
    this.#session?.close();
  }
}

async function single<T>(iterable: AsyncIterable<T>, path: string): Promise<T> {
  let result: T | undefined;
  for await (const message of iterable) result ??= message;
  if (result === undefined) throw new ClientError(path, Status.UNIMPLEMENTED, 'the server sent no response message');
  return result;
}

async function* once<T>(value: T): AsyncIterable<T> {
  yield value;
}

/** The Dispatcher's ListTools and Session over one HTTP/2 connection. */
export function openHttp2Client(target: ClientTarget): { channel: Http2Channel; client: CallClient } {
  const channel = new Http2Channel(target);
  const client: CallClient = {
    listTools: (request, options = {}) => {
      const path = '/berth.v1.Dispatcher/ListTools';
      return single(channel.call(path, ListToolsRequest, ListToolsResponse, once(request), options), path);
    },
    session: (requests, options = {}) => channel.call('/berth.v1.Dispatcher/Session', SessionClientMessage, SessionServerMessage, requests, options),
  };
  return { channel, client };
}
