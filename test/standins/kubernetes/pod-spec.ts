/**
 * Kubernetes stand-in (a test double): what the API server does to a new
 * pod before storing it: validation (422 Invalid with field paths), the
 * defaults it fills in, and a refusal of every field the stand-in cannot
 * honour on a Docker engine (422 naming the field), so nothing in a pod
 * spec is silently ignored.
 */
import type { FieldError } from './errors.js';
import { isLabelKey, isLabelValue } from './selectors.js';
import { parseQuantity, QUANTITY_ERROR } from './quantity.js';

/* eslint-disable @typescript-eslint/no-explicit-any -- a pod spec is JSON checked field by field here */
type Spec = Record<string, any>;

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const ENV_NAME = /^[-._a-zA-Z][-._a-zA-Z0-9]*$/;

export const DNS1123_SUBDOMAIN_ERROR =
  "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_ERROR =
  "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

export const isDnsSubdomain = (s: string) => s.length <= 253 && DNS_SUBDOMAIN.test(s);
export const isDnsLabel = (s: string) => s.length <= 63 && DNS_LABEL.test(s);

/** Checks metadata.name, labels and annotations the way every resource's validation does. */
export function validateMeta(meta: Spec, errors: FieldError[]): void {
  if (typeof meta.name !== 'string' || meta.name === '') {
    errors.push({ field: 'metadata.name', type: 'FieldValueRequired', detail: 'name or generateName is required' });
  } else if (!isDnsSubdomain(meta.name)) {
    errors.push({ field: 'metadata.name', type: 'FieldValueInvalid', value: meta.name, detail: DNS1123_SUBDOMAIN_ERROR });
  }
  for (const [k, v] of Object.entries((meta.labels ?? {}) as Record<string, string>)) {
    if (!isLabelKey(k)) errors.push({ field: 'metadata.labels', type: 'FieldValueInvalid', value: k, detail: 'name part must consist of alphanumeric characters, \'-\', \'_\' or \'.\', and must start and end with an alphanumeric character' });
    else if (!isLabelValue(v)) errors.push({ field: 'metadata.labels', type: 'FieldValueInvalid', value: v, detail: "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character" });
  }
  const annotationBytes = Object.entries((meta.annotations ?? {}) as Record<string, string>).reduce((n, [k, v]) => n + k.length + v.length, 0);
  if (annotationBytes > 256 * 1024) errors.push({ field: 'metadata.annotations', type: 'FieldValueInvalid', value: '', detail: 'must have at most 262144 bytes' });
}

const NOT_HONOURED = 'not supported by the Kubernetes stand-in (a test double): it cannot honour this on a Docker engine';

/** Pod-level fields the stand-in refuses when set (beyond their harmless defaults). */
const REFUSED_POD_FIELDS = [
  'affinity', 'hostNetwork', 'hostPID', 'hostIPC', 'hostUsers', 'shareProcessNamespace', 'initContainers',
  'ephemeralContainers', 'hostAliases', 'dnsConfig', 'readinessGates', 'topologySpreadConstraints', 'overhead',
  'os', 'resourceClaims', 'schedulingGates', 'setHostnameAsFQDN', 'hostname', 'subdomain', 'nodeName', 'priorityClassName',
  'imagePullSecrets', 'resources', 'activeDeadlineSeconds',
];
const REFUSED_CONTAINER_FIELDS = [
  'readinessProbe', 'livenessProbe', 'startupProbe', 'lifecycle', 'envFrom', 'volumeDevices', 'resizePolicy', 'restartPolicy',
];
const REFUSED_SECURITY_FIELDS = ['privileged', 'procMount', 'seLinuxOptions', 'windowsOptions', 'appArmorProfile'];
const REFUSED_POD_SECURITY_FIELDS = ['seLinuxOptions', 'windowsOptions', 'sysctls', 'appArmorProfile', 'fsGroupChangePolicy', 'supplementalGroupsPolicy', 'seLinuxChangePolicy'];
const RESOURCE_NAMES = ['cpu', 'memory', 'ephemeral-storage'];

function validateSeccomp(profile: Spec | undefined, field: string, errors: FieldError[]): void {
  if (!profile) return;
  if (!['RuntimeDefault', 'Unconfined', 'Localhost'].includes(profile.type)) {
    errors.push({ field: `${field}.type`, type: 'FieldValueNotSupported', value: profile.type, detail: 'supported values: "Localhost", "RuntimeDefault", "Unconfined"' });
  } else if (profile.type === 'Localhost') {
    errors.push({ field: `${field}.type`, type: 'FieldValueForbidden', detail: NOT_HONOURED });
  }
}

