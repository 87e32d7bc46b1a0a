/**
 * The tenant network policy every backend that enforces one shares: what a
 * sandbox may reach (`docker.egress`, `docker.egress_allow`, narrowed per
 * tenant by `tenants[].network`) and which ranges count as not public.
 * Backend-neutral: docker turns it into iptables chains
 * (docker/network-policy.ts), kubernetes into NetworkPolicy objects
 * (kubernetes/network-policy.ts).
 */
import { parseCidr, type IpFamily } from '../../../common/cidr.js';
import type { EgressMode } from '../../../common/config.js';

/** What a sandbox may reach beyond its DNS resolver. */
export interface NetworkPolicy {
  readonly egress: EgressMode;
  /** CIDR ranges opened although private (any family). */
  readonly egressAllow: readonly string[];
}

/** `tenants[].network`: narrows the operator's policy (validated at config load). */
export interface TenantNetworkOverride {
  readonly egress?: EgressMode | undefined;
  readonly egress_allow?: readonly string[] | undefined;
}

/** Not public: never reached under public-only unless named in egress_allow. */
export const NON_PUBLIC: Readonly<Record<IpFamily, readonly string[]>> = {
  4: [
    '0.0.0.0/8',
    '10.0.0.0/8',
    '100.64.0.0/10',
    '127.0.0.0/8',
    '169.254.0.0/16',
    '172.16.0.0/12',
    '192.168.0.0/16',
    '224.0.0.0/4',
    '240.0.0.0/4',
  ],
  6: ['::/128', '::1/128', '::ffff:0:0/96', 'fc00::/7', 'fe80::/10', 'fec0::/10', 'ff00::/8'],
};
/** Still closed under `open`: link-local, where cloud metadata endpoints live. */
export const LINK_LOCAL: Readonly<Record<IpFamily, readonly string[]>> = { 4: ['169.254.0.0/16'], 6: ['fe80::/10'] };

/** The tenant's effective policy: the operator's, narrowed by the tenant's override. */
export function tenantPolicy(operator: NetworkPolicy, override: TenantNetworkOverride | undefined): NetworkPolicy {
  return {
    egress: override?.egress ?? operator.egress,
    egressAllow: override?.egress_allow ?? operator.egressAllow,
  };
}

/** The ranges of one family among `cidrs` (normalised). */
export function ofFamily(cidrs: readonly string[], family: IpFamily): string[] {
  return cidrs.flatMap((c) => {
    const parsed = parseCidr(c);
    return parsed?.family === family ? [parsed.text] : [];
  });
}

/** `cidrs` normalised (host bits cleared), without repeats, sorted: equal sets give equal lists. */
export function canonicalCidrs(cidrs: readonly string[]): string[] {
  return [...new Set(cidrs.map((c) => parseCidr(c)?.text ?? c))].sort();
}
