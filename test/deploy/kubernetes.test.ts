/**
 * The Kubernetes manifests (deploy/kubernetes): every overlay rendered with
 * `kubectl kustomize`, every object validated against the Kubernetes OpenAPI
 * schemas (kubernetes-models), the pod-security policy asserted on every pod,
 * and the pieces checked against each other and against Berth's own config
 * parser. No cluster runs here: nothing is applied.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { Namespace, ServiceAccount, ConfigMap, Service, ResourceQuota, LimitRange } from 'kubernetes-models/v1';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { Role, RoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import { hashApiKey } from '../../services/common/config.js';
import { applyEnvOverrides } from '../../services/common/config-env.js';
import { parseConfig } from '../../services/common/config-load.js';
import { kubernetesOptionsFromConfig } from '../../services/executor/backends/kubernetes/create-kubernetes-backend.js';
import { networkPolicyManifests, policyLabelValue } from '../../services/executor/backends/kubernetes/network-policy.js';
import { buildClaim, buildPod, claimNames, fixedIdentity } from '../../services/executor/backends/kubernetes/pod-spec.js';
import { podUidRange } from '../../services/executor/backends/kubernetes/pod-uids.js';
import { candidateUid, type UidRange } from '../../services/executor/backends/shared/task-uid-range.js';
import { restrictedViolations } from '../support/pod-security.js';
import { toolsRequired } from '../support/require-tools.js';

const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const KUBE_DIR = join(REPO_ROOT, 'deploy', 'kubernetes');

/** Why the manifests cannot be rendered here; under make test or CI a missing kubectl fails instead of skipping. */
function kubectlUnavailableReason(): string | undefined {
  const r = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' });
  if (r.status === 0 && /Kustomize Version/.test(r.stdout)) return undefined;
  const reason = `kubectl with Kustomize is needed to render deploy/kubernetes (${r.error?.message ?? (r.stderr.trim() || 'no Kustomize version')}): install kubectl`;
  if (toolsRequired()) throw new Error(reason);
  return reason;
}

// Anything without a schema here fails the schema test, so a new kind cannot slip through unchecked.
const MODELS: Record<string, { new (data: never): { validate(): void } }> = {
  'v1/Namespace': Namespace,
  'v1/ServiceAccount': ServiceAccount,
  'v1/ConfigMap': ConfigMap,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'apps/v1/StatefulSet': StatefulSet,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
  'v1/ResourceQuota': ResourceQuota,
  'v1/LimitRange': LimitRange,
  'rbac.authorization.k8s.io/v1/Role': Role,
  'rbac.authorization.k8s.io/v1/RoleBinding': RoleBinding,
};

/* eslint-disable @typescript-eslint/no-explicit-any -- rendered manifests are untyped YAML, walked by hand */
type Obj = Record<string, any>;

interface Rendered {
  readonly name: string;
  readonly objects: Obj[];
}

function render(dir: string): Rendered {
  const r = spawnSync('kubectl', ['kustomize', join(KUBE_DIR, dir)], { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 });
  assert.equal(r.status, 0, `kubectl kustomize ${dir} failed:\n${r.stderr}`);
  const objects = parseAllDocuments(r.stdout).map((d) => {
    assert.deepEqual(d.errors, [], `${dir}: rendered YAML does not parse`);
    return d.toJS() as Obj;
  });
  assert.ok(objects.length > 0, `${dir} rendered nothing`);
  return { name: dir, objects };
}

const kindOf = (o: Obj) => `${o.apiVersion}/${o.kind}`;
const find = (r: Rendered, kind: string, name?: string) => r.objects.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
function one(r: Rendered, kind: string, name: string): Obj {
  const found = find(r, kind, name);
  assert.equal(found.length, 1, `${r.name}: expected one ${kind} ${name}, found ${found.length}`);
  return found[0]!;
}
const workloads = (r: Rendered) => r.objects.filter((o) => o.kind === 'Deployment' || o.kind === 'StatefulSet');
const containersOf = (w: Obj): Obj[] => [...(w.spec.template.spec.initContainers ?? []), ...w.spec.template.spec.containers];
const matches = (selector: Obj, labels: Obj) => Object.entries(selector).every(([k, v]) => labels?.[k] === v);

/** The overlay whose executors run the kubernetes backend, and the namespace of its task pods. */
const KUBERNETES_BACKEND = 'overlays/kubernetes-backend';
const SANDBOX_NS = 'berth-sandboxes';
/** What the kubernetes backend calls, and so all its Role may hold: resource (with API group) -> verbs. */
const BACKEND_VERBS: Record<string, string[]> = {
  '/pods': ['create', 'delete', 'get', 'list', 'patch', 'watch'],
  '/pods/exec': ['create', 'get'],
  '/persistentvolumeclaims': ['create', 'delete', 'get', 'list'],
  'networking.k8s.io/networkpolicies': ['create', 'get', 'list', 'patch', 'update'],
};
/** Objects of the kubernetes-backend overlay that belong in the sandbox namespace, not Berth's. */
const SANDBOX_KINDS = ['Role', 'RoleBinding', 'ResourceQuota', 'LimitRange'];

/** The documented exception: the rootless Docker engine sidecar of the docker-rootless option. */
const isEngineSidecar = (r: Rendered, c: Obj) => r.name === 'overlays/docker-rootless' && c.name === 'docker';

/** `ENV` settings of the Berth image (deploy/Dockerfile, where the image is defined): they override config.yaml too. */
function imageEnv(): Record<string, string> {
  let dockerfile: string;
  try {
    dockerfile = readFileSync(join(REPO_ROOT, 'deploy', 'Dockerfile'), 'utf8');
  } catch {
    return {};
  }
  const env: Record<string, string> = {};
  for (const m of dockerfile.replace(/\\\n/g, ' ').matchAll(/^ENV\s+(.+)$/gm)) {
    for (const pair of m[1]!.matchAll(/(\w+)=(\S+)/g)) env[pair[1]!] = pair[2]!;
  }
  return env;
}

/**
 * The Berth config a pod's first container would load: the ConfigMap's config.yaml, then the image's ENV,
 * the container's own variables, and stand-ins for Secret values shaped as docs/deploying.md tells users to make them.
 */
