/**
 * HTTP GET of a URL a model chose, from the dispatcher's network, under the
 * rules that keep it off internal services (SSRF):
 *
 * - http and https only, default or explicit port;
 * - the host is resolved once; every address it resolves to must be public
 *   (public-address.ts) unless inside the operator's `web.egress_allow`;
 * - the connection goes to the checked address (the socket's lookup is
 *   pinned), so a second DNS answer cannot swap in another address;
 * - redirects are followed by hand, each hop checked the same way;
 * - one deadline for the whole fetch, and a cap on the decoded body.
 *
 * The refusal happens before any connection is opened.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import type { Readable } from 'node:stream';
import type { Cidr } from '../../../common/cidr.js';
import { nonPublicRange, pinnedLookup } from '../../../common/public-address.js';

/** Upstream's refusal text for private and internal targets. */
export const BLOCKED_URL_ERROR = 'Blocked: URL targets a private or internal network address';

export const MAX_REDIRECTS = 5;

/** The fetch was refused by the rules (not a network failure). */
export class BlockedUrlError extends Error {
  override readonly name = 'BlockedUrlError';
}

/** The fetch failed on the network or the server's answer (status, size are not errors). */
export class FetchFailedError extends Error {
  override readonly name = 'FetchFailedError';
}

export interface ResolvedAddress {
  readonly address: string;
  readonly family: 4 | 6;
}

export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

const systemResolver: Resolver = async (hostname) =>
  (await dnsLookup(hostname, { all: true, verbatim: true })).map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));

export interface SafeFetchOptions {
  /** Ranges allowed although non-public (`web.egress_allow`). */
  readonly allow: readonly Cidr[];
  /** For the whole fetch, redirects included. */
  readonly timeoutMs: number;
  /** Decoded body bytes kept; the rest is not read. */
  readonly maxBytes: number;
  readonly signal: AbortSignal;
  /** Name resolution; tests inject one. */
  readonly resolve?: Resolver;
  readonly userAgent?: string;
  /** Extra trusted CA certificates (PEM) for https; tests use a private CA. Default: Node's store. */
  readonly ca?: string;
}

export interface FetchedPage {
  /** The URL the body came from, after redirects. */
  readonly url: string;
  readonly status: number;
  /** The Content-Type header, '' when absent. */
  readonly contentType: string;
  readonly body: Buffer;
  /** The body was longer than maxBytes and was cut there. */
  readonly truncated: boolean;
}

const DEFAULT_USER_AGENT = 'Mozilla/5.0 (compatible; Berth web_extract)';

/**
 * The address to connect to for `url`, or a BlockedUrlError. Every address
 * the name resolves to is checked: a name that also points inside is refused
 * even if a public one comes first.
 */
export async function checkedAddress(url: URL, allow: readonly Cidr[], resolve: Resolver = systemResolver): Promise<ResolvedAddress> {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new BlockedUrlError(`Only http and https URLs can be fetched, not ${url.protocol.replace(/:$/, '')}`);
  }
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  let addresses: ResolvedAddress[];
  if (isIP(host) !== 0) {
    addresses = [{ address: host, family: isIP(host) === 6 ? 6 : 4 }];
  } else {
    try {
      addresses = await resolve(host);
    } catch (err) {
      throw new FetchFailedError(`Could not resolve ${host}: ${(err as Error).message}`);
    }
    if (addresses.length === 0) throw new FetchFailedError(`Could not resolve ${host}: no addresses`);
  }
  for (const a of addresses) {
    if (nonPublicRange(a.address, allow) !== undefined) throw new BlockedUrlError(BLOCKED_URL_ERROR);
  }
  return addresses[0]!;
}


function requestOnce(url: URL, target: ResolvedAddress, options: SafeFetchOptions, signal: AbortSignal): Promise<IncomingMessage> {
  const client = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = client.request(
      url,
      {
        method: 'GET',
        // No pooled sockets: a kept-alive socket to another address must never serve this request.
        agent: false,
        lookup: pinnedLookup(target),
        signal,
        // Certificate and SNI stay bound to the URL's host name, not the pinned address.
        ...(options.ca === undefined ? {} : { ca: options.ca }),
        headers: {
          'User-Agent': options.userAgent ?? DEFAULT_USER_AGENT,
          Accept: 'text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5',
          'Accept-Encoding': 'gzip, deflate, br',
        },
      },
      resolve,
    );
    req.on('error', reject);
    req.end();
  });
}

function decoded(response: IncomingMessage): Readable {
  const encoding = String(response.headers['content-encoding'] ?? '').trim().toLowerCase();
  if (encoding === 'gzip' || encoding === 'x-gzip') return response.pipe(createGunzip());
  if (encoding === 'deflate') return response.pipe(createInflate());
  if (encoding === 'br') return response.pipe(createBrotliDecompress());
  return response;
}

/** Reads at most maxBytes of the decoded body; a compressed body cannot expand past the cap. */
async function readCapped(response: IncomingMessage, maxBytes: number): Promise<{ body: Buffer; truncated: boolean }> {
  const stream = decoded(response);
  const chunks: Buffer[] = [];
  let total = 0;
  let truncated = false;
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      const room = maxBytes - total;
      // A body of exactly maxBytes is whole; one byte more is cut.
      if (chunk.length > room) {
        chunks.push(chunk.subarray(0, room));
        total += room;
        truncated = true;
        break;
      }
      chunks.push(chunk);
      total += chunk.length;
    }
  } finally {
    response.destroy();
    stream.destroy();
  }
  return { body: Buffer.concat(chunks), truncated };
}

/**
 * Fetches `rawUrl` under the rules above. Throws BlockedUrlError when a hop
 * is refused, FetchFailedError for network trouble and the deadline; an
 * abort of `options.signal` propagates as the AbortError.
 */
export async function safeFetch(rawUrl: string, options: SafeFetchOptions): Promise<FetchedPage> {
  const deadline = AbortSignal.timeout(options.timeoutMs);
  const signal = AbortSignal.any([options.signal, deadline]);
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    throw new FetchFailedError(`Invalid URL: ${rawUrl}`);
  }
  for (let hop = 0; ; hop += 1) {
    const target = await checkedAddress(url, options.allow, options.resolve);
    let response: IncomingMessage;
    try {
      if (signal.aborted) throw signal.reason;
      response = await requestOnce(url, target, options, signal);
    } catch (err) {
      throw failure(err, url, options, deadline);
    }
    const status = response.statusCode ?? 0;
    const location = response.headers.location;
    if (status >= 300 && status < 400 && location !== undefined) {
      response.destroy();
      if (hop >= MAX_REDIRECTS) throw new FetchFailedError(`Too many redirects (more than ${MAX_REDIRECTS}) from ${rawUrl}`);
      try {
        url = new URL(location, url);
      } catch {
        throw new FetchFailedError(`Invalid redirect location from ${url.toString()}: ${location}`);
      }
      continue;
    }
    try {
      const { body, truncated } = await readCapped(response, options.maxBytes);
      return { url: url.toString(), status, contentType: String(response.headers['content-type'] ?? ''), body, truncated };
    } catch (err) {
      throw failure(err, url, options, deadline);
    }
  }
}

function failure(err: unknown, url: URL, options: SafeFetchOptions, deadline: AbortSignal): Error {
  if (options.signal.aborted) return err instanceof Error ? err : new Error(String(err));
  if (deadline.aborted) return new FetchFailedError(`Could not reach ${url.toString()}: timed out after ${options.timeoutMs / 1000}s`);
  return new FetchFailedError(`Could not reach ${url.toString()}: ${err instanceof Error ? err.message : String(err)}`);
}
