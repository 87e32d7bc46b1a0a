/**
 * Kubernetes stand-in (a test double): CIDR ranges as the API server reads
 * them (Go's net.ParseCIDR and IPNet.Contains), for NetworkPolicy ipBlock
 * validation. Go's reading differs from a plain bit comparison in one way a
 * client meets: an IPv4-mapped IPv6 address (`::ffff:10.0.0.0`) is IPv4, so
 * `::ffff:0:0/96` does not lie inside `::/0`.
 */
import { isIP } from 'node:net';

/** Go's IPNet: the network address (4 bytes for IPv4, 16 for IPv6) and its mask. */
export interface GoIpNet {
  readonly ip: readonly number[];
  readonly mask: readonly number[];
  /** The mask's length in bits (Go's Mask.Size() ones). */
  readonly prefix: number;
}

function v6Bytes(address: string): number[] {
  let text = address;
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (v4) {
    const [a, b, c, d] = v4.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, -v4[0].length)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split('::') as [string, string | undefined];
  const headGroups = head ? head.split(':') : [];
  const tailGroups = tail ? tail.split(':') : [];
  const fill = tail === undefined ? [] : Array<string>(8 - headGroups.length - tailGroups.length).fill('0');
  return [...headGroups, ...fill, ...tailGroups].flatMap((g) => {
    const n = parseInt(g, 16);
    return [n >> 8, n & 0xff];
  });
}

/** Go's IP.To4(): the 4 bytes of an IPv4 or IPv4-mapped address, else undefined. */
function to4(ip: readonly number[]): readonly number[] | undefined {
  if (ip.length === 4) return ip;
  const mapped = ip.slice(0, 10).every((b) => b === 0) && ip[10] === 0xff && ip[11] === 0xff;
  return mapped ? ip.slice(12) : undefined;
}

/** Go's net.ParseCIDR (network address and mask), or undefined where Go returns an error. */
export function goParseCidr(text: unknown): GoIpNet | undefined {
  if (typeof text !== 'string') return undefined;
  const m = /^([^/]+)\/(\d{1,3})$/.exec(text);
  if (!m) return undefined;
  // Go's ParseCIDR refuses a zone (fe80::1%eth0).
  const family = m[1]!.includes('%') ? 0 : isIP(m[1]!);
  if (family === 0) return undefined;
  const bits = family === 4 ? 32 : 128;
  const prefix = Number(m[2]);
  if (prefix > bits) return undefined;
  const mask = Array.from({ length: bits / 8 }, (_, i) => {
    const ones = Math.min(8, Math.max(0, prefix - i * 8));
    return (0xff << (8 - ones)) & 0xff;
  });
  const address = family === 4 ? m[1]!.split('.').map(Number) : v6Bytes(m[1]!);
  return { ip: address.map((b, i) => b & mask[i]!), mask, prefix };
}

/** Go's IPNet.Contains(ip). */
export function goContains(net: GoIpNet, ip: readonly number[]): boolean {
  let nn = to4(net.ip) ?? net.ip;
  let m = net.mask;
  if (m.length === 16 && nn.length === 4) m = m.slice(12);
  if (m.length === 4 && nn.length === 16) nn = [];
  const target = to4(ip) ?? ip;
  if (target.length !== nn.length) return false;
  return target.every((b, i) => (b & m[i]!) === (nn[i]! & m[i]!));
}
