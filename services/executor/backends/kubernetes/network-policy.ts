/**
 * The tenant network policy (backends/shared/network-policy.ts) as
 * Kubernetes NetworkPolicy objects in the sandbox namespace. The builders
 * are pure, so every rule is pinned by unit tests; the two functions at the
 * end apply and check them through client-node.
 *
 * Every task pod carries `app.kubernetes.io/managed-by: berth` and
 * `berth.dev/policy: <policyLabelValue(policy)>`. The objects:
 *
 *   berth-default-deny        selects every Berth pod: Ingress and Egress,
 *                             no rule. A pod whose policy object is missing
 *                             is closed, not open.
 *   berth-egress-<value>      selects the pods of one policy: Ingress with no
 *                             rule (nothing reaches a task pod, other task
 *                             pods included), Egress:
 *     DNS                     kube-dns pods in kube-system, 53 UDP and TCP
 *     egress_allow            each range, all ports
 *     public-only             0.0.0.0/0 and ::/0 except NON_PUBLIC (private,
 *                             loopback, link-local and metadata, CGNAT, ULA,
 *                             multicast, reserved)
 *     open                    0.0.0.0/0 and ::/0 except link-local and the
 *                             cloud metadata addresses outside it
 *     none                    nothing more
 *
 * NetworkPolicies only add what is allowed: the union of both objects is
 * the second one's rules. One object per policy (not per tenant or task):
 * tenants with equal policies share it, and it never changes while pods
 * come and go. Enforcement is the cluster network plugin's; a plugin
 * without NetworkPolicy support stores the objects and enforces nothing
 * (`berth doctor` says so).
 */
import { createHash } from 'node:crypto';
import type { NetworkingV1Api, V1NetworkPolicy, V1NetworkPolicyEgressRule, V1NetworkPolicyPeer } from '@kubernetes/client-node';
import { cidrContains, parseCidr, type IpFamily } from '../../../common/cidr.js';
import type { DiagnosticFinding } from '../../backend.js';
import { canonicalCidrs, LINK_LOCAL, NON_PUBLIC, ofFamily, type NetworkPolicy } from '../shared/network-policy.js';

/** Every object and pod Berth makes in the sandbox namespace carries this label with value {@link MANAGED_BY}. */
export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY = 'berth';
/** A task pod's policy: {@link policyLabelValue}. */
export const POLICY_LABEL = 'berth.dev/policy';
/** On each egress object: the policy it enforces, as JSON, for people reading `kubectl get -o yaml`. */
export const POLICY_ANNOTATION = 'berth.dev/network-policy';
export const DEFAULT_DENY_NAME = 'berth-default-deny';

/**
 * Cloud metadata endpoints outside link-local, closed under `open` as
 * link-local is (public-only closes them with their ranges: fc00::/7):
 * AWS's IPv6 instance metadata.
 */
export const METADATA_OUTSIDE_LINK_LOCAL: Readonly<Record<IpFamily, readonly string[]>> = { 4: [], 6: ['fd00:ec2::254/128'] };

/**
 * The API server takes an `except` only when it lies strictly inside the
 * block's `cidr`, and reads an IPv4-mapped IPv6 range (`::ffff:0:0/96`) as
 * IPv4, outside `::/0`: so those are left out of the IPv6 excepts. A
 * pod's packet to `::ffff:a.b.c.d` leaves as IPv4 and meets the IPv4 rules.
 */
const V4_MAPPED = parseCidr('::ffff:0:0/96')!;

const ANY: Readonly<Record<IpFamily, string>> = { 4: '0.0.0.0/0', 6: '::/0' };

/** The policy's identity: egress mode and normalised allowlist. */
function canonicalPolicy(policy: NetworkPolicy): string {
  return JSON.stringify([policy.egress, canonicalCidrs(policy.egressAllow)]);
}

/**
 * The `berth.dev/policy` label value of a policy: `p-` and 16 hex digits of
 * a hash of its canonical form, so equal policies (allowlists in any order
 * or spelling) share a value and a label never exceeds 63 characters.
 */
export function policyLabelValue(policy: NetworkPolicy): string {
  return `p-${createHash('sha256').update(canonicalPolicy(policy)).digest('hex').slice(0, 16)}`;
}

/** Name of the NetworkPolicy that holds a policy's egress rules. */
export function egressPolicyName(policy: NetworkPolicy): string {
  return `berth-egress-${policyLabelValue(policy)}`;
}