function configOf(r: Rendered, w: Obj): ReturnType<typeof parseConfig> {
  const volume = (w.spec.template.spec.volumes as Obj[]).find((v) => v.configMap);
  assert.ok(volume, `${r.name} ${w.metadata.name}: no ConfigMap volume`);
  const cm = one(r, 'ConfigMap', volume.configMap.name);
  const raw = parseYaml(cm.data['config.yaml']) as Obj;
  const env: Record<string, string> = { ...imageEnv() };
  for (const e of (w.spec.template.spec.containers[0].env ?? []) as Obj[]) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.secretKeyRef) env[e.name] = e.name === 'BERTH_TENANTS' ? '[]' : 'stand-in-secret';
  }
  return parseConfig(applyEnvOverrides(raw, env), `${r.name} ConfigMap ${cm.metadata.name} config.yaml`);
}

const rawConfigOf = (r: Rendered): Obj => parseYaml(find(r, 'ConfigMap')[0]!.data['config.yaml']) as Obj;

/**
 * The field names each schema knows, read from kubernetes-models' compiled validators (every property the
 * schema declares is read as `data.NAME` there). kubernetes-models ignores unknown fields, so without this a
 * misspelt field (`readinesProbe`) would validate and then do nothing on a cluster.
 */
const require = createRequire(import.meta.url);
const knownFieldCache = new Map<string, Set<string>>();
function knownFields(schema: string): Set<string> {
  let known = knownFieldCache.get(schema);
  if (!known) {
    const file = schema.startsWith('IoK8sApimachinery')
      ? require.resolve(`@kubernetes-models/apimachinery/_schemas/${schema}`)
      : join(dirname(require.resolve('kubernetes-models')), '_schemas', `${schema}.js`);
    known = new Set([...readFileSync(file, 'utf8').matchAll(/\bdata\.([A-Za-z_$][\w$]*)/g)].map((m) => m[1]!));
    knownFieldCache.set(schema, known);
  }
  return known;
}

const META = 'IoK8sApimachineryPkgApisMetaV1ObjectMeta';
/** Schema of each object Berth ships, and of the nested objects whose fields are checked too. */
const FIELD_TREE: Record<string, Record<string, string>> = {
  IoK8sApiCoreV1Namespace: { metadata: META },
  IoK8sApiCoreV1ServiceAccount: { metadata: META },
  IoK8sApiCoreV1ConfigMap: { metadata: META },
  IoK8sApiCoreV1Service: { metadata: META, spec: 'IoK8sApiCoreV1ServiceSpec' },
  IoK8sApiCoreV1ServiceSpec: { ports: 'IoK8sApiCoreV1ServicePort' },
  IoK8sApiCoreV1ServicePort: {},
  IoK8sApiAppsV1Deployment: { metadata: META, spec: 'IoK8sApiAppsV1DeploymentSpec' },
  IoK8sApiAppsV1DeploymentSpec: { template: 'IoK8sApiCoreV1PodTemplateSpec' },
  IoK8sApiAppsV1StatefulSet: { metadata: META, spec: 'IoK8sApiAppsV1StatefulSetSpec' },
  IoK8sApiAppsV1StatefulSetSpec: { template: 'IoK8sApiCoreV1PodTemplateSpec', volumeClaimTemplates: 'IoK8sApiCoreV1PersistentVolumeClaim' },
  IoK8sApiCoreV1PersistentVolumeClaim: { metadata: META },
  IoK8sApiCoreV1PodTemplateSpec: { metadata: META, spec: 'IoK8sApiCoreV1PodSpec' },
  IoK8sApiCoreV1PodSpec: {
    containers: 'IoK8sApiCoreV1Container',
    initContainers: 'IoK8sApiCoreV1Container',
    securityContext: 'IoK8sApiCoreV1PodSecurityContext',
    volumes: 'IoK8sApiCoreV1Volume',
  },
  IoK8sApiCoreV1PodSecurityContext: { seccompProfile: 'IoK8sApiCoreV1SeccompProfile' },
  IoK8sApiCoreV1Container: {
    securityContext: 'IoK8sApiCoreV1SecurityContext',
    readinessProbe: 'IoK8sApiCoreV1Probe',
    livenessProbe: 'IoK8sApiCoreV1Probe',
    startupProbe: 'IoK8sApiCoreV1Probe',
    resources: 'IoK8sApiCoreV1ResourceRequirements',
    ports: 'IoK8sApiCoreV1ContainerPort',
    volumeMounts: 'IoK8sApiCoreV1VolumeMount',
    env: 'IoK8sApiCoreV1EnvVar',
  },
  IoK8sApiCoreV1SecurityContext: { capabilities: 'IoK8sApiCoreV1Capabilities', seccompProfile: 'IoK8sApiCoreV1SeccompProfile' },
  IoK8sApiCoreV1Capabilities: {},
  IoK8sApiCoreV1SeccompProfile: {},
  IoK8sApiCoreV1Probe: { grpc: 'IoK8sApiCoreV1GRPCAction', tcpSocket: 'IoK8sApiCoreV1TCPSocketAction', exec: 'IoK8sApiCoreV1ExecAction' },
  IoK8sApiCoreV1GRPCAction: {},
  IoK8sApiCoreV1TCPSocketAction: {},
  IoK8sApiCoreV1ExecAction: {},
  IoK8sApiCoreV1ResourceRequirements: {},
  IoK8sApiCoreV1ContainerPort: {},
  IoK8sApiCoreV1VolumeMount: {},
  IoK8sApiCoreV1EnvVar: { valueFrom: 'IoK8sApiCoreV1EnvVarSource' },
  IoK8sApiCoreV1EnvVarSource: { secretKeyRef: 'IoK8sApiCoreV1SecretKeySelector' },
  IoK8sApiCoreV1SecretKeySelector: {},
  IoK8sApiCoreV1Volume: {
    emptyDir: 'IoK8sApiCoreV1EmptyDirVolumeSource',
    configMap: 'IoK8sApiCoreV1ConfigMapVolumeSource',
    secret: 'IoK8sApiCoreV1SecretVolumeSource',
  },
  IoK8sApiCoreV1EmptyDirVolumeSource: {},
  IoK8sApiCoreV1ConfigMapVolumeSource: {},
  IoK8sApiCoreV1SecretVolumeSource: {},
  IoK8sApiPolicyV1PodDisruptionBudget: { metadata: META, spec: 'IoK8sApiPolicyV1PodDisruptionBudgetSpec' },
  IoK8sApiPolicyV1PodDisruptionBudgetSpec: {},
  IoK8sApiAutoscalingV2HorizontalPodAutoscaler: { metadata: META, spec: 'IoK8sApiAutoscalingV2HorizontalPodAutoscalerSpec' },
  IoK8sApiAutoscalingV2HorizontalPodAutoscalerSpec: {},
  IoK8sApiNetworkingV1NetworkPolicy: { metadata: META, spec: 'IoK8sApiNetworkingV1NetworkPolicySpec' },
  IoK8sApiNetworkingV1NetworkPolicySpec: { ingress: 'IoK8sApiNetworkingV1NetworkPolicyIngressRule', egress: 'IoK8sApiNetworkingV1NetworkPolicyEgressRule' },
  IoK8sApiNetworkingV1NetworkPolicyIngressRule: { from: 'IoK8sApiNetworkingV1NetworkPolicyPeer', ports: 'IoK8sApiNetworkingV1NetworkPolicyPort' },
  IoK8sApiNetworkingV1NetworkPolicyEgressRule: { to: 'IoK8sApiNetworkingV1NetworkPolicyPeer', ports: 'IoK8sApiNetworkingV1NetworkPolicyPort' },
  IoK8sApiNetworkingV1NetworkPolicyPeer: { ipBlock: 'IoK8sApiNetworkingV1IPBlock' },
  IoK8sApiNetworkingV1NetworkPolicyPort: {},
  IoK8sApiNetworkingV1IPBlock: {},
  IoK8sApiCoreV1ResourceQuota: { metadata: META, spec: 'IoK8sApiCoreV1ResourceQuotaSpec' },
  IoK8sApiCoreV1ResourceQuotaSpec: {},
  IoK8sApiCoreV1LimitRange: { metadata: META, spec: 'IoK8sApiCoreV1LimitRangeSpec' },
  IoK8sApiCoreV1LimitRangeSpec: { limits: 'IoK8sApiCoreV1LimitRangeItem' },
  IoK8sApiCoreV1LimitRangeItem: {},
  IoK8sApiRbacV1Role: { metadata: META, rules: 'IoK8sApiRbacV1PolicyRule' },
  IoK8sApiRbacV1PolicyRule: {},
  IoK8sApiRbacV1RoleBinding: { metadata: META, roleRef: 'IoK8sApiRbacV1RoleRef', subjects: 'IoK8sApiRbacV1Subject' },
  IoK8sApiRbacV1RoleRef: {},
  IoK8sApiRbacV1Subject: {},
  [META]: {},
};