/** `metadata.annotations['k']`, `metadata.labels['k']`, or one of the pod's names: what a downwardAPI file may hold (status fields are not served). */
const DOWNWARD_FIELD = /^metadata\.(annotations|labels)\['[^']+'\]$|^metadata\.(name|namespace|uid)$/;

function validateDownwardApi(source: Spec, field: string, errors: FieldError[]): void {
  const mode = source.defaultMode;
  if (mode !== undefined && (!Number.isInteger(mode) || mode < 0 || mode > 0o777)) {
    errors.push({ field: `${field}.defaultMode`, type: 'FieldValueInvalid', value: mode, detail: 'must be a number between 0 and 0777 (octal), both inclusive' });
  }
  for (const [i, item] of ((source.items ?? []) as Spec[]).entries()) {
    const at = `${field}.items[${i}]`;
    if (typeof item.path !== 'string' || item.path === '' || item.path.startsWith('/') || item.path.split('/').includes('..')) {
      errors.push({ field: `${at}.path`, type: 'FieldValueInvalid', value: item.path ?? '', detail: 'must be a relative path without \'..\'' });
    }
    if (item.resourceFieldRef !== undefined || item.mode !== undefined) errors.push({ field: at, type: 'FieldValueForbidden', detail: NOT_HONOURED });
    else if (!DOWNWARD_FIELD.test(item.fieldRef?.fieldPath ?? '')) {
      errors.push({ field: `${at}.fieldRef.fieldPath`, type: 'FieldValueNotSupported', value: item.fieldRef?.fieldPath ?? '', detail: `${NOT_HONOURED} (metadata fields only)` });
    }
  }
}

function validateContainer(c: Spec, field: string, volumes: ReadonlyMap<string, Spec>, errors: FieldError[]): void {
  if (typeof c.name !== 'string' || c.name === '') errors.push({ field: `${field}.name`, type: 'FieldValueRequired', detail: '' });
  else if (!isDnsLabel(c.name)) errors.push({ field: `${field}.name`, type: 'FieldValueInvalid', value: c.name, detail: DNS1123_LABEL_ERROR });
  if (typeof c.image !== 'string' || c.image.trim() === '') errors.push({ field: `${field}.image`, type: 'FieldValueRequired', detail: '' });
  for (const f of REFUSED_CONTAINER_FIELDS) if (c[f] !== undefined) errors.push({ field: `${field}.${f}`, type: 'FieldValueForbidden', detail: NOT_HONOURED });
  for (const [i, e] of ((c.env ?? []) as Spec[]).entries()) {
    if (!ENV_NAME.test(e.name ?? '')) errors.push({ field: `${field}.env[${i}].name`, type: 'FieldValueInvalid', value: e.name ?? '', detail: "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit" });
    if (e.valueFrom !== undefined) errors.push({ field: `${field}.env[${i}].valueFrom`, type: 'FieldValueForbidden', detail: `${NOT_HONOURED} (it serves no Secrets or ConfigMaps)` });
  }
  for (const kind of ['limits', 'requests'] as const) {
    for (const [k, v] of Object.entries((c.resources?.[kind] ?? {}) as Record<string, string>)) {
      if (!RESOURCE_NAMES.includes(k)) errors.push({ field: `${field}.resources.${kind}[${k}]`, type: 'FieldValueForbidden', detail: NOT_HONOURED });
      else if (parseQuantity(v) === undefined) errors.push({ field: `${field}.resources.${kind}[${k}]`, type: 'FieldValueInvalid', value: v, detail: QUANTITY_ERROR });
    }
  }
  for (const k of RESOURCE_NAMES) {
    const req = parseQuantity(c.resources?.requests?.[k]);
    const lim = parseQuantity(c.resources?.limits?.[k]);
    if (req !== undefined && lim !== undefined && req > lim) {
      errors.push({ field: `${field}.resources.requests`, type: 'FieldValueInvalid', value: c.resources.requests[k], detail: `must be less than or equal to ${k} limit of ${c.resources.limits[k]}` });
    }
  }
  for (const [i, m] of ((c.volumeMounts ?? []) as Spec[]).entries()) {
    if (!volumes.has(m.name)) errors.push({ field: `${field}.volumeMounts[${i}].name`, type: 'FieldValueNotFound', value: m.name, detail: '' });
    if (typeof m.mountPath !== 'string' || !m.mountPath.startsWith('/')) errors.push({ field: `${field}.volumeMounts[${i}].mountPath`, type: 'FieldValueRequired', detail: '' });
    // A subPath is honoured into a downwardAPI volume (one of its files, bound on its own), nowhere else.
    const downward = volumes.get(m.name)?.downwardAPI as Spec | undefined;
    if (downward && m.subPath !== undefined && !((downward.items ?? []) as Spec[]).some((item) => item.path === m.subPath)) {
      errors.push({ field: `${field}.volumeMounts[${i}].subPath`, type: 'FieldValueForbidden', detail: `${NOT_HONOURED} (a subPath of a downwardAPI volume names one of its items)` });
    }
    for (const f of [...(downward ? [] : ['subPath']), 'subPathExpr', 'mountPropagation', 'recursiveReadOnly']) {
      if (m[f] !== undefined && m[f] !== '') errors.push({ field: `${field}.volumeMounts[${i}].${f}`, type: 'FieldValueForbidden', detail: NOT_HONOURED });
    }
  }
  const sc = (c.securityContext ?? {}) as Spec;
  for (const f of REFUSED_SECURITY_FIELDS) {
    if (sc[f] !== undefined && sc[f] !== false) errors.push({ field: `${field}.securityContext.${f}`, type: 'FieldValueForbidden', detail: NOT_HONOURED });
  }
  validateSeccomp(sc.seccompProfile, `${field}.securityContext.seccompProfile`, errors);
  if (sc.allowPrivilegeEscalation === true && (sc.capabilities?.add ?? []).includes('SYS_ADMIN')) {
    errors.push({ field: `${field}.securityContext.capabilities.add`, type: 'FieldValueForbidden', detail: NOT_HONOURED });
  }
}

