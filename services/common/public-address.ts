/**
 * Which addresses count as public for server-side fetches (web_extract): not
 * private, loopback, link-local, shared (CGNAT), multicast, reserved,
 * documentation or "this host" ranges, in either family. An IPv4 address
 * written as IPv6 (`::ffff:127.0.0.1`, NAT64 `64:ff9b::7f00:1`) is judged as
 * the IPv4 address it carries, so the spelling cannot smuggle one past.
 */
import { isIP, type LookupFunction } from 'node:net';
import { cidrContains, parseCidr, type Cidr } from './cidr.js';

/** Ranges never fetched unless an operator allows them by name. */
export const NON_PUBLIC_RANGES: readonly string[] = [
  // IPv4
  '0.0.0.0/8', // "this host"
  '10.0.0.0/8',
  '100.64.0.0/10', // shared address space (carrier NAT)
  '127.0.0.0/8',
  '169.254.0.0/16', // link-local, cloud metadata endpoints
  '172.16.0.0/12',
  '192.0.0.0/24', // IETF protocol assignments
  '192.0.2.0/24', // documentation
  '192.88.99.0/24', // 6to4 relay anycast (deprecated)
  '192.168.0.0/16',
  '198.18.0.0/15', // benchmarking
  '198.51.100.0/24',
  '203.0.113.0/24',
  '224.0.0.0/4', // multicast
  '240.0.0.0/4', // reserved, and 255.255.255.255
  // IPv6
  '::/128',
  '::1/128',
  '100::/64', // discard
  '2001::/23', // IETF protocol assignments (Teredo, ORCHID, ...)
  '2001:db8::/32', // documentation
  '2002::/16', // 6to4: carries an IPv4 address of any kind
  'fc00::/7', // unique local
  'fe80::/10', // link-local
  'fec0::/10', // site-local (deprecated)
  'ff00::/8', // multicast
];

const NON_PUBLIC: readonly Cidr[] = NON_PUBLIC_RANGES.map((text) => parseCidr(text)!);
const V4_MAPPED = parseCidr('::ffff:0:0/96')!;
const NAT64 = parseCidr('64:ff9b::/96')!;
const NAT64_LOCAL = parseCidr('64:ff9b:1::/48')!;

/** The IPv4 address an IPv6 address carries in its last 32 bits, for the mapped and NAT64 forms. */
function embeddedV4(address: Cidr): string | undefined {
  if (!(cidrContains(V4_MAPPED, address) || cidrContains(NAT64, address))) return undefined;
  const n = address.network & 0xffffffffn;
  return [24n, 16n, 8n, 0n].map((s) => ((n >> s) & 0xffn).toString()).join('.');
}

/**
 * Why `address` may not be fetched: the non-public range it is in, or
 * undefined when it is public or inside one of `allow`. Throws for text that
 * is not an IP address (callers resolve names first).
 */
export function nonPublicRange(address: string, allow: readonly Cidr[] = []): string | undefined {
  const unbracketed = address.startsWith('[') && address.endsWith(']') ? address.slice(1, -1) : address;
  if (isIP(unbracketed) === 0) throw new TypeError(`not an IP address: ${address}`);
  // A zone index (fe80::1%eth0) names an interface, not another address.
  const parsed = parseCidr(unbracketed.split('%')[0]!);
  if (parsed === undefined) throw new TypeError(`not an IP address: ${address}`);
  if (allow.some((range) => cidrContains(range, parsed))) return undefined;
  const v4 = embeddedV4(parsed);
  if (v4 !== undefined) return nonPublicRange(v4, allow);
  if (cidrContains(NAT64_LOCAL, parsed)) return NAT64_LOCAL.text;
  return NON_PUBLIC.find((range) => cidrContains(range, parsed))?.text;
}

/**
 * A socket lookup that answers with an already-checked address, whatever
 * name it is asked for: the connection goes where the check said, and a
 * second DNS answer cannot swap in another address.
 */
export function pinnedLookup(target: { readonly address: string; readonly family: 4 | 6 }): LookupFunction {
  return ((_hostname: string, options: { all?: boolean }, callback: (...args: unknown[]) => void) => {
    if (options.all === true) callback(null, [{ address: target.address, family: target.family }]);
    else callback(null, target.address, target.family);
  }) as LookupFunction;
}
