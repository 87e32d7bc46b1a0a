/**
 * The kubernetes backend's NetworkPolicy objects, pinned per egress mode:
 * which pods they select, that nothing may reach a task pod, the DNS rule,
 * the ranges each mode closes in both families, the allowlist, the label
 * value, and that the docker backend's policy types and ranges are the
 * shared ones.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1NetworkPolicy, V1NetworkPolicyEgressRule } from '@kubernetes/client-node';
import { cidrContains, parseCidr } from '../../services/common/cidr.js';
import * as dockerPolicy from '../../services/executor/backends/docker/network-policy.js';
import {
  DEFAULT_DENY_NAME,
  DNS_RULE,
  egressPolicyName,
  networkPolicyManifests,
  policyLabelValue,
} from '../../services/executor/backends/kubernetes/network-policy.js';
import * as shared from '../../services/executor/backends/shared/network-policy.js';
import type { NetworkPolicy } from '../../services/executor/backends/shared/network-policy.js';

const NS = 'berth-sandboxes';
const none: NetworkPolicy = { egress: 'none', egressAllow: [] };
const publicOnly: NetworkPolicy = { egress: 'public-only', egressAllow: [] };
const open: NetworkPolicy = { egress: 'open', egressAllow: [] };

const DNS: V1NetworkPolicyEgressRule = {
  to: [
    {
      namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } },
      podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } },
    },
  ],
  ports: [
    { protocol: 'UDP', port: 53 },
    { protocol: 'TCP', port: 53 },
  ],
};

const PUBLIC_V4_EXCEPT = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.168.0.0/16',
  '224.0.0.0/4',
  '240.0.0.0/4',
];
const PUBLIC_V6_EXCEPT = ['::/128', '::1/128', 'fc00::/7', 'fe80::/10', 'fec0::/10', 'ff00::/8'];

function egressOf(policy: NetworkPolicy): V1NetworkPolicy {
  const manifests = networkPolicyManifests(NS, policy);
  assert.equal(manifests.length, 2);
  return manifests[1]!;
}

/** Whether an address is reachable under the egress rules by ipBlock (DNS excluded): what a plugin computes. */
function reachable(rules: readonly V1NetworkPolicyEgressRule[], address: string): boolean {
  const target = parseCidr(address)!;
  return rules.some((rule) =>
    (rule.to ?? []).some((peer) => {
      if (!peer.ipBlock) return false;
      const block = parseCidr(peer.ipBlock.cidr)!;
      return cidrContains(block, target) && !(peer.ipBlock.except ?? []).some((e) => cidrContains(parseCidr(e)!, target));
    }),
  );
}

