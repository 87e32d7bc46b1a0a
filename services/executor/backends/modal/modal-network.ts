/**
 * Berth's network policy (`docker.egress`, `docker.egress_allow`, narrowed
 * per tenant by `tenants[].network`) mapped onto what Modal's SDK offers a
 * sandbox: `blockNetwork` or an `outboundCidrAllowlist`. Pure, so every
 * mapping is pinned by unit tests.
 *
 * | Berth                     | Modal                                  |
 * |---------------------------|----------------------------------------|
 * | egress none               | blockNetwork: true                     |
 * | egress none + egress_allow| outboundCidrAllowlist: egress_allow    |
 * | public-only               | open (see {@link ModalNetwork.unmapped}) |
 * | open                      | open                                   |
 *
 * `public-only` has no SDK option: Modal has no "every public address but no
 * private one" rule. A Modal sandbox has no route into the executor's own
 * networks anyway, so what public-only protects on docker (the host, the
 * LAN, cloud metadata of the executor's machine) is out of its reach; what
 * is left open is Modal's side, and the start-up log says so.
 */
import type { EgressMode } from '../../../common/config.js';

export interface ModalNetworkPolicy {
  readonly egress: EgressMode;
  readonly egressAllow: readonly string[];
}

/** The SDK's sandbox options for one policy, and what of the policy they do not express. */
export interface ModalNetwork {
  readonly options: { readonly blockNetwork?: true; readonly outboundCidrAllowlist?: string[] };
  /** A sentence for the log and `berth doctor` when part of the policy cannot apply; undefined when all of it does. */
  readonly unmapped: string | undefined;
}

/** The operator's policy narrowed by a tenant's override (absent keys inherit). */
export function tenantModalPolicy(
  operator: ModalNetworkPolicy,
  override: { readonly egress?: EgressMode | undefined; readonly egress_allow?: readonly string[] | undefined } | undefined,
): ModalNetworkPolicy {
  return { egress: override?.egress ?? operator.egress, egressAllow: override?.egress_allow ?? operator.egressAllow };
}

export function modalNetwork(policy: ModalNetworkPolicy): ModalNetwork {
  switch (policy.egress) {
    case 'none':
      return policy.egressAllow.length === 0
        ? { options: { blockNetwork: true }, unmapped: undefined }
        : { options: { outboundCidrAllowlist: [...policy.egressAllow] }, unmapped: undefined };
    case 'public-only':
      return {
        options: {},
        unmapped:
          'egress public-only has no Modal option: the sandbox gets open egress (it has no route into the ' +
          "executor's networks; private ranges on Modal's side are not blocked by Berth)",
      };
    case 'open':
      return { options: {}, unmapped: undefined };
  }
}
