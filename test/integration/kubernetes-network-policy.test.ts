/**
 * The kubernetes backend's NetworkPolicy objects against the Kubernetes
 * stand-in (a test double of an API server on the local Docker engine),
 * reached only through the kubeconfig it writes: applied through
 * @kubernetes/client-node, and read and applied with this machine's
 * kubectl as an independent client. The stand-in stores and validates
 * NetworkPolicies as the API server does but enforces only full isolation,
 * so the traffic checked here is that one case: a Berth pod whose policy
 * object is missing has no network at all.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type * as K8s from '@kubernetes/client-node';
import Dockerode from 'dockerode';
import { stringify } from 'yaml';
import {
  checkNetworkPolicies,
  DEFAULT_DENY_NAME,
  egressPolicyName,
  ENFORCEMENT_NOTE,
  ensureNetworkPolicies,
  networkPolicyManifests,
  policyLabelValue,
} from '../../services/executor/backends/kubernetes/network-policy.js';
import type { NetworkPolicy } from '../../services/executor/backends/shared/network-policy.js';
import { dockerUnavailableReason, SANDBOX_IMAGE } from '../support/docker-fixtures.js';
import { startKubernetesStandIn, type RunningKubernetesStandIn } from '../support/kubernetes-standin.js';

const docker = new Dockerode();
const skip = await dockerUnavailableReason(docker);
const NS = 'berth-sandboxes';
/** A second namespace, where kubectl applies the same manifests first. */
const NS_KUBECTL = 'berth-kubectl';

const publicOnly: NetworkPolicy = { egress: 'public-only', egressAllow: ['10.20.0.0/16', 'fd00:1::/32'] };
const none: NetworkPolicy = { egress: 'none', egressAllow: [] };
const open: NetworkPolicy = { egress: 'open', egressAllow: [] };

/* eslint-disable @typescript-eslint/no-explicit-any -- kubectl's JSON */
/** JSON with sorted keys: equal objects, equal text. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) =>
    v !== null && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : 1))) : v,
  );
}

/** A manifest's spec as the API server writes it back: empty lists left out. */
function asStored(spec: unknown): unknown {
  return JSON.parse(JSON.stringify(spec, (_k, v: unknown) => (Array.isArray(v) && v.length === 0 ? undefined : v)));
}