/** Validation errors of a pod's spec (an empty list when it can be stored and run). */
export function validatePodSpec(spec: Spec, errors: FieldError[]): void {
  for (const f of REFUSED_POD_FIELDS) if (spec[f] !== undefined) errors.push({ field: `spec.${f}`, type: 'FieldValueForbidden', detail: NOT_HONOURED });
  const containers = (spec.containers ?? []) as Spec[];
  if (containers.length === 0) errors.push({ field: 'spec.containers', type: 'FieldValueRequired', detail: '' });
  else if (containers.length > 1) errors.push({ field: 'spec.containers', type: 'FieldValueForbidden', detail: `${NOT_HONOURED} (it runs one container per pod)` });
  const volumeNames = new Map<string, Spec>();
  for (const [i, v] of ((spec.volumes ?? []) as Spec[]).entries()) {
    const field = `spec.volumes[${i}]`;
    if (typeof v.name !== 'string' || !isDnsLabel(v.name)) errors.push({ field: `${field}.name`, type: 'FieldValueInvalid', value: v.name ?? '', detail: DNS1123_LABEL_ERROR });
    else if (volumeNames.has(v.name)) errors.push({ field: `${field}.name`, type: 'FieldValueDuplicate', value: v.name, detail: '' });
    else volumeNames.set(v.name, v);
    const sources = Object.keys(v).filter((k) => k !== 'name');
    if (sources.length !== 1) errors.push({ field, type: 'FieldValueRequired', detail: 'must specify a volume type' });
    else if (sources[0] === 'persistentVolumeClaim') {
      if (typeof v.persistentVolumeClaim.claimName !== 'string' || v.persistentVolumeClaim.claimName === '') {
        errors.push({ field: `${field}.persistentVolumeClaim.claimName`, type: 'FieldValueRequired', detail: '' });
      }
    } else if (sources[0] === 'emptyDir') {
      const size = v.emptyDir.sizeLimit;
      if (size !== undefined && parseQuantity(size) === undefined) errors.push({ field: `${field}.emptyDir.sizeLimit`, type: 'FieldValueInvalid', value: size, detail: QUANTITY_ERROR });
      if (v.emptyDir.medium && v.emptyDir.medium !== 'Memory') errors.push({ field: `${field}.emptyDir.medium`, type: 'FieldValueForbidden', detail: NOT_HONOURED });
    } else if (sources[0] === 'downwardAPI') {
      validateDownwardApi(v.downwardAPI ?? {}, `${field}.downwardAPI`, errors);
    } else if (!(sources[0] === 'projected' && v.name.startsWith('kube-api-access-'))) {
      errors.push({ field: `${field}.${sources[0]}`, type: 'FieldValueForbidden', detail: `${NOT_HONOURED} (volumes are persistentVolumeClaim, emptyDir and downwardAPI)` });
    }
  }
  for (const [i, c] of containers.entries()) validateContainer(c, `spec.containers[${i}]`, volumeNames, errors);
  if (spec.restartPolicy !== undefined && !['Always', 'OnFailure', 'Never'].includes(spec.restartPolicy)) {
    errors.push({ field: 'spec.restartPolicy', type: 'FieldValueNotSupported', value: spec.restartPolicy, detail: 'supported values: "Always", "OnFailure", "Never"' });
  }
  const psc = (spec.securityContext ?? {}) as Spec;
  for (const f of REFUSED_POD_SECURITY_FIELDS) if (psc[f] !== undefined) errors.push({ field: `spec.securityContext.${f}`, type: 'FieldValueForbidden', detail: NOT_HONOURED });
  validateSeccomp(psc.seccompProfile, 'spec.securityContext.seccompProfile', errors);
  if (spec.schedulerName !== undefined && spec.schedulerName !== 'default-scheduler') {
    errors.push({ field: 'spec.schedulerName', type: 'FieldValueForbidden', detail: NOT_HONOURED });
  }
  for (const [i, t] of ((spec.tolerations ?? []) as Spec[]).entries()) {
    if (t.operator === 'Exists' && t.value) errors.push({ field: `spec.tolerations[${i}].operator`, type: 'FieldValueInvalid', value: t.value, detail: 'value must be empty when `operator` is \'Exists\'' });
  }
}