/** DNS: the cluster's resolver pods (CoreDNS keeps the kube-dns label), port 53 over UDP and TCP. */
export const DNS_RULE: V1NetworkPolicyEgressRule = {
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

/** Every address of both families but `closed` (each family's except list, strict sub-ranges only). */
function everywhereBut(closed: Readonly<Record<IpFamily, readonly string[]>>): V1NetworkPolicyPeer[] {
  return ([4, 6] as const).map((family) => ({
    ipBlock: {
      cidr: ANY[family],
      except: ofFamily(closed[family], family).filter((c) => family === 4 || !cidrContains(V4_MAPPED, parseCidr(c)!)),
    },
  }));
}

/** The egress rules of a policy, DNS first. */
export function egressRules(policy: NetworkPolicy): V1NetworkPolicyEgressRule[] {
  const rules: V1NetworkPolicyEgressRule[] = [DNS_RULE];
  const allowed = canonicalCidrs(policy.egressAllow).filter((c) => parseCidr(c) !== undefined);
  if (allowed.length > 0) rules.push({ to: allowed.map((cidr) => ({ ipBlock: { cidr } })) });
  if (policy.egress === 'public-only') rules.push({ to: everywhereBut(NON_PUBLIC) });
  if (policy.egress === 'open') {
    rules.push({ to: everywhereBut({ 4: [...LINK_LOCAL[4], ...METADATA_OUTSIDE_LINK_LOCAL[4]], 6: [...LINK_LOCAL[6], ...METADATA_OUTSIDE_LINK_LOCAL[6]] }) });
  }
  return rules;
}

function managedLabels(extra: Record<string, string> = {}): Record<string, string> {
  return { [MANAGED_BY_LABEL]: MANAGED_BY, ...extra };
}

/**
 * The NetworkPolicy objects that enforce `policy` on the task pods labelled
 * with its {@link policyLabelValue} in `namespace`: the namespace's default
 * deny for Berth's pods, and the policy's own egress object.
 */
export function networkPolicyManifests(namespace: string, policy: NetworkPolicy): V1NetworkPolicy[] {
  const value = policyLabelValue(policy);
  return [
    {
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { name: DEFAULT_DENY_NAME, namespace, labels: managedLabels() },
      spec: {
        podSelector: { matchLabels: managedLabels() },
        policyTypes: ['Ingress', 'Egress'],
        ingress: [],
        egress: [],
      },
    },
    {
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: {
        name: egressPolicyName(policy),
        namespace,
        labels: managedLabels({ [POLICY_LABEL]: value }),
        annotations: { [POLICY_ANNOTATION]: JSON.stringify({ egress: policy.egress, egress_allow: canonicalCidrs(policy.egressAllow) }) },
      },
      spec: {
        podSelector: { matchLabels: managedLabels({ [POLICY_LABEL]: value }) },
        policyTypes: ['Ingress', 'Egress'],
        ingress: [],
        egress: egressRules(policy),
      },
    },
  ];
}

/** JSON with object keys sorted and empty lists dropped: the API server omits `ingress: []`, so a read-back compares equal. */
function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (Array.isArray(v)) return v.length === 0 ? undefined : v;
    if (v !== null && typeof v === 'object' && !(v instanceof Date)) {
      return Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    }
    return v;
  });
}

/** Whether a stored object enforces what `wanted` says (spec, labels and annotation). */
function sameRules(stored: V1NetworkPolicy, wanted: V1NetworkPolicy): boolean {
  const ours = (labels: Record<string, string> | undefined, keys: readonly string[]) =>
    Object.fromEntries(keys.map((k) => [k, labels?.[k]]));
  const labelKeys = Object.keys(wanted.metadata?.labels ?? {});
  const annotationKeys = Object.keys(wanted.metadata?.annotations ?? {});
  return (
    canonicalJson(stored.spec) === canonicalJson(wanted.spec) &&
    canonicalJson(ours(stored.metadata?.labels, labelKeys)) === canonicalJson(ours(wanted.metadata?.labels, labelKeys)) &&
    canonicalJson(ours(stored.metadata?.annotations, annotationKeys)) === canonicalJson(ours(wanted.metadata?.annotations, annotationKeys))
  );
}

/** The HTTP status of a failed client-node call (its ApiException), or undefined for any other error. */
function statusCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

/** The API server's message of a failed call (its Status object), else the error's own. */
export function apiErrorMessage(err: unknown): string {
  const body = (err as { body?: unknown } | null)?.body;
  try {
    const status = (typeof body === 'string' ? JSON.parse(body) : body) as { message?: unknown } | undefined;
    if (typeof status?.message === 'string') return status.message;
  } catch {
    // not JSON: the error's own message below
  }
  return err instanceof Error ? err.message : String(err);
}

const RBAC_HINT =
  'the executor needs get, create and update on networkpolicies in that namespace ' +
  '(the Role of deploy/kubernetes/overlays/kubernetes-backend)';

/** How many times a create or replace that lost a race with another executor is tried again. */
const CONFLICT_ATTEMPTS = 5;

/** What {@link ensureNetworkPolicies} did to each object. */
export type EnsureOutcome = 'created' | 'replaced' | 'unchanged';

