/**
 * Pure builders for `docker.network: isolated`: which policy a tenant gets,
 * the names of Berth's networks and chains, and the iptables-restore text
 * that enforces a policy. No I/O, so every rule is pinned by unit tests;
 * network-isolation.ts installs them.
 *
 * Layout (filter table, the same for iptables and ip6tables):
 *
 *   DOCKER-USER (ip6: FORWARD when dockerd made no DOCKER-USER there)
 *     -i berth+ -j BERTH-FORWARD                   first rule
 *   BERTH-FORWARD
 *     -i berth<id> -g BERTH-NET-<id>               one per Berth network (goto: RETURN goes back to DOCKER-USER)
 *     -j DROP                                      a Berth bridge without its chain is closed, not open
 *   BERTH-NET-<id>                                 one per policy
 *     -o berth<id> -j DROP                         no traffic between task containers
 *     --ctstate DNAT -j DROP                       nor to ports published on the host's addresses
 *     -d RESOLVER -p udp|tcp --dport 53 -j RETURN  Docker's embedded DNS forwards from the container's namespace
 *     -d ALLOWED -j RETURN                         egress_allow
 *     -d NON-PUBLIC -j DROP ... -j RETURN          public-only (open: link-local only; none: -j DROP)
 *   INPUT
 *     -i berth+ -j BERTH-INPUT                     first rule
 *   BERTH-INPUT                                    traffic to the host's own addresses (not FORWARD)
 *     --ctstate ESTABLISHED,RELATED -j RETURN
 *     -d LOCAL-RESOLVER -p udp|tcp --dport 53 -j RETURN
 *     (ip6) neighbour solicitation/advertisement -j RETURN
 *     -j DROP
 *
 * A network per policy and resolver list (not per tenant, not per
 * container): tenants with the same policy share one bridge whose inter-container traffic is off
 * (`enable_icc=false`, and the `-o` rule above), so the rules never change
 * while containers come and go.
 */
import { createHash } from 'node:crypto';
import type Dockerode from 'dockerode';
import { EGRESS_MODES } from '../../../common/config.js';
import { parseCidr, type IpFamily } from '../../../common/cidr.js';
import { canonicalCidrs, LINK_LOCAL, NON_PUBLIC, ofFamily, type NetworkPolicy } from '../shared/network-policy.js';

export { LINK_LOCAL, NON_PUBLIC, ofFamily, tenantPolicy, type NetworkPolicy, type TenantNetworkOverride } from '../shared/network-policy.js';

export const CHAIN_FORWARD = 'BERTH-FORWARD';
export const CHAIN_INPUT = 'BERTH-INPUT';
/** Every Berth bridge is named `berth<id>`: `berth+` matches them all and nothing of Docker's. */
export const BRIDGE_PREFIX = 'berth';
export const BRIDGE_WILDCARD = `${BRIDGE_PREFIX}+`;
export const NETWORK_LABEL = 'berth.network';
/** The rules a network enforces (policy and resolvers), as JSON: any executor can put them back from it. */
export const NETWORK_POLICY_LABEL = 'berth.network.policy';

/**
 * What one Berth network enforces: the policy, and the upstream resolvers
 * of Docker's embedded DNS opened on port 53 (they differ between executors
 * with different `--dns`).
 */
export interface NetworkRules {
  readonly policy: NetworkPolicy;
  readonly resolvers: readonly string[];
}

/** Short stable id of a network's rules: equal rules share a network and a chain. */
export function rulesId(rules: NetworkRules): string {
  const key = [rules.policy.egress, canonicalCidrs(rules.policy.egressAllow), canonicalCidrs(rules.resolvers)];
  return createHash('sha256').update(JSON.stringify(key)).digest('hex').slice(0, 10);
}

/** Docker network name of a policy. */
export function networkName(id: string): string {
  return `berth-isolated-${id}`;
}

/** Linux bridge of a policy's network (15 characters, the kernel's limit). */
export function bridgeName(id: string): string {
  return `${BRIDGE_PREFIX}${id}`;
}

export function networkChain(id: string): string {
  return `BERTH-NET-${id}`;
}

/** The create options of a Docker network enforcing `rules` (recorded in a label, so any executor can restore them). */
export function networkCreateOptions(id: string, rules: NetworkRules): Dockerode.NetworkCreateOptions {
  return {
    Name: networkName(id),
    Driver: 'bridge',
    CheckDuplicate: true,
    Internal: false,
    Attachable: false,
    EnableIPv6: false,
    Options: {
      'com.docker.network.bridge.name': bridgeName(id),
      'com.docker.network.bridge.enable_icc': 'false',
      'com.docker.network.bridge.enable_ip_masquerade': 'true',
    },
    Labels: {
      [NETWORK_LABEL]: '1',
      [NETWORK_POLICY_LABEL]: JSON.stringify({ ...rules.policy, resolvers: rules.resolvers }),
    },
  };
}