/** An image reference with no tag or digest, or tagged `latest`, defaults to pulling Always. */
const pullsAlways = (image: string) => !image.includes('@') && (!/:[^/]+$/.test(image) || image.endsWith(':latest'));

/**
 * The defaults the API server fills into a new pod (SetDefaults_Pod and the
 * admission plugins every cluster runs: ServiceAccount, DefaultTolerationSeconds).
 * `tokenVolume`: the name of the service-account token volume to add when
 * automount is not turned off.
 */
export function defaultPod(spec: Spec, tokenVolume: string): void {
  spec.restartPolicy ??= 'Always';
  spec.terminationGracePeriodSeconds ??= 30;
  spec.dnsPolicy ??= 'ClusterFirst';
  spec.securityContext ??= {};
  spec.schedulerName ??= 'default-scheduler';
  spec.serviceAccountName ??= 'default';
  spec.serviceAccount = spec.serviceAccountName;
  spec.enableServiceLinks ??= true;
  spec.priority ??= 0;
  spec.preemptionPolicy ??= 'PreemptLowerPriority';
  const tolerations = (spec.tolerations ??= []) as Spec[];
  for (const key of ['node.kubernetes.io/not-ready', 'node.kubernetes.io/unreachable']) {
    if (!tolerations.some((t) => t.key === key)) tolerations.push({ key, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 });
  }
  const automount = spec.automountServiceAccountToken !== false;
  if (automount) {
    spec.volumes ??= [];
    spec.volumes.push({
      name: tokenVolume,
      projected: {
        sources: [
          { serviceAccountToken: { expirationSeconds: 3607, path: 'token' } },
          { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
          { downwardAPI: { items: [{ path: 'namespace', fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' } }] } },
        ],
        defaultMode: 420,
      },
    });
  }
  for (const c of (spec.containers ?? []) as Spec[]) {
    c.terminationMessagePath ??= '/dev/termination-log';
    c.terminationMessagePolicy ??= 'File';
    if (typeof c.image === 'string') c.imagePullPolicy ??= pullsAlways(c.image) ? 'Always' : 'IfNotPresent';
    c.resources ??= {};
    if (c.resources.limits) {
      // Requests default to the limits when only limits are set.
      c.resources.requests = { ...c.resources.limits, ...c.resources.requests };
    }
    if (automount) {
      c.volumeMounts ??= [];
      c.volumeMounts.push({ name: tokenVolume, readOnly: true, mountPath: '/var/run/secrets/kubernetes.io/serviceaccount' });
    }
  }
}

/** The QoS class the API server reports for a pod. */
export function qosClassOf(spec: Spec): 'Guaranteed' | 'Burstable' | 'BestEffort' {
  const containers = (spec.containers ?? []) as Spec[];
  const any = containers.some((c) => Object.keys(c.resources?.requests ?? {}).length + Object.keys(c.resources?.limits ?? {}).length > 0);
  if (!any) return 'BestEffort';
  const guaranteed = containers.every((c) =>
    ['cpu', 'memory'].every((k) => c.resources?.limits?.[k] !== undefined && parseQuantity(c.resources.limits[k]) === parseQuantity(c.resources?.requests?.[k])),
  );
  return guaranteed ? 'Guaranteed' : 'Burstable';
}