async function ensureOne(api: NetworkingV1Api, namespace: string, wanted: V1NetworkPolicy): Promise<EnsureOutcome> {
  const name = wanted.metadata!.name!;
  for (let attempt = 1; ; attempt++) {
    try {
      let stored: V1NetworkPolicy | undefined;
      try {
        stored = await api.readNamespacedNetworkPolicy({ name, namespace });
      } catch (err) {
        if (statusCode(err) !== 404) throw err;
      }
      if (stored === undefined) {
        await api.createNamespacedNetworkPolicy({ namespace, body: wanted, fieldValidation: 'Strict' });
        return 'created';
      }
      if (sameRules(stored, wanted)) return 'unchanged';
      const body: V1NetworkPolicy = {
        ...wanted,
        metadata: {
          ...wanted.metadata,
          labels: { ...stored.metadata?.labels, ...wanted.metadata?.labels },
          annotations: { ...stored.metadata?.annotations, ...wanted.metadata?.annotations },
          resourceVersion: stored.metadata?.resourceVersion,
        },
      };
      await api.replaceNamespacedNetworkPolicy({ name, namespace, body, fieldValidation: 'Strict' });
      return 'replaced';
    } catch (err) {
      // 409: another executor created or changed it between our read and write; read again.
      if (statusCode(err) === 409 && attempt < CONFLICT_ATTEMPTS) continue;
      const hint = statusCode(err) === 403 ? `; ${RBAC_HINT}` : '';
      throw new Error(`could not create or update NetworkPolicy "${name}" in namespace "${namespace}": ${apiErrorMessage(err)}${hint}`, { cause: err });
    }
  }
}

/**
 * Creates the objects of {@link networkPolicyManifests}, or puts back what
 * someone changed; leaves equal ones alone. Idempotent and safe to race:
 * call it before each task pod of the policy is created.
 */
export async function ensureNetworkPolicies(api: NetworkingV1Api, namespace: string, policy: NetworkPolicy): Promise<Record<string, EnsureOutcome>> {
  const outcomes: Record<string, EnsureOutcome> = {};
  for (const manifest of networkPolicyManifests(namespace, policy)) {
    outcomes[manifest.metadata!.name!] = await ensureOne(api, namespace, manifest);
  }
  return outcomes;
}

/** What `berth doctor` says about enforcement, which no API call can check. */
export const ENFORCEMENT_NOTE =
  "NetworkPolicies are enforced by the cluster's network plugin, not by the API server: with a plugin that " +
  'does not enforce them (flannel alone, some managed defaults) task pods have open networking although the ' +
  "objects exist. Check that your cluster's plugin enforces NetworkPolicy (Calico, Cilium, Antrea, ...)";

/** What a missing object means for the task pods, and what puts it back. */
function missingConsequence(name: string): string {
  const back = `the executor creates it again before its next task pod (${RBAC_HINT})`;
  return name === DEFAULT_DENY_NAME
    ? `a Berth pod whose policy object is missing too has open networking until ${back}`
    : `the task pods of this policy get no network (the default deny holds) until ${back}`;
}

/**
 * `berth doctor`'s findings for the policies tasks use in `namespace`: each
 * object exists and holds the rules Berth wrote (`fail` naming the object
 * and what to do otherwise), then the enforcement note as a `warn`. A
 * failed read is a `warn` naming the API server's answer.
 */
export async function checkNetworkPolicies(api: NetworkingV1Api, namespace: string, policies: readonly NetworkPolicy[]): Promise<DiagnosticFinding[]> {
  const wanted = new Map<string, V1NetworkPolicy>();
  for (const policy of policies) for (const m of networkPolicyManifests(namespace, policy)) wanted.set(m.metadata!.name!, m);
  const findings: DiagnosticFinding[] = [];
  for (const [name, manifest] of wanted) {
    let stored: V1NetworkPolicy;
    try {
      stored = await api.readNamespacedNetworkPolicy({ name, namespace });
    } catch (err) {
      findings.push(
        statusCode(err) === 404
          ? { verdict: 'fail', text: `NetworkPolicy "${name}" is missing in namespace "${namespace}": ${missingConsequence(name)}` }
          : { verdict: 'warn', text: `could not read NetworkPolicy "${name}" in namespace "${namespace}": ${apiErrorMessage(err)}` },
      );
      continue;
    }
    findings.push(
      sameRules(stored, manifest)
        ? { verdict: 'ok', text: `NetworkPolicy "${name}" in namespace "${namespace}" holds Berth's rules` }
        : {
            verdict: 'fail',
            text: `NetworkPolicy "${name}" in namespace "${namespace}" was changed outside Berth: the executor puts its rules back at the next task start; \`kubectl -n ${namespace} delete networkpolicy ${name}\` to have them recreated`,
          },
    );
  }
  findings.push({ verdict: 'warn', text: ENFORCEMENT_NOTE });
  return findings;
}