const ROOT_SCHEMA: Record<string, string> = {
  'v1/Namespace': 'IoK8sApiCoreV1Namespace',
  'v1/ServiceAccount': 'IoK8sApiCoreV1ServiceAccount',
  'v1/ConfigMap': 'IoK8sApiCoreV1ConfigMap',
  'v1/Service': 'IoK8sApiCoreV1Service',
  'apps/v1/Deployment': 'IoK8sApiAppsV1Deployment',
  'apps/v1/StatefulSet': 'IoK8sApiAppsV1StatefulSet',
  'policy/v1/PodDisruptionBudget': 'IoK8sApiPolicyV1PodDisruptionBudget',
  'autoscaling/v2/HorizontalPodAutoscaler': 'IoK8sApiAutoscalingV2HorizontalPodAutoscaler',
  'networking.k8s.io/v1/NetworkPolicy': 'IoK8sApiNetworkingV1NetworkPolicy',
  'v1/ResourceQuota': 'IoK8sApiCoreV1ResourceQuota',
  'v1/LimitRange': 'IoK8sApiCoreV1LimitRange',
  'rbac.authorization.k8s.io/v1/Role': 'IoK8sApiRbacV1Role',
  'rbac.authorization.k8s.io/v1/RoleBinding': 'IoK8sApiRbacV1RoleBinding',
};

/** Paths of fields the schema does not know, e.g. `spec.template.spec.containers[0].readinesProbe`. */
function unknownFields(value: Obj, schema: string, at = ''): string[] {
  const known = knownFields(schema);
  const children = FIELD_TREE[schema] ?? {};
  const found: string[] = [];
  for (const [key, child] of Object.entries(value)) {
    const path = at ? `${at}.${key}` : key;
    if (!known.has(key)) {
      found.push(path);
      continue;
    }
    const childSchema = children[key];
    if (!childSchema || child === null || typeof child !== 'object') continue;
    if (Array.isArray(child)) child.forEach((item, i) => found.push(...unknownFields(item as Obj, childSchema, `${path}[${i}]`)));
    else found.push(...unknownFields(child as Obj, childSchema, path));
  }
  return found;
}

const unavailable = kubectlUnavailableReason();
const DIRS = unavailable ? [] : ['base', ...readdirSync(join(KUBE_DIR, 'overlays')).sort().map((d) => `overlays/${d}`)];
const rendered = DIRS.map(render);

