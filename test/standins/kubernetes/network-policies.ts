/**
 * Kubernetes stand-in (a test double): NetworkPolicies, validated and
 * defaulted as the API server does and stored. What it enforces on the
 * Docker engine is only full isolation: a running pod that policies select
 * for both Ingress and Egress with no rule allowing either is disconnected
 * from the pod network (no traffic in or out), and connected again when no
 * such policy selects it. Every other rule (ports, peers, ipBlocks, one
 * direction only) is stored and not enforced: a test of those rules can only
 * check the objects, not the traffic.
 */
import type Dockerode from 'dockerode';
import { invalid, type FieldError } from './errors.js';
import { goContains, goParseCidr } from './go-cidr.js';
import { validateMeta } from './pod-spec.js';
import { deletedStatus, type ResourceHooks, type ResourceInfo } from './resource.js';
import { labelSelectorMatcher } from './selectors.js';
import type { KubeObject, ObjectStore } from './store.js';

/* eslint-disable @typescript-eslint/no-explicit-any -- policy JSON */
type Policy = KubeObject & { spec: Record<string, any> };

export const NETWORK_POLICIES: ResourceInfo = {
  name: 'networkpolicies',
  singularName: 'networkpolicy',
  kind: 'NetworkPolicy',
  group: 'networking.k8s.io',
  version: 'v1',
  namespaced: true,
  verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'],
  shortNames: ['netpol'],
  model: 'V1NetworkPolicy',
};

const PROTOCOLS = ['TCP', 'UDP', 'SCTP'];

const CIDR_DETAIL = 'must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)';

/** ValidateIPBlock: a CIDR, and each `except` a CIDR strictly inside it (as Go's IPNet.Contains reads it). */
function validateIpBlock(block: any, at: string, errors: FieldError[]): void {
  if (block.cidr === undefined || block.cidr === '') {
    errors.push({ field: `${at}.cidr`, type: 'FieldValueRequired', detail: '' });
    return;
  }
  const cidr = goParseCidr(block.cidr);
  if (!cidr) {
    errors.push({ field: `${at}.cidr`, type: 'FieldValueInvalid', value: block.cidr, detail: CIDR_DETAIL });
    return;
  }
  for (const [j, e] of ((block.except ?? []) as unknown[]).entries()) {
    const except = goParseCidr(e);
    if (!except) errors.push({ field: `${at}.except[${j}]`, type: 'FieldValueInvalid', value: e, detail: CIDR_DETAIL });
    else if (!goContains(cidr, except.ip) || cidr.prefix >= except.prefix) {
      errors.push({ field: `${at}.except[${j}]`, type: 'FieldValueInvalid', value: e, detail: 'must be a strict subset of `cidr`' });
    }
  }
}

function validatePeers(peers: any[] | undefined, field: string, errors: FieldError[]): void {
  for (const [i, peer] of (peers ?? []).entries()) {
    const at = `${field}[${i}]`;
    const kinds = ['podSelector', 'namespaceSelector', 'ipBlock'].filter((k) => peer[k] !== undefined);
    if (kinds.length === 0) errors.push({ field: at, type: 'FieldValueRequired', detail: 'must specify a peer' });
    if (peer.ipBlock && kinds.length > 1) errors.push({ field: at, type: 'FieldValueForbidden', detail: 'may not specify both ipBlock and another peer' });
    if (peer.ipBlock) validateIpBlock(peer.ipBlock, `${at}.ipBlock`, errors);
  }
}

/**
 * What the API server's JSON leaves out: every list of a NetworkPolicySpec
 * is `omitempty`, so an empty one (`ingress: []`) is not stored as given
 * but read back absent, as are empty `matchLabels` maps. Selectors
 * themselves stay (`podSelector: {}`, `namespaceSelector: {}` select all).
 */
function omitEmpty(value: any): any {
  if (Array.isArray(value)) return value.map(omitEmpty);
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    if (Array.isArray(v) && v.length === 0) continue;
    if (k === 'matchLabels' && v !== null && typeof v === 'object' && Object.keys(v).length === 0) continue;
    out[k] = omitEmpty(v);
  }
  return out;
}

function validatePorts(ports: any[] | undefined, field: string, errors: FieldError[]): void {
  for (const [i, p] of (ports ?? []).entries()) {
    if (p.protocol !== undefined && !PROTOCOLS.includes(p.protocol)) errors.push({ field: `${field}[${i}].protocol`, type: 'FieldValueNotSupported', value: p.protocol, detail: 'supported values: "SCTP", "TCP", "UDP"' });
    if (typeof p.port === 'number' && (p.port < 1 || p.port > 65535)) errors.push({ field: `${field}[${i}].port`, type: 'FieldValueInvalid', value: p.port, detail: 'must be between 1 and 65535, inclusive' });
  }
}

