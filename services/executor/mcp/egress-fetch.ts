/**
 * The `fetch` an MCP HTTP server is reached with: from the executor, under
 * the tenant's egress policy (`docker.egress` and `docker.egress_allow`,
 * narrowed by `tenants[].network`), the same policy its docker containers
 * get, on every backend:
 *
 * - `none`: nothing; `public-only`: public addresses only; `open`: private
 *   and shared ranges too, link-local (cloud metadata) never; ranges in
 *   `egress_allow` are open in every mode.
 * - The host is resolved once and every address it resolves to is checked;
 *   the connection goes to the checked address (the socket's lookup is
 *   pinned), so a second DNS answer cannot swap in another one.
 * - Redirects are not followed here: each hop the SDK follows is a new
 *   request, checked again.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import http, { type IncomingHttpHeaders } from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';
import { Readable } from 'node:stream';
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js';
import { cidrContains, parseCidr, type Cidr } from '../../common/cidr.js';
import { nonPublicRange, pinnedLookup } from '../../common/public-address.js';
import { LINK_LOCAL as LINK_LOCAL_RANGES, type NetworkPolicy } from '../backends/shared/network-policy.js';

/** A tenant's effective egress policy (the sandboxes' network policy). */
export type EgressPolicy = NetworkPolicy;

/** The request was refused by the egress policy before any connection was opened. */
export class EgressRefusedError extends Error {
  override readonly name = 'EgressRefusedError';
}

interface Address {
  readonly address: string;
  readonly family: 4 | 6;
}

export type Resolver = (hostname: string) => Promise<Address[]>;

const systemResolver: Resolver = async (hostname) =>
  (await dnsLookup(hostname, { all: true, verbatim: true })).map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));

const LINK_LOCAL: readonly Cidr[] = [...LINK_LOCAL_RANGES[4], ...LINK_LOCAL_RANGES[6]].map((c) => parseCidr(c)!);

/** Why the policy refuses `address`, or undefined when it may be reached. */
export function egressRefusal(address: string, policy: EgressPolicy): string | undefined {
  const allow = policy.egressAllow.map((c) => parseCidr(c)).filter((c): c is Cidr => c !== undefined);
  const parsed = parseCidr(address.split('%')[0]!);
  if (parsed !== undefined && allow.some((range) => cidrContains(range, parsed))) return undefined;
  switch (policy.egress) {
    case 'none':
      return 'the egress policy is none';
    case 'open': {
      const linkLocal = parsed === undefined ? undefined : LINK_LOCAL.find((range) => cidrContains(range, parsed));
      return linkLocal === undefined ? undefined : `${address} is link-local (${linkLocal.text}), closed in every egress mode`;
    }
    case 'public-only': {
      const range = nonPublicRange(address, allow);
      return range === undefined ? undefined : `${address} is in ${range}, not public, and the egress policy is public-only`;
    }
  }
}

/** The checked address to connect to for `url`. */
async function checkedAddress(url: URL, policy: EgressPolicy, resolve: Resolver): Promise<Address> {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new EgressRefusedError(`only http and https are allowed, not ${url.protocol}`);
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  const addresses: Address[] = isIP(host) !== 0 ? [{ address: host, family: isIP(host) === 6 ? 6 : 4 }] : await resolve(host);
  if (addresses.length === 0) throw new Error(`could not resolve ${host}`);
  for (const a of addresses) {
    const refusal = egressRefusal(a.address, policy);
    if (refusal !== undefined) {
      throw new EgressRefusedError(
        `${url.host} is not reachable under this tenant's egress policy: ${refusal}. ` +
          'An operator can open the range with docker.egress_allow (and tenants[].network.egress_allow).',
      );
    }
  }
  return addresses[0]!;
}


function responseHeaders(raw: IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(raw)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) headers.append(name, v);
  }
  return headers;
}

async function bodyBytes(body: RequestInit['body']): Promise<Buffer | undefined> {
  if (body === undefined || body === null) return undefined;
  if (typeof body === 'string') return Buffer.from(body, 'utf8');
  return Buffer.from(await new Response(body).arrayBuffer());
}

/** A fetch that connects only where `policy` allows (see the module comment). */
export function egressFetch(policy: EgressPolicy, resolve: Resolver = systemResolver): FetchLike {
  return async (input, init = {}) => {
    const url = new URL(typeof input === 'string' ? input : input.href);
    const target = await checkedAddress(url, policy, resolve);
    const body = await bodyBytes(init.body);
    const headers = Object.fromEntries(new Headers(init.headers).entries());
    if (body !== undefined) headers['content-length'] = String(body.length);
    const client = url.protocol === 'https:' ? https : http;
    const signal = init.signal ?? undefined;
    return new Promise<Response>((resolvePromise, reject) => {
      const req = client.request(
        url,
        { method: init.method ?? 'GET', headers, agent: false, lookup: pinnedLookup(target), ...(signal ? { signal } : {}) },
        (res) => {
          const status = res.statusCode ?? 502;
          const nullBody = status === 204 || status === 304 || (init.method ?? 'GET') === 'HEAD';
          if (nullBody) res.resume();
          resolvePromise(
            new Response(nullBody ? null : (Readable.toWeb(res) as ReadableStream<Uint8Array>), {
              status,
              statusText: res.statusMessage ?? '',
              headers: responseHeaders(res.headers),
            }),
          );
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  };
}