describe('kubernetes manifests', { skip: unavailable }, () => {
  test('every overlay docs/deploying.md promises exists and renders', () => {
    assert.deepEqual(DIRS, ['base', 'overlays/docker-rootless', 'overlays/gvisor', KUBERNETES_BACKEND, 'overlays/remote-backend', 'overlays/tls']);
    for (const r of rendered) {
      for (const kind of ['Namespace', 'ServiceAccount', 'ConfigMap', 'Deployment', 'StatefulSet', 'Service', 'PodDisruptionBudget', 'HorizontalPodAutoscaler', 'NetworkPolicy']) {
        assert.ok(find(r, kind).length > 0, `${r.name} renders no ${kind}`);
      }
      for (const o of r.objects.filter((x) => x.kind !== 'Namespace')) {
        const sandboxSide = r.name === KUBERNETES_BACKEND && SANDBOX_KINDS.includes(o.kind);
        assert.equal(o.metadata.namespace, sandboxSide ? SANDBOX_NS : 'berth', `${r.name} ${o.kind} ${o.metadata.name}`);
      }
    }
  });

  test('every object validates against the Kubernetes OpenAPI schema', () => {
    for (const r of rendered) {
      for (const o of r.objects) {
        const Model = MODELS[kindOf(o)];
        assert.ok(Model, `${r.name}: no schema known for ${kindOf(o)} ${o.metadata?.name}: add its kubernetes-models class to MODELS`);
        assert.doesNotThrow(() => new Model(o as never).validate(), `${r.name} ${o.kind} ${o.metadata.name}`);
      }
    }
  });

  test('the schema check rejects a wrong type, an unknown enum value, a bad quantity and a missing field', () => {
    const base = one(rendered[0]!, 'Deployment', 'berth-dispatcher');
    const broken: Array<[string, (d: Obj) => void, RegExp]> = [
      ['replicas as a string', (d) => (d.spec.replicas = 'two'), /replicas must be integer/],
      ['an unknown seccomp type', (d) => (d.spec.template.spec.securityContext.seccompProfile.type = 'Default'), /seccompProfile\/type must be equal to one of the allowed values/],
      ['a named port in a gRPC probe', (d) => (d.spec.template.spec.containers[0].readinessProbe.grpc.port = 'grpc'), /grpc\/port must be integer/],
      ['a CPU limit that is no quantity', (d) => (d.spec.template.spec.containers[0].resources.limits.cpu = 'lots'), /limits\/cpu must match format "quantity"/],
      ['no selector', (d) => delete d.spec.selector, /must have required property selector/],
    ];
    for (const [what, breakIt, message] of broken) {
      const d = structuredClone(base);
      breakIt(d);
      assert.throws(() => new Deployment(d as never).validate(), message, what);
    }
    // kubernetes-models does not refuse fields the schema does not know (an API server with strict field
    // validation would): the field check below does.
    const typo = structuredClone(base);
    typo.spec.template.spec.containers[0].readinesProbe = typo.spec.template.spec.containers[0].readinessProbe;
    typo.spec.template.spec.securityContext.runAsNonroot = true;
    assert.doesNotThrow(() => new Deployment(typo as never).validate());
    assert.deepEqual(unknownFields(typo, 'IoK8sApiAppsV1Deployment'), [
      'spec.template.spec.containers[0].readinesProbe',
      'spec.template.spec.securityContext.runAsNonroot',
    ]);
  });

  test('no object carries a field its schema does not know', () => {
    for (const r of rendered) {
      for (const o of r.objects) {
        const schema = ROOT_SCHEMA[kindOf(o)];
        assert.ok(schema, `${r.name}: no schema known for ${kindOf(o)}`);
        assert.deepEqual(unknownFields(o, schema), [], `${r.name} ${o.kind} ${o.metadata.name}: unknown fields`);
      }
    }
  });

  test('every pod: non-root, read-only root, no escalation, no capabilities, seccomp, requests and limits', () => {
    for (const r of rendered) {
      for (const w of workloads(r)) {
        const spec = w.spec.template.spec;
        const where = `${r.name} ${w.kind} ${w.metadata.name}`;
        // Only the kubernetes backend's executor calls the Kubernetes API, so only it gets a token.
        const callsApi = r.name === KUBERNETES_BACKEND && w.metadata.name === 'berth-executor';
        assert.equal(spec.automountServiceAccountToken, callsApi, `${where}: automountServiceAccountToken`);
        for (const hostKey of ['hostNetwork', 'hostPID', 'hostIPC']) assert.ok(!spec[hostKey], `${where}: ${hostKey}`);
        assert.ok(!(spec.volumes as Obj[]).some((v) => v.hostPath), `${where}: a hostPath volume`);
        assert.equal(spec.securityContext.runAsNonRoot, true, `${where}: runAsNonRoot`);
        assert.ok(spec.securityContext.runAsUser > 0, `${where}: runAsUser`);
        assert.equal(spec.securityContext.seccompProfile.type, 'RuntimeDefault', `${where}: pod seccomp`);
        for (const c of containersOf(w)) {
          const at = `${where} container ${c.name}`;
          const sc = c.securityContext ?? {};
          for (const kind of ['requests', 'limits']) {
            for (const resource of ['cpu', 'memory']) assert.ok(c.resources?.[kind]?.[resource], `${at}: resources.${kind}.${resource}`);
          }
          assert.equal(sc.readOnlyRootFilesystem, true, `${at}: readOnlyRootFilesystem`);
          assert.notEqual(sc.runAsNonRoot, false, `${at}: runAsNonRoot`);
          assert.notEqual(sc.runAsUser, 0, `${at}: runAsUser`);
          if (isEngineSidecar(r, c)) {
            // Exactly what the docker-rootless option documents, and nothing more.
            assert.deepEqual(
              { privileged: sc.privileged, seccomp: sc.seccompProfile?.type, apparmor: sc.appArmorProfile?.type, runAsUser: sc.runAsUser, runAsNonRoot: sc.runAsNonRoot },
              { privileged: true, seccomp: 'Unconfined', apparmor: 'Unconfined', runAsUser: 1000, runAsNonRoot: true },
              at,
            );
            continue;
          }
          assert.equal(sc.allowPrivilegeEscalation, false, `${at}: allowPrivilegeEscalation`);
          assert.deepEqual(sc.capabilities?.drop, ['ALL'], `${at}: capabilities.drop`);
          assert.equal(sc.capabilities?.add, undefined, `${at}: capabilities.add`);
          assert.ok(!sc.privileged, `${at}: privileged`);
          assert.ok(sc.seccompProfile === undefined || sc.seccompProfile.type === 'RuntimeDefault', `${at}: seccomp`);
        }
      }
      // The Pod Security level says the same: restricted, except where the engine sidecar runs.
      const level = one(r, 'Namespace', 'berth').metadata.labels['pod-security.kubernetes.io/enforce'];
      assert.equal(level, r.name === 'overlays/docker-rootless' ? 'privileged' : 'restricted', `${r.name}: namespace Pod Security level`);
    }
  });

  test('every pod in a namespace that enforces Pod Security restricted meets the restricted profile', () => {
    for (const r of rendered) {
      const restricted = find(r, 'Namespace').filter((ns) => ns.metadata.labels?.['pod-security.kubernetes.io/enforce'] === 'restricted');
      for (const w of workloads(r).filter((x) => restricted.some((ns) => ns.metadata.name === x.metadata.namespace))) {
        assert.deepEqual(restrictedViolations(w.spec.template.spec, w.spec.template.metadata.annotations), [], `${r.name} ${w.kind} ${w.metadata.name}`);
      }
    }
  });

  test('the restricted check refuses each thing the profile refuses', () => {
    const good = structuredClone(one(rendered[0]!, 'StatefulSet', 'berth-executor').spec.template.spec);
    assert.deepEqual(restrictedViolations(good), []);
    const broken: Array<[(s: Obj) => void, RegExp]> = [
      [(s) => (s.hostNetwork = true), /spec\.hostNetwork: host namespaces are forbidden/],
      [(s) => s.volumes.push({ name: 'h', hostPath: { path: '/' } }), /spec\.volumes\[\d+\]\.hostPath: forbidden/],
      [(s) => s.volumes.push({ name: 'n', nfs: { server: 'x', path: '/' } }), /volume type nfs is not allowed/],
      [(s) => (s.containers[0].securityContext.privileged = true), /spec\.containers\[0\]\.securityContext\.privileged: forbidden/],
      [(s) => (s.containers[0].securityContext.allowPrivilegeEscalation = true), /allowPrivilegeEscalation: must be false/],
      [(s) => (s.containers[0].securityContext.capabilities = { drop: ['NET_RAW'] }), /capabilities\.drop: must include ALL/],
      [(s) => (s.containers[0].securityContext.capabilities.add = ['SYS_ADMIN']), /capabilities\.add: SYS_ADMIN is forbidden/],
      [(s) => delete s.securityContext.runAsNonRoot, /runAsNonRoot: must be true/],
      [(s) => (s.containers[0].securityContext.runAsUser = 0), /runAsUser: 0 \(root\) is forbidden/],
      [(s) => delete s.securityContext.seccompProfile, /seccompProfile\.type: must be RuntimeDefault or Localhost/],
      [(s) => (s.containers[0].ports = [{ containerPort: 1, hostPort: 80 }]), /hostPort: forbidden/],
      [(s) => (s.securityContext.sysctls = [{ name: 'kernel.msgmax', value: '1' }]), /kernel\.msgmax is not a safe sysctl/],
    ];
    for (const [breakIt, message] of broken) {
      const s = structuredClone(good);
      breakIt(s);
      assert.match(restrictedViolations(s).join('\n'), message);
    }
  });

  test('the engine sidecar is the only exception, and its kustomization says what it costs', () => {
    const exceptions = rendered.flatMap((r) => workloads(r).flatMap((w) => containersOf(w).filter((c) => isEngineSidecar(r, c)).map(() => r.name)));
    assert.deepEqual(exceptions, ['overlays/docker-rootless']);
    const doc = readFileSync(join(KUBE_DIR, 'components', 'docker-rootless', 'kustomization.yaml'), 'utf8');
    for (const needle of ['privileged: true', 'seccomp', 'AppArmor', 'NOT enforced', 'No registry']) assert.ok(doc.includes(needle), `component doc lacks "${needle}"`);
  });

  test('service accounts have no token and no role binds them (but the kubernetes backend executor\'s, in its sandbox namespace)', () => {
    for (const r of rendered) {
      for (const sa of find(r, 'ServiceAccount')) assert.equal(sa.automountServiceAccountToken, false, `${r.name} ${sa.metadata.name}`);
      const roles = r.objects.filter((o) => /Role/.test(o.kind));
      if (r.name === KUBERNETES_BACKEND) assert.deepEqual(roles.map((o) => `${o.kind} ${o.metadata.namespace}/${o.metadata.name}`), [`Role ${SANDBOX_NS}/berth-executor`, `RoleBinding ${SANDBOX_NS}/berth-executor`]);
      else assert.deepEqual(roles, [], `${r.name}: Berth needs no API rights`);
      for (const w of workloads(r)) assert.equal(find(r, 'ServiceAccount', w.spec.template.spec.serviceAccountName).length, 1, `${r.name} ${w.metadata.name}`);
    }
  });

  test('Services, PDBs, the HPA and NetworkPolicies select pods that exist, on ports they expose', () => {
    for (const r of rendered) {
      const pods = workloads(r).map((w) => ({ w, labels: w.spec.template.metadata.labels as Obj }));
      for (const w of workloads(r)) assert.ok(matches(w.spec.selector.matchLabels, w.spec.template.metadata.labels), `${r.name} ${w.metadata.name}: selector`);
      for (const svc of find(r, 'Service')) {
        const selected = pods.filter((p) => matches(svc.spec.selector, p.labels));
        assert.equal(selected.length, 1, `${r.name} Service ${svc.metadata.name} selects ${selected.length} workloads`);
        const ports = selected[0]!.w.spec.template.spec.containers.flatMap((c: Obj) => c.ports ?? []);
        for (const p of svc.spec.ports) {
          assert.ok(ports.some((cp: Obj) => cp.name === p.targetPort || cp.containerPort === p.targetPort), `${r.name} Service ${svc.metadata.name}: targetPort ${p.targetPort}`);
        }
      }
      for (const pdb of find(r, 'PodDisruptionBudget')) {
        assert.equal(pods.filter((p) => matches(pdb.spec.selector.matchLabels, p.labels)).length, 1, `${r.name} PDB ${pdb.metadata.name}`);
      }
      for (const hpa of find(r, 'HorizontalPodAutoscaler')) {
        const target = one(r, hpa.spec.scaleTargetRef.kind, hpa.spec.scaleTargetRef.name);
        for (const c of target.spec.template.spec.containers) assert.ok(c.resources.requests.cpu, `${r.name}: CPU utilisation needs requests`);
        assert.equal(hpa.spec.metrics[0].resource.name, 'cpu');
      }
      for (const np of find(r, 'NetworkPolicy')) {
        const selected = pods.filter((p) => matches(np.spec.podSelector.matchLabels ?? {}, p.labels));
        assert.ok(selected.length > 0, `${r.name} NetworkPolicy ${np.metadata.name} selects nothing`);
        const exposed = new Set(selected.flatMap((p) => p.w.spec.template.spec.containers.flatMap((c: Obj) => (c.ports ?? []).map((cp: Obj) => cp.containerPort))));
        for (const rule of np.spec.ingress ?? []) {
          for (const port of rule.ports ?? []) assert.ok(exposed.has(port.port), `${r.name} NetworkPolicy ${np.metadata.name}: port ${port.port}`);
          for (const peer of rule.from ?? []) {
            if (peer.namespaceSelector === undefined) {
              assert.ok(pods.some((p) => matches(peer.podSelector.matchLabels, p.labels)), `${r.name} ${np.metadata.name}: peer selects no Berth pod`);
            }
          }
        }
      }
      // Executors admit dispatchers only; the metadata service stays out of reach of agents' commands.
      const fromDispatchers = one(r, 'NetworkPolicy', 'berth-executor-from-dispatchers').spec.ingress;
      assert.deepEqual(fromDispatchers[0].from, [{ podSelector: { matchLabels: one(r, 'Deployment', 'berth-dispatcher').spec.selector.matchLabels } }]);
      const egress = one(r, 'NetworkPolicy', 'berth-executor-egress').spec.egress[0].to;
      assert.ok(egress.some((t: Obj) => t.ipBlock.cidr === '0.0.0.0/0' && t.ipBlock.except.includes('169.254.0.0/16')));
    }
  });

  test('probes, Prometheus annotations and volume mounts point at ports and volumes that exist', () => {
    for (const r of rendered) {
      for (const w of workloads(r)) {
        const spec = w.spec.template.spec;
        const volumes = new Set([...(spec.volumes as Obj[]).map((v) => v.name), ...(w.spec.volumeClaimTemplates ?? []).map((v: Obj) => v.metadata.name)]);
        const allPorts = spec.containers.flatMap((c: Obj) => (c.ports ?? []).map((p: Obj) => p.containerPort));
        for (const c of containersOf(w)) {
          const at = `${r.name} ${w.metadata.name}/${c.name}`;
          const ports = (c.ports ?? []).map((p: Obj) => p.containerPort);
          for (const probeName of ['readinessProbe', 'livenessProbe', 'startupProbe']) {
            const probe = c[probeName];
            if (!probe) continue;
            const port = probe.grpc?.port ?? probe.tcpSocket?.port ?? probe.httpGet?.port;
            if (port !== undefined) assert.ok(ports.includes(port), `${at}: ${probeName} port ${port} is not a container port`);
          }
          if (!isEngineSidecar(r, c)) {
            assert.ok(c.readinessProbe && c.livenessProbe, `${at}: readiness and liveness probes`);
          } else {
            assert.ok(c.startupProbe, `${at}: the executor must not start before the engine answers`);
            assert.equal(c.restartPolicy, 'Always', `${at}: a native sidecar outlives the draining executor`);
          }
          for (const m of c.volumeMounts ?? []) assert.ok(volumes.has(m.name), `${at}: volume ${m.name}`);
        }
        const annotations = w.spec.template.metadata.annotations;
        assert.equal(annotations['prometheus.io/scrape'], 'true', `${r.name} ${w.metadata.name}`);
        assert.ok(allPorts.includes(Number(annotations['prometheus.io/port'])), `${r.name} ${w.metadata.name}: prometheus.io/port`);
      }
    }
  });

  test("the ConfigMap's config.yaml is a valid Berth config that matches the manifests", () => {
    for (const r of rendered) {
      const dispatcher = one(r, 'Deployment', 'berth-dispatcher');
      const executor = one(r, 'StatefulSet', 'berth-executor');
      const config = configOf(r, dispatcher);
      const executorConfig = configOf(r, executor);
      assert.deepEqual(
        { ...executorConfig, executor: { ...executorConfig.executor, state_root: config.executor.state_root } },
        config,
        `${r.name}: dispatchers and executors read one config (the state root matters to executors only)`,
      );
      // `berth executor --backend NAME` overrides terminal.backend: both must say the same.
      const args = executor.spec.template.spec.containers[0].args as string[];
      assert.equal(args[0], 'executor', r.name);
      assert.equal(args[args.indexOf('--backend') + 1], config.terminal.backend, `${r.name}: the executor's --backend`);
      assert.deepEqual(one(r, 'Deployment', 'berth-dispatcher').spec.template.spec.containers[0].args.slice(0, 1), ['dispatcher']);
      const portOf = (w: Obj, name: string) => w.spec.template.spec.containers[0].ports.find((p: Obj) => p.name === name).containerPort;
      assert.equal(config.server.host, '0.0.0.0', `${r.name}: the dispatcher must listen on the pod address`);
      assert.equal(config.executor.host, '0.0.0.0', `${r.name}: the executor must listen on the pod address`);
      assert.equal(config.server.port, portOf(dispatcher, 'grpc'), `${r.name}: server.port`);
      assert.equal(config.executor.port, portOf(executor, 'grpc'), `${r.name}: executor.port`);
      assert.equal(config.metrics.enabled, true);
      assert.equal(config.metrics.port, portOf(dispatcher, 'metrics'), `${r.name}: metrics.port`);
      assert.equal(config.metrics.executor_port, portOf(executor, 'metrics'), `${r.name}: metrics.executor_port`);
      // Dispatchers and executors must finish in-flight calls before the kubelet kills them.
      assert.ok(config.server.shutdown_grace_ms < dispatcher.spec.template.spec.terminationGracePeriodSeconds * 1000);
      const drainMs = (executorConfig.executor as Record<string, unknown>).drain_grace_ms;
      if (typeof drainMs === 'number') assert.ok(drainMs < executor.spec.template.spec.terminationGracePeriodSeconds * 1000, `${r.name}: executor.drain_grace_ms`);
      // Read-only root: the state root and the working directory must sit on a writable volume.
      const executorMounts = executor.spec.template.spec.containers[0].volumeMounts as Obj[];
      const writable = (p: string) => executorMounts.some((m) => !m.readOnly && (p === m.mountPath || p.startsWith(`${m.mountPath}/`)));
      const stateRoot = executorConfig.executor.state_root;
      assert.equal(stateRoot, rawConfigOf(r).executor.state_root, `${r.name}: config.yaml must name the state root the executor uses (BERTH_STATE_ROOT overrides it)`);
      assert.ok(writable(stateRoot), `${r.name}: the executor's state root ${stateRoot} is not on a writable volume`);
      assert.notEqual(posix.dirname(stateRoot), '/', `${r.name}: the state root must be a directory inside the volume (the volume's own root belongs to root)`);
      assert.ok(!executorMounts.some((m) => m.mountPath === stateRoot), `${r.name}: the state root ${stateRoot} must be made by the executor, not be a mount point`);
      if (config.terminal.cwd) assert.ok(writable(config.terminal.cwd), `${r.name}: terminal.cwd`);
    }
  });

  test('executor discovery names the headless Service the StatefulSet governs', () => {
    for (const r of rendered) {
      const executor = one(r, 'StatefulSet', 'berth-executor');
      const headless = one(r, 'Service', executor.spec.serviceName);
      assert.equal(headless.spec.clusterIP, 'None', `${r.name}: the executor Service must be headless (one DNS record per pod)`);
      assert.equal(headless.spec.publishNotReadyAddresses, false, `${r.name}: a draining executor must leave DNS`);
      const raw = rawConfigOf(r);
      assert.equal(raw.executor_discovery?.length, 1, `${r.name}: executor_discovery`);
      const discovery = raw.executor_discovery[0];
      assert.equal(discovery.dns, `${headless.metadata.name}.${headless.metadata.namespace}.svc.cluster.local`, r.name);
      assert.equal(discovery.port, headless.spec.ports[0].port, r.name);
      assert.equal(discovery.backend, raw.terminal.backend, `${r.name}: discovered executors run the configured backend`);
      assert.deepEqual(raw.executors ?? [], [], `${r.name}: no static executors beside discovery`);
      if (discovery.tls) assert.equal(discovery.tls.server_name, discovery.dns, `${r.name}: executors are dialled by IP and checked against the Service name`);
    }
  });

  test('every file the config names is mounted from a Secret into the container that reads it', () => {
    for (const r of rendered) {
      const raw = rawConfigOf(r);
      const files: Array<[string, string]> = [];
      for (const [key, value] of Object.entries(raw.server?.tls ?? {})) files.push(['berth-dispatcher', `server.tls.${key}=${value as string}`]);
      for (const [key, value] of Object.entries(raw.executor?.tls ?? {})) files.push(['berth-executor', `executor.tls.${key}=${value as string}`]);
      for (const [key, value] of Object.entries(raw.executor_discovery?.[0]?.tls ?? {})) {
        if (key !== 'server_name') files.push(['berth-dispatcher', `executor_discovery[0].tls.${key}=${value as string}`]);
      }
      for (const key of ['ssh_key', 'ssh_known_hosts']) if (raw.terminal?.[key]) files.push(['berth-executor', `terminal.${key}=${raw.terminal[key] as string}`]);
      for (const [workload, entry] of files) {
        const file = entry.split('=')[1]!;
        const w = workloads(r).find((x) => x.metadata.name === workload)!;
        const secretVolumes = new Set((w.spec.template.spec.volumes as Obj[]).filter((v) => v.secret).map((v) => v.name));
        const mounts = (w.spec.template.spec.containers[0].volumeMounts as Obj[]).filter((m) => secretVolumes.has(m.name) && file.startsWith(`${m.mountPath}/`));
        assert.equal(mounts.length, 1, `${r.name}: ${entry} is not in a Secret mounted into ${workload}`);
      }
    }
    assert.ok(rendered.some((r) => rawConfigOf(r).server?.tls), 'the tls overlay serves the API over TLS');
  });

  test('the docker-rootless engine shares the socket and the state root with the executor, at the same paths', () => {
    const r = rendered.find((x) => x.name === 'overlays/docker-rootless')!;
    const executor = one(r, 'StatefulSet', 'berth-executor');
    const config = configOf(r, executor);
    assert.equal(config.terminal.backend, 'docker');
    const [engine] = executor.spec.template.spec.initContainers as Obj[];
    const berth = executor.spec.template.spec.containers[0];
    const mountFor = (c: Obj, file: string) => (c.volumeMounts as Obj[]).find((m) => file.startsWith(`${m.mountPath}/`));
    for (const file of [config.docker.socket_path, config.executor.state_root]) {
      const a = mountFor(berth, file);
      const b = mountFor(engine!, file);
      assert.ok(a && b && a.name === b.name && a.mountPath === b.mountPath, `${file}: the engine bind-mounts host paths the executor made, so both must see one volume at one path`);
    }
    assert.ok((engine!.args as string[]).includes(`--host=unix://${config.docker.socket_path}`), 'the engine listens where the executor looks (and on no TCP port)');
    // The engine maps only its own uid to root in its user namespace: the executor must be that uid to share files.
    assert.equal(executor.spec.template.spec.securityContext.runAsUser, engine!.securityContext.runAsUser);
  });

  test('the kubernetes-backend overlay: task pods in a restricted namespace, an executor with exactly the verbs the backend uses there, nothing cluster-wide', () => {
    const r = rendered.find((x) => x.name === KUBERNETES_BACKEND)!;
    const executor = one(r, 'StatefulSet', 'berth-executor');
    const config = configOf(r, executor);
    assert.equal(config.terminal.backend, 'kubernetes');
    assert.equal(config.kubernetes.namespace, SANDBOX_NS, 'task pods go to the sandbox namespace, not the executor\'s');
    assert.notEqual(config.terminal.kubernetes_image, '', 'the backend needs an image');

    const ns = one(r, 'Namespace', SANDBOX_NS);
    for (const mode of ['enforce', 'warn', 'audit']) assert.equal(ns.metadata.labels[`pod-security.kubernetes.io/${mode}`], 'restricted', `${SANDBOX_NS}: Pod Security ${mode}`);

    // RBAC: one Role in the sandbox namespace, exactly the backend's verbs, no wildcard, bound to the executors' ServiceAccount only.
    assert.deepEqual(r.objects.filter((o) => o.kind.startsWith('Cluster')), [], 'nothing cluster-wide');
    const role = one(r, 'Role', 'berth-executor');
    const granted: Record<string, string[]> = {};
    for (const rule of role.rules as Obj[]) {
      assert.equal(rule.resourceNames, undefined);
      for (const group of rule.apiGroups as string[]) {
        for (const resource of rule.resources as string[]) {
          for (const verb of rule.verbs as string[]) {
            assert.notEqual(verb, '*', 'no wildcard verb');
            assert.notEqual(resource, '*', 'no wildcard resource');
            (granted[`${group}/${resource}`] ??= []).push(verb);
          }
        }
      }
    }
    for (const verbs of Object.values(granted)) verbs.sort();
    assert.deepEqual(granted, BACKEND_VERBS);
    const binding = one(r, 'RoleBinding', 'berth-executor');
    assert.deepEqual(binding.roleRef, { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: role.metadata.name });
    assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: executor.spec.template.spec.serviceAccountName, namespace: executor.metadata.namespace }]);
    assert.notEqual(one(r, 'Deployment', 'berth-dispatcher').spec.template.spec.serviceAccountName, executor.spec.template.spec.serviceAccountName, 'dispatchers must not share the token');

    // The example quota and limits admit the pods config.yaml asks for.
    const quota = one(r, 'ResourceQuota', 'berth-sandboxes').spec.hard;
    for (const key of ['pods', 'requests.cpu', 'limits.cpu', 'requests.memory', 'limits.memory', 'persistentvolumeclaims']) assert.ok(quota[key], `ResourceQuota: ${key}`);
    const max = (one(r, 'LimitRange', 'berth-sandboxes').spec.limits as Obj[]).find((l) => l.type === 'Container')!.max;
    const UNITS: Record<string, number> = { m: 1e-3, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, '': 1 };
    const quantity = (q: string) => {
      const m = /^(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti)?$/.exec(String(q));
      assert.ok(m, `not a quantity this test reads: ${q}`);
      return Number(m[1]) * UNITS[m[2] ?? '']!;
    };
    assert.ok(config.terminal.container_cpu <= quantity(max.cpu), 'container_cpu within the LimitRange');
    assert.ok(config.terminal.container_memory * 2 ** 20 <= quantity(max.memory), 'container_memory within the LimitRange');
    assert.ok(config.terminal.container_disk * 2 ** 20 <= quantity(max['ephemeral-storage']), 'container_disk within the LimitRange');
  });

  test("the kubernetes-backend overlay's task pod meets Pod Security restricted, fits the LimitRange and is selected by its NetworkPolicies", () => {
    const r = rendered.find((x) => x.name === KUBERNETES_BACKEND)!;
    const config = configOf(r, one(r, 'StatefulSet', 'berth-executor'));
    const options = kubernetesOptionsFromConfig(config);
    const policy = { egress: config.docker.egress, egressAllow: config.docker.egress_allow };
    const purpose = { kind: 'task', tenant: 't', task: 'x', policy: policyLabelValue(policy), claims: claimNames('x') } as const;
    // The identity pod-uids.ts gives a pod under this config: its own uid (run_as_user unset), or the fixed one.
    const identity = fixedIdentity(options.pod) ?? { ...candidateIdentity(podUidRange(options.taskUids, options.pod.userNamespace ?? false)), own: true };
    const pod = buildPod({ ...options.pod, namespace: config.kubernetes.namespace }, 'berth-x-00000', purpose, identity);
    assert.equal(pod.metadata?.namespace, SANDBOX_NS);
    assert.deepEqual(restrictedViolations(pod.spec as Obj, pod.metadata?.annotations), [], 'the task pod would be refused by its namespace');
    const max = (one(r, 'LimitRange', 'berth-sandboxes').spec.limits as Obj[]).find((l) => l.type === 'PersistentVolumeClaim')!.max;
    const claim = buildClaim({ ...options.pod, namespace: SANDBOX_NS }, 'berth-x-workspace', { tenant: 't', task: 'x' }, 'workspace', options.storageClass ?? '');
    const storage = String(claim.spec?.resources?.requests?.storage);
    assert.match(storage, /^\d+Mi$/);
    assert.match(max.storage, /^\d+Gi$/);
    assert.ok(parseInt(storage, 10) <= parseInt(max.storage, 10) * 1024, `a claim of ${storage} exceeds the LimitRange's ${max.storage}`);
    for (const np of networkPolicyManifests(SANDBOX_NS, policy)) {
      assert.ok(matches(np.spec?.podSelector?.matchLabels ?? {}, pod.metadata?.labels ?? {}), `NetworkPolicy ${np.metadata?.name} does not select the task pod`);
    }
  });

  test('the gvisor overlay puts executors, and only executors, under runsc', () => {
    const r = rendered.find((x) => x.name === 'overlays/gvisor')!;
    assert.equal(one(r, 'StatefulSet', 'berth-executor').spec.template.spec.runtimeClassName, 'gvisor');
    assert.equal(one(r, 'Deployment', 'berth-dispatcher').spec.template.spec.runtimeClassName, undefined);
    assert.equal(configOf(r, one(r, 'StatefulSet', 'berth-executor')).terminal.backend, 'local', 'the pod is the sandbox only when commands run in it');
  });

  test('the remote-backend overlay runs an ssh executor with no engine, a pinned host key and execute_code refused', () => {
    const r = rendered.find((x) => x.name === 'overlays/remote-backend')!;
    const executor = one(r, 'StatefulSet', 'berth-executor');
    const config = configOf(r, executor);
    assert.equal(config.terminal.backend, 'ssh');
    assert.equal(config.terminal.ssh_host_key_policy, 'strict');
    assert.equal(config.code_execution.code_container, 'off');
    assert.equal(executor.spec.template.spec.initContainers, undefined);
  });

  test('every Secret a pod needs is one docs/deploying.md tells how to create', () => {
    const page = readFileSync(join(REPO_ROOT, 'docs', 'deploying.md'), 'utf8');
    const start = page.indexOf('## Kubernetes');
    assert.ok(start >= 0, 'docs/deploying.md has a "## Kubernetes" section');
    const next = page.slice(start + 1).search(/\n#{1,2} /);
    const section = next < 0 ? page.slice(start) : page.slice(start, start + 1 + next);
    for (const r of rendered) {
      for (const w of workloads(r)) {
        for (const c of containersOf(w)) {
          for (const e of c.env ?? []) {
            const ref = e.valueFrom?.secretKeyRef;
            if (!ref) continue;
            assert.ok(section.includes(ref.name) && section.includes(ref.key), `${r.name}: docs/deploying.md does not say how to create Secret ${ref.name} with key ${ref.key}`);
          }
        }
        for (const v of w.spec.template.spec.volumes as Obj[]) {
          if (v.secret) assert.ok(section.includes(v.secret.secretName), `${r.name}: docs/deploying.md does not say how to create Secret ${v.secret.secretName}`);
        }
      }
    }
  });

  test('the tenants Secret docs/deploying.md shows is accepted by the overlay it follows, once that allows tenants on local', () => {
    const page = readFileSync(join(REPO_ROOT, 'docs', 'deploying.md'), 'utf8');
    const heredoc = /cat > tenants\.yaml <<'YAML'\n([\s\S]*?)\nYAML\n/.exec(page);
    assert.ok(heredoc, 'docs/deploying.md shows a tenants.yaml');
    const tenants = heredoc[1]!.replace('0f1e...', hashApiKey('acme-key'));
    const r = rendered.find((x) => x.name === 'overlays/gvisor')!;
    const raw = parseYaml(find(r, 'ConfigMap')[0]!.data['config.yaml']) as Obj;
    // As the page says: the local backend refuses tenants until the overlay's config allows them.
    assert.throws(() => parseConfig(applyEnvOverrides(raw, { BERTH_TENANTS: tenants })), /allow_local_multi_tenant/);
    const config = parseConfig(applyEnvOverrides({ ...raw, allow_local_multi_tenant: true }, { BERTH_TENANTS: tenants }));
    assert.deepEqual(config.tenants.map((t) => [t.id, t.allowed_backends]), [['acme', [config.terminal.backend]]]);
  });
});

/** The first candidate of a task in `range`: a pod's own ids. */
function candidateIdentity(range: UidRange): { uid: number; gid: number } {
  const uid = candidateUid(range, 'x', 0);
  return { uid, gid: uid };
}