describe('kubernetes NetworkPolicy objects', () => {
  it('a default deny selects every Berth pod: no ingress, no egress, no rule', () => {
    for (const policy of [none, publicOnly, open]) {
      const deny = networkPolicyManifests(NS, policy)[0]!;
      assert.deepEqual(deny, {
        apiVersion: 'networking.k8s.io/v1',
        kind: 'NetworkPolicy',
        metadata: { name: DEFAULT_DENY_NAME, namespace: NS, labels: { 'app.kubernetes.io/managed-by': 'berth' } },
        spec: {
          podSelector: { matchLabels: { 'app.kubernetes.io/managed-by': 'berth' } },
          policyTypes: ['Ingress', 'Egress'],
          ingress: [],
          egress: [],
        },
      });
    }
  });

  it("the policy's object selects its pods by managed-by and policy label, admits no ingress, and records the policy", () => {
    const policy: NetworkPolicy = { egress: 'public-only', egressAllow: ['10.20.0.0/16'] };
    const value = policyLabelValue(policy);
    const egress = egressOf(policy);
    assert.equal(egress.metadata?.name, `berth-egress-${value}`);
    assert.equal(egress.metadata?.name, egressPolicyName(policy));
    assert.equal(egress.metadata?.namespace, NS);
    assert.deepEqual(egress.metadata?.labels, { 'app.kubernetes.io/managed-by': 'berth', 'berth.dev/policy': value });
    assert.deepEqual(JSON.parse(egress.metadata?.annotations?.['berth.dev/network-policy'] ?? ''), { egress: 'public-only', egress_allow: ['10.20.0.0/16'] });
    assert.deepEqual(egress.spec?.podSelector, { matchLabels: { 'app.kubernetes.io/managed-by': 'berth', 'berth.dev/policy': value } });
    assert.deepEqual(egress.spec?.policyTypes, ['Ingress', 'Egress']);
    // An empty ingress list under policyTypes Ingress: nothing reaches a task pod, other task pods included.
    assert.deepEqual(egress.spec?.ingress, []);
    assert.ok(egress.metadata!.name!.length <= 63);
  });

  it('egress none: DNS to the kube-dns pods on 53 UDP and TCP, nothing else', () => {
    assert.deepEqual(egressOf(none).spec?.egress, [DNS]);
    assert.deepEqual(DNS_RULE, DNS);
  });

  it('egress public-only: DNS, then every address of both families but the non-public ranges', () => {
    assert.deepEqual(egressOf(publicOnly).spec?.egress, [
      DNS,
      {
        to: [
          { ipBlock: { cidr: '0.0.0.0/0', except: PUBLIC_V4_EXCEPT } },
          { ipBlock: { cidr: '::/0', except: PUBLIC_V6_EXCEPT } },
        ],
      },
    ]);
    const rules = egressOf(publicOnly).spec!.egress!;
    for (const closed of ['10.96.0.1', '172.17.0.1', '192.168.1.1', '169.254.169.254', '100.100.100.200', '127.0.0.1', '224.0.0.251', 'fd00:ec2::254', 'fe80::1', '::1', 'ff02::1', 'fd12::1']) {
      assert.ok(!reachable(rules, closed), `${closed} is reachable under public-only`);
    }
    for (const open of ['1.1.1.1', '8.8.8.8', '2606:4700::1111', '2001:4860:4860::8888']) {
      assert.ok(reachable(rules, open), `${open} is not reachable under public-only`);
    }
  });

  it('egress open: everything but link-local and cloud metadata, in both families', () => {
    assert.deepEqual(egressOf(open).spec?.egress, [
      DNS,
      {
        to: [
          { ipBlock: { cidr: '0.0.0.0/0', except: ['169.254.0.0/16'] } },
          { ipBlock: { cidr: '::/0', except: ['fe80::/10', 'fd00:ec2::254/128'] } },
        ],
      },
    ]);
    const rules = egressOf(open).spec!.egress!;
    for (const closed of ['169.254.169.254', 'fe80::a9fe:a9fe', 'fd00:ec2::254']) assert.ok(!reachable(rules, closed), closed);
    for (const reached of ['10.0.0.1', '1.1.1.1', 'fd00:ec2::253', '2606:4700::1111']) assert.ok(reachable(rules, reached), reached);
  });

  it('egress_allow opens each range (normalised, once) in every mode, after DNS and before the broad rule', () => {
    const allow = ['10.20.1.1/16', 'fd00:1::/32', '10.20.0.0/16', 'not-a-cidr'];
    for (const egress of ['none', 'public-only', 'open'] as const) {
      const rules = egressOf({ egress, egressAllow: allow }).spec!.egress!;
      assert.deepEqual(rules[0], DNS);
      assert.deepEqual(rules[1], { to: [{ ipBlock: { cidr: '10.20.0.0/16' } }, { ipBlock: { cidr: 'fd00:1::/32' } }] }, egress);
      assert.equal(rules.length, egress === 'none' ? 2 : 3);
      assert.ok(reachable(rules, '10.20.5.5'));
      assert.ok(reachable(rules, 'fd00:1::9'));
    }
    assert.ok(!reachable(egressOf({ egress: 'none', egressAllow: allow }).spec!.egress!, '1.1.1.1'));
  });

  it("every except lies strictly inside its block's cidr and family (the API server refuses others)", () => {
    for (const policy of [publicOnly, open]) {
      for (const rule of egressOf(policy).spec!.egress!) {
        for (const peer of rule.to ?? []) {
          if (!peer.ipBlock) continue;
          const block = parseCidr(peer.ipBlock.cidr)!;
          for (const e of peer.ipBlock.except ?? []) {
            const inner = parseCidr(e)!;
            assert.ok(cidrContains(block, inner) && inner.prefix > block.prefix, `${e} in ${peer.ipBlock.cidr}`);
            // Go reads ::ffff:0:0/96 as IPv4: never an except of ::/0.
            assert.ok(!cidrContains(parseCidr('::ffff:0:0/96')!, inner), e);
          }
        }
      }
    }
  });

  it('the policy label value is label-safe, stable, and equal for equal policies however spelt', () => {
    const value = policyLabelValue({ egress: 'public-only', egressAllow: ['10.20.0.0/16', 'fd00:1::/32'] });
    assert.match(value, /^p-[0-9a-f]{16}$/);
    assert.match(value, /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/);
    assert.equal(value, policyLabelValue({ egress: 'public-only', egressAllow: ['fd00:1::5/32', '10.20.1.1/16', '10.20.0.0/16'] }));
    // Pinned (sha256 of the canonical JSON '["none",[]]'): a change renames every object and leaves running pods unselected.
    assert.equal(policyLabelValue(none), 'p-61814a6f7fd963ba');
    const values = new Set([none, publicOnly, open, { egress: 'none', egressAllow: ['10.0.0.0/8'] } as NetworkPolicy].map(policyLabelValue));
    assert.equal(values.size, 4);
  });

  it('docker keeps its policy types and ranges: they are the shared ones', () => {
    assert.equal(dockerPolicy.NON_PUBLIC, shared.NON_PUBLIC);
    assert.equal(dockerPolicy.LINK_LOCAL, shared.LINK_LOCAL);
    assert.equal(dockerPolicy.tenantPolicy, shared.tenantPolicy);
    assert.deepEqual(shared.NON_PUBLIC[4], PUBLIC_V4_EXCEPT);
    assert.deepEqual(shared.NON_PUBLIC[6], ['::/128', '::1/128', '::ffff:0:0/96', 'fc00::/7', 'fe80::/10', 'fec0::/10', 'ff00::/8']);
  });
});
