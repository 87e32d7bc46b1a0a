/**
 * The Pod Security Standards' `restricted` profile (Kubernetes v1.32, the
 * baseline controls included) as a check of a pod spec: what the Pod
 * Security admission of a namespace labelled
 * `pod-security.kubernetes.io/enforce: restricted` would refuse, one
 * message per violation naming the field. Written from the published
 * standard (kubernetes.io/docs/concepts/security/pod-security-standards),
 * for manifests and pod specs no cluster admits here.
 */

/* eslint-disable @typescript-eslint/no-explicit-any -- pod specs as plain JSON */
type Obj = Record<string, any>;

/** Volume types the restricted profile allows. */
const RESTRICTED_VOLUMES = ['configMap', 'csi', 'downwardAPI', 'emptyDir', 'ephemeral', 'persistentVolumeClaim', 'projected', 'secret'];
/** Sysctls the baseline profile allows. */
const SAFE_SYSCTLS = [
  'kernel.shm_rmid_forced',
  'net.ipv4.ip_local_port_range',
  'net.ipv4.ip_unprivileged_port_start',
  'net.ipv4.tcp_syncookies',
  'net.ipv4.ping_group_range',
  'net.ipv4.ip_local_reserved_ports',
  'net.ipv4.tcp_keepalive_time',
  'net.ipv4.tcp_fin_timeout',
  'net.ipv4.tcp_keepalive_intvl',
  'net.ipv4.tcp_keepalive_probes',
];
const SELINUX_TYPES = ['', 'container_t', 'container_init_t', 'container_kvm_t', 'container_engine_t'];

/** The violations of the restricted profile in `spec` (a PodSpec); empty when it would be admitted. */
export function restrictedViolations(spec: Obj, annotations: Obj = {}): string[] {
  const out: string[] = [];
  const pod = (spec.securityContext ?? {}) as Obj;
  const containers: Array<[string, Obj]> = (['initContainers', 'containers', 'ephemeralContainers'] as const).flatMap((list) =>
    ((spec[list] ?? []) as Obj[]).map((c, i): [string, Obj] => [`spec.${list}[${i}]`, c]),
  );

  // Baseline.
  for (const key of ['hostNetwork', 'hostPID', 'hostIPC']) if (spec[key] === true) out.push(`spec.${key}: host namespaces are forbidden`);
  if (pod.windowsOptions?.hostProcess === true) out.push('spec.securityContext.windowsOptions.hostProcess: forbidden');
  for (const [i, v] of ((spec.volumes ?? []) as Obj[]).entries()) {
    const type = Object.keys(v).find((k) => k !== 'name');
    if (type === 'hostPath') out.push(`spec.volumes[${i}].hostPath: forbidden`);
    else if (type === undefined || !RESTRICTED_VOLUMES.includes(type)) out.push(`spec.volumes[${i}]: volume type ${type ?? '(none)'} is not allowed`);
  }
  for (const [i, s] of ((pod.sysctls ?? []) as Obj[]).entries()) {
    if (!SAFE_SYSCTLS.includes(s.name)) out.push(`spec.securityContext.sysctls[${i}]: ${s.name} is not a safe sysctl`);
  }
  for (const [key, value] of Object.entries(annotations)) {
    if (key.startsWith('container.apparmor.security.beta.kubernetes.io/') && value !== 'runtime/default' && !String(value).startsWith('localhost/')) {
      out.push(`metadata.annotations[${key}]: AppArmor ${String(value)} is forbidden`);
    }
  }
  const contexts: Array<[string, Obj]> = [['spec.securityContext', pod], ...containers.map(([at, c]): [string, Obj] => [`${at}.securityContext`, (c.securityContext ?? {}) as Obj])];
  for (const [at, sc] of contexts) {
    if (sc.appArmorProfile && !['RuntimeDefault', 'Localhost'].includes(sc.appArmorProfile.type)) out.push(`${at}.appArmorProfile.type: ${sc.appArmorProfile.type} is forbidden`);
    const se = sc.seLinuxOptions;
    if (se && (!SELINUX_TYPES.includes(se.type ?? '') || se.user || se.role)) out.push(`${at}.seLinuxOptions: custom SELinux options are forbidden`);
    if (sc.runAsUser === 0) out.push(`${at}.runAsUser: 0 (root) is forbidden`);
    if (sc.seccompProfile?.type === 'Unconfined') out.push(`${at}.seccompProfile.type: Unconfined is forbidden`);
    if (sc.windowsOptions?.hostProcess === true) out.push(`${at}.windowsOptions.hostProcess: forbidden`);
  }

  for (const [at, c] of containers) {
    const sc = (c.securityContext ?? {}) as Obj;
    if (sc.privileged === true) out.push(`${at}.securityContext.privileged: forbidden`);
    if (sc.procMount !== undefined && sc.procMount !== 'Default') out.push(`${at}.securityContext.procMount: ${sc.procMount} is forbidden`);
    for (const [j, p] of ((c.ports ?? []) as Obj[]).entries()) if (p.hostPort) out.push(`${at}.ports[${j}].hostPort: forbidden`);
    // Restricted.
    if (sc.allowPrivilegeEscalation !== false) out.push(`${at}.securityContext.allowPrivilegeEscalation: must be false`);
    const drop = (sc.capabilities?.drop ?? []) as string[];
    if (!drop.includes('ALL')) out.push(`${at}.securityContext.capabilities.drop: must include ALL`);
    for (const cap of (sc.capabilities?.add ?? []) as string[]) if (cap !== 'NET_BIND_SERVICE') out.push(`${at}.securityContext.capabilities.add: ${cap} is forbidden`);
    const nonRoot = sc.runAsNonRoot ?? pod.runAsNonRoot;
    if (nonRoot !== true) out.push(`${at}.securityContext.runAsNonRoot: must be true (here or in spec.securityContext)`);
    const seccomp = sc.seccompProfile?.type ?? pod.seccompProfile?.type;
    if (seccomp !== 'RuntimeDefault' && seccomp !== 'Localhost') out.push(`${at}.securityContext.seccompProfile.type: must be RuntimeDefault or Localhost (here or in spec.securityContext)`);
  }
  return out;
}