describe('kubernetes NetworkPolicies on the stand-in', { skip, timeout: 300_000 }, () => {
  let k: RunningKubernetesStandIn;
  let networking: K8s.NetworkingV1Api;
  let restricted: K8s.NetworkingV1Api;
  let core: K8s.CoreV1Api;
  const ok = async (args: readonly string[], input?: string) => {
    const r = await k.kubectl(args, input === undefined ? {} : { input });
    assert.equal(r.code, 0, `kubectl ${args.join(' ')} failed:\n${r.stderr}\nstand-in stderr:\n${k.stderr()}`);
    return r.stdout;
  };
  const getJson = async (ns: string, name: string) => JSON.parse(await ok(['-n', ns, 'get', 'networkpolicy', name, '-o', 'json'])) as Record<string, any>;

  before(async () => {
    k = await startKubernetesStandIn(['--namespace', NS, '--namespace', NS_KUBECTL, '--deny', 'create:networkpolicies']);
    const k8s = await import('@kubernetes/client-node');
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(k.kubeconfig);
    networking = kc.makeApiClient(k8s.NetworkingV1Api);
    core = kc.makeApiClient(k8s.CoreV1Api);
    const limited = new k8s.KubeConfig();
    limited.loadFromFile(k.kubeconfig);
    limited.setCurrentContext('kubernetes-standin-restricted');
    restricted = limited.makeApiClient(k8s.NetworkingV1Api);
  });

  after(async () => {
    await k?.stopAndCheck();
  });

  it('creates the objects through client-node once, then leaves them alone; kubectl reads back exactly the rules', async () => {
    assert.deepEqual(await ensureNetworkPolicies(networking, NS, publicOnly), { [DEFAULT_DENY_NAME]: 'created', [egressPolicyName(publicOnly)]: 'created' });
    assert.deepEqual(await ensureNetworkPolicies(networking, NS, publicOnly), { [DEFAULT_DENY_NAME]: 'unchanged', [egressPolicyName(publicOnly)]: 'unchanged' });
    const listed = await ok(['-n', NS, 'get', 'networkpolicy', '-l', `app.kubernetes.io/managed-by=berth,berth.dev/policy=${policyLabelValue(publicOnly)}`, '-o', 'name']);
    assert.equal(listed, `networkpolicy.networking.k8s.io/${egressPolicyName(publicOnly)}\n`);
    for (const manifest of networkPolicyManifests(NS, publicOnly)) {
      const stored = await getJson(NS, manifest.metadata!.name!);
      assert.equal(stored.apiVersion, 'networking.k8s.io/v1');
      assert.equal(stored.kind, 'NetworkPolicy');
      assert.deepEqual(stored.metadata.labels, manifest.metadata!.labels);
      assert.equal(canonical(stored.spec), canonical(asStored(manifest.spec)), manifest.metadata!.name);
    }
    const egress = await getJson(NS, egressPolicyName(publicOnly));
    // What a reader of `kubectl get -o json` sees: no ingress rule, DNS first, the allowlist, then the public ranges.
    assert.equal(egress.spec.ingress, undefined);
    assert.deepEqual(egress.spec.policyTypes, ['Ingress', 'Egress']);
    assert.deepEqual(egress.spec.egress[0].ports, [{ protocol: 'UDP', port: 53 }, { protocol: 'TCP', port: 53 }]);
    assert.deepEqual(egress.spec.egress[1].to, [{ ipBlock: { cidr: '10.20.0.0/16' } }, { ipBlock: { cidr: 'fd00:1::/32' } }]);
    assert.deepEqual(egress.spec.egress[2].to.map((p: any) => p.ipBlock.cidr), ['0.0.0.0/0', '::/0']);
    assert.ok(egress.spec.egress[2].to[1].ipBlock.except.includes('fc00::/7'));
    assert.deepEqual(JSON.parse(egress.metadata.annotations['berth.dev/network-policy']), { egress: 'public-only', egress_allow: ['10.20.0.0/16', 'fd00:1::/32'] });
  });

  it('kubectl apply -f takes the same manifests as YAML under strict validation, and client-node then finds nothing to change', async () => {
    for (const policy of [none, open, publicOnly]) {
      const out = await ok(['apply', '-f', '-'], networkPolicyManifests(NS_KUBECTL, policy).map((m) => stringify(m)).join('---\n'));
      assert.match(out, new RegExp(`networkpolicy\\.networking\\.k8s\\.io/${egressPolicyName(policy)} created`));
      const outcomes = await ensureNetworkPolicies(networking, NS_KUBECTL, policy);
      assert.deepEqual(Object.values(outcomes), ['unchanged', 'unchanged'], `${policy.egress}: ${JSON.stringify(outcomes)}`);
    }
    const names = (await ok(['-n', NS_KUBECTL, 'get', 'netpol', '-o', 'jsonpath={.items[*].metadata.name}'])).split(' ').sort();
    assert.deepEqual(names, [DEFAULT_DENY_NAME, ...[none, open, publicOnly].map(egressPolicyName)].sort());
    await ok(['-n', NS_KUBECTL, 'delete', 'netpol', '--all']);
  });

  it('berth doctor: ok while the objects hold, fail naming the object once changed or deleted, and the plugin caveat always', async () => {
    const before = await checkNetworkPolicies(networking, NS, [publicOnly]);
    assert.deepEqual(before.map((f) => f.verdict), ['ok', 'ok', 'warn']);
    assert.equal(before[2]!.text, ENFORCEMENT_NOTE);
    assert.match(ENFORCEMENT_NOTE, /enforced by the cluster's network plugin/);

    // Someone opens the metadata range by hand with kubectl: doctor says so, and the next ensure puts the rules back.
    const name = egressPolicyName(publicOnly);
    const edited = await getJson(NS, name);
    edited.spec.egress[2].to[0].ipBlock.except = ['10.0.0.0/8'];
    await ok(['apply', '-f', '-'], JSON.stringify(edited));
    const changed = await checkNetworkPolicies(networking, NS, [publicOnly]);
    assert.equal(changed[1]!.verdict, 'fail');
    assert.match(changed[1]!.text, new RegExp(`NetworkPolicy "${name}" in namespace "${NS}" was changed outside Berth`));
    assert.equal((await ensureNetworkPolicies(networking, NS, publicOnly))[name], 'replaced');
    assert.ok((await getJson(NS, name)).spec.egress[2].to[0].ipBlock.except.includes('169.254.0.0/16'));

    await ok(['-n', NS, 'delete', 'netpol', DEFAULT_DENY_NAME]);
    const missing = await checkNetworkPolicies(networking, NS, [publicOnly]);
    assert.deepEqual(missing.map((f) => f.verdict), ['fail', 'ok', 'warn']);
    assert.match(missing[0]!.text, new RegExp(`NetworkPolicy "${DEFAULT_DENY_NAME}" is missing in namespace "${NS}"`));
    assert.equal((await ensureNetworkPolicies(networking, NS, publicOnly))[DEFAULT_DENY_NAME], 'created');
  });

  it('executors racing to create the same policy all succeed, and one object results', async () => {
    const outcomes = await Promise.all([1, 2, 3].map(() => ensureNetworkPolicies(networking, NS, open)));
    const egress = outcomes.map((o) => o[egressPolicyName(open)]);
    assert.equal(egress.filter((o) => o === 'created').length, 1, JSON.stringify(egress));
    const listed = await ok(['-n', NS, 'get', 'netpol', '-l', `berth.dev/policy=${policyLabelValue(open)}`, '-o', 'name']);
    assert.equal(listed.trim().split('\n').length, 1);
  });

  it('without RBAC on networkpolicies the error names the object, the namespace, the refusal and the Role to grant', async () => {
    await assert.rejects(ensureNetworkPolicies(restricted, NS, { egress: 'none', egressAllow: ['192.0.2.0/24'] }), (err: Error) => {
      assert.match(err.message, /could not create or update NetworkPolicy "berth-egress-p-[0-9a-f]{16}" in namespace "berth-sandboxes"/);
      assert.match(err.message, /User "standin-restricted" cannot create resource "networkpolicies" in API group "networking\.k8s\.io"/);
      assert.match(err.message, /deploy\/kubernetes\/overlays\/kubernetes-backend/);
      return true;
    });
  });

  it('refuses an except outside its cidr as the API server does (an IPv4-mapped range is not inside ::/0)', async () => {
    const bad = networkPolicyManifests(NS, none)[1]!;
    bad.metadata!.name = 'bad-except';
    bad.spec!.egress = [{ to: [{ ipBlock: { cidr: '::/0', except: ['::ffff:0:0/96'] } }, { ipBlock: { cidr: '10.0.0.0/8', except: ['11.0.0.0/8'] } }] }];
    const r = await k.kubectl(['apply', '-f', '-'], { input: JSON.stringify(bad) });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /spec\.egress\[0\]\.to\[0\]\.ipBlock\.except\[0\]: Invalid value: "::ffff:0:0\/96": must be a strict subset of `cidr`/);
    assert.match(r.stderr, /spec\.egress\[0\]\.to\[1\]\.ipBlock\.except\[0\]: Invalid value: "11\.0\.0\.0\/8": must be a strict subset of `cidr`/);
  });

  it('a Berth pod whose policy object is missing is closed by the default deny, and gets its network once the object exists', async () => {
    const policy: NetworkPolicy = { egress: 'public-only', egressAllow: ['198.51.100.0/24'] };
    await core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name: 'fenced', labels: { 'app.kubernetes.io/managed-by': 'berth', 'berth.dev/policy': policyLabelValue(policy), 'berth.dev/task': 'fenced' } },
        spec: {
          automountServiceAccountToken: false,
          restartPolicy: 'Never',
          terminationGracePeriodSeconds: 0,
          securityContext: { runAsUser: 1000, runAsGroup: 1000, runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
          containers: [
            {
              name: 'sandbox',
              image: SANDBOX_IMAGE,
              command: ['sleep', 'infinity'],
              securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } },
            },
          ],
        },
      },
    });
    await ok(['-n', NS, 'wait', '--for=condition=Ready', 'pod/fenced', '--timeout=60s']);
    const interfaces = async () => (await ok(['-n', NS, 'exec', 'fenced', '--', 'ls', '/sys/class/net'])).split('\n').filter(Boolean);
    assert.deepEqual(await interfaces(), ['lo'], 'only the default deny selects the pod: it must have no network');
    await ensureNetworkPolicies(networking, NS, policy);
    let seen: string[] = [];
    for (let i = 0; i < 50 && (seen = await interfaces()).length < 2; i++) await new Promise((r) => setTimeout(r, 100));
    assert.ok(seen.length > 1, `the pod's policy object exists, yet the pod has only ${seen.join(',')}`);
    await ok(['-n', NS, 'delete', 'pod', 'fenced', '--grace-period=0']);
  });
});