export class NetworkPolicyController implements ResourceHooks {
  readonly info = NETWORK_POLICIES;
  readonly #store: ObjectStore;
  readonly #docker: Dockerode;
  readonly #network: string;
  readonly #containerOf: (podUid: string) => string | undefined;
  /** Container id -> whether it is disconnected now. */
  readonly #isolated = new Map<string, boolean>();

  constructor(store: ObjectStore, docker: Dockerode, network: string, containerOf: (podUid: string) => string | undefined) {
    this.#store = store;
    this.#docker = docker;
    this.#network = network;
    this.#containerOf = containerOf;
  }

  admit(o: KubeObject): void {
    const p = o as Policy;
    const errors: FieldError[] = [];
    validateMeta(p.metadata, errors);
    const spec = (p.spec ??= {});
    if (spec.podSelector === undefined) spec.podSelector = {};
    for (const [i, t] of ((spec.policyTypes ?? []) as string[]).entries()) {
      if (t !== 'Ingress' && t !== 'Egress') errors.push({ field: `spec.policyTypes[${i}]`, type: 'FieldValueNotSupported', value: t, detail: 'supported values: "Egress", "Ingress"' });
    }
    for (const [i, r] of ((spec.ingress ?? []) as any[]).entries()) {
      validatePorts(r.ports, `spec.ingress[${i}].ports`, errors);
      validatePeers(r.from, `spec.ingress[${i}].from`, errors);
    }
    for (const [i, r] of ((spec.egress ?? []) as any[]).entries()) {
      validatePorts(r.ports, `spec.egress[${i}].ports`, errors);
      validatePeers(r.to, `spec.egress[${i}].to`, errors);
    }
    if (errors.length > 0) throw invalid('NetworkPolicy', 'networking.k8s.io', p.metadata.name, errors);
    // SetDefaults_NetworkPolicySpec: Ingress always, Egress when egress rules are given.
    if (spec.policyTypes === undefined || spec.policyTypes.length === 0) spec.policyTypes = spec.egress?.length ? ['Ingress', 'Egress'] : ['Ingress'];
    p.spec = omitEmpty(spec);
  }

  created(): void {
    void this.enforce();
  }

  update(_old: KubeObject, updated: KubeObject): KubeObject {
    this.admit(updated);
    queueMicrotask(() => void this.enforce());
    return updated;
  }

  async delete(o: KubeObject): Promise<unknown> {
    this.#store.remove('networkpolicies', o.metadata.namespace, o.metadata.name);
    await this.enforce();
    return deletedStatus(NETWORK_POLICIES, o);
  }

  /** A pod's container was started, connected or not as {@link fullyIsolated} said. */
  started(containerId: string, isolated: boolean): void {
    this.#isolated.set(containerId, isolated);
  }

  /** Whether the policies of the pod's namespace leave it no traffic at all. */
  fullyIsolated(pod: KubeObject): boolean {
    const labels = pod.metadata.labels ?? {};
    const selecting = (this.#store.list('networkpolicies', pod.metadata.namespace) as Policy[]).filter((p) => labelSelectorMatcher(p.spec.podSelector)(labels));
    const types = (t: string) => selecting.filter((p) => (p.spec.policyTypes as string[]).includes(t));
    const ingress = types('Ingress');
    const egress = types('Egress');
    return ingress.length > 0 && egress.length > 0 && ingress.every((p) => !p.spec.ingress?.length) && egress.every((p) => !p.spec.egress?.length);
  }

  /** Connects or disconnects each running pod as the policies now say. */
  async enforce(): Promise<void> {
    for (const pod of this.#store.list('pods')) {
      const uid = pod.metadata.uid!;
      const containerId = this.#containerOf(uid);
      if (!containerId) continue;
      const isolate = this.fullyIsolated(pod);
      if (this.#isolated.get(containerId) === isolate || !this.#isolated.has(containerId)) continue;
      this.#isolated.set(containerId, isolate);
      const network = this.#docker.getNetwork(this.#network);
      if (isolate) await network.disconnect({ Container: containerId, Force: true }).catch(() => undefined);
      else await network.connect({ Container: containerId }).catch(() => undefined);
    }
  }
}
