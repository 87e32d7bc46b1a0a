/**
 * CIDR ranges as numbers, for the network policy: parse `10.0.0.0/8` or
 * `fd00::/8`, and tell whether one range lies inside another (a tenant's
 * `egress_allow` must lie inside the operator's).
 */
import { isIPv4, isIPv6 } from 'node:net';

export type IpFamily = 4 | 6;

/** A parsed range: its first address as a number, and the prefix length. */
export interface Cidr {
  readonly family: IpFamily;
  readonly network: bigint;
  readonly prefix: number;
  /** Normalised text, host bits cleared (`10.1.0.0/16`). */
  readonly text: string;
}

function v4ToBig(address: string): bigint {
  return address.split('.').reduce((acc, part) => (acc << 8n) | BigInt(Number(part)), 0n);
}

function v6ToBig(address: string): bigint {
  let text = address;
  // An embedded IPv4 tail (::ffff:1.2.3.4) becomes two groups.
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4) {
    const n = v4ToBig(v4[1]!);
    text = `${text.slice(0, -v4[1]!.length)}${(n >> 16n).toString(16)}:${(n & 0xffffn).toString(16)}`;
  }
  const [head, tail] = text.split('::') as [string, string | undefined];
  const headGroups = head ? head.split(':') : [];
  const tailGroups = tail ? tail.split(':') : [];
  const fill = tail === undefined ? [] : Array<string>(8 - headGroups.length - tailGroups.length).fill('0');
  return [...headGroups, ...fill, ...tailGroups].reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g, 16)), 0n);
}

function bigToText(family: IpFamily, n: bigint): string {
  if (family === 4) return [24n, 16n, 8n, 0n].map((s) => ((n >> s) & 0xffn).toString()).join('.');
  const groups = Array.from({ length: 8 }, (_, i) => ((n >> BigInt((7 - i) * 16)) & 0xffffn).toString(16));
  return groups.join(':').replace(/(^|:)0(:0)+(:|$)/, '::').replace(/^:::/, '::').replace(/:::$/, '::');
}

/** Parses `ADDRESS/PREFIX` (a bare address is a /32 or /128); undefined when it is not one. */
export function parseCidr(text: string): Cidr | undefined {
  const [address = '', prefixText, extra] = text.trim().split('/');
  if (extra !== undefined) return undefined;
  const family: IpFamily | undefined = isIPv4(address) ? 4 : isIPv6(address) && !address.includes('%') ? 6 : undefined;
  if (family === undefined) return undefined;
  const bits = family === 4 ? 32 : 128;
  if (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText)) return undefined;
  const prefix = prefixText === undefined ? bits : Number(prefixText);
  if (prefix > bits) return undefined;
  const mask = ((1n << BigInt(bits)) - 1n) ^ ((1n << BigInt(bits - prefix)) - 1n);
  const network = (family === 4 ? v4ToBig(address) : v6ToBig(address)) & mask;
  return { family, network, prefix, text: `${bigToText(family, network)}/${prefix}` };
}

/** Whether every address of `inner` is in `outer`. */
export function cidrContains(outer: Cidr, inner: Cidr): boolean {
  if (outer.family !== inner.family || inner.prefix < outer.prefix) return false;
  const bits = BigInt(outer.family === 4 ? 32 : 128);
  return inner.network >> (bits - BigInt(outer.prefix)) === outer.network >> (bits - BigInt(outer.prefix));
}

/** Whether the two ranges share an address. */
export function cidrOverlaps(a: Cidr, b: Cidr): boolean {
  return cidrContains(a, b) || cidrContains(b, a);
}