/** The rules recorded in a network's label; a label that does not parse gives the narrowest (closed, not open). */
export function rulesFromLabel(label: string | undefined): NetworkRules {
  const addresses = (v: unknown) =>
    Array.isArray(v) ? v.filter((c): c is string => typeof c === 'string' && parseCidr(c) !== undefined) : [];
  try {
    const p = JSON.parse(label ?? '') as Partial<NetworkPolicy> & { resolvers?: unknown };
    const egress = EGRESS_MODES.find((m) => m === p.egress);
    if (egress) return { policy: { egress, egressAllow: addresses(p.egressAllow) }, resolvers: addresses(p.resolvers) };
  } catch {
    // falls through to the narrowest rules
  }
  return { policy: { egress: 'none', egressAllow: [] }, resolvers: [] };
}

function dnsRules(chain: string, servers: readonly string[]): string[] {
  return servers.flatMap((s) => ['udp', 'tcp'].map((p) => `-A ${chain} -d ${s} -p ${p} -m ${p} --dport 53 -j RETURN`));
}

/**
 * iptables-restore text (for `--noflush`) replacing one policy's chain.
 * Declaring the chain flushes it in the same transaction, so a restart
 * never leaves it open between the old rules and the new.
 */
export function buildNetworkChainRestore(
  family: IpFamily,
  id: string,
  policy: NetworkPolicy,
  resolvers: readonly string[],
): string {
  const chain = networkChain(id);
  const lines = [
    `*filter`,
    `:${chain} - [0:0]`,
    `-A ${chain} -o ${bridgeName(id)} -j DROP`,
    // A port published on a host address is DNATed to a container before FORWARD: the host, reached sideways.
    `-A ${chain} -m conntrack --ctstate DNAT -j DROP`,
  ];
  lines.push(...dnsRules(chain, ofFamily(resolvers, family)));
  for (const cidr of ofFamily(policy.egressAllow, family)) lines.push(`-A ${chain} -d ${cidr} -j RETURN`);
  if (policy.egress === 'none') {
    lines.push(`-A ${chain} -j DROP`);
  } else {
    const closed = policy.egress === 'open' ? LINK_LOCAL[family] : NON_PUBLIC[family];
    for (const cidr of closed) lines.push(`-A ${chain} -d ${cidr} -j DROP`);
    lines.push(`-A ${chain} -j RETURN`);
  }
  lines.push('COMMIT', '');
  return lines.join('\n');
}

/** iptables-restore text replacing BERTH-INPUT: nothing from a Berth bridge reaches the host but DNS on it. */
export function buildInputChainRestore(family: IpFamily, localResolvers: readonly string[]): string {
  const lines = [`*filter`, `:${CHAIN_INPUT} - [0:0]`, `-A ${CHAIN_INPUT} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN`];
  lines.push(...dnsRules(CHAIN_INPUT, ofFamily(localResolvers, family)));
  if (family === 6) {
    // Without neighbour discovery to the gateway an IPv6 bridge routes nothing at all.
    for (const type of ['neighbour-solicitation', 'neighbour-advertisement']) {
      lines.push(`-A ${CHAIN_INPUT} -p ipv6-icmp -m icmp6 --icmpv6-type ${type} -j RETURN`);
    }
  }
  lines.push(`-A ${CHAIN_INPUT} -j DROP`, 'COMMIT', '');
  return lines.join('\n');
}

/** The rule (as iptables arguments, without -A/-I/-C/-D) that sends a policy's bridge to its chain. */
export function forwardEntry(id: string): string[] {
  return ['-i', bridgeName(id), '-g', networkChain(id)];
}

/** The jumps from the parent chains into Berth's, as iptables arguments. */
export function parentJumps(forwardParent: string): { chain: string; rule: string[] }[] {
  return [
    { chain: forwardParent, rule: ['-i', BRIDGE_WILDCARD, '-j', CHAIN_FORWARD] },
    { chain: 'INPUT', rule: ['-i', BRIDGE_WILDCARD, '-j', CHAIN_INPUT] },
  ];
}

/**
 * The upstream resolvers of Docker's embedded DNS, from the host's
 * resolv.conf text, daemon.json's `dns` and `--dns` flags. Loopback ones are
 * dropped as dockerd drops them; when none is left dockerd uses Google's
 * public resolvers, which then need the same opening under `egress: none`.
 */
export function embeddedDnsUpstreams(resolvConf: string, extra: readonly string[]): string[] {
  const fromFile = resolvConf
    .split('\n')
    .map((line) => /^\s*nameserver\s+(\S+)/.exec(line)?.[1])
    .filter((s): s is string => s !== undefined);
  const all = [...extra, ...fromFile].map((s) => s.replace(/%.*$/, '')).filter((s) => parseCidr(s) !== undefined);
  const usable = all.filter((s) => !/^127\./.test(s) && s !== '::1');
  const upstreams = usable.length > 0 ? usable : ['8.8.8.8', '8.8.4.4', '2001:4860:4860::8888', '2001:4860:4860::8844'];
  return [...new Set(upstreams.map((s) => parseCidr(s)!.text.replace(/\/(32|128)$/, '')))];
}
