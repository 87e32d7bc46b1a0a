/**
 * Pure builders for the kubernetes backend's objects: names, labels, the
 * task pod and its claims. No I/O, so the hardening is pinned by tests.
 *
 * Every task pod:
 * - runs as a non-root uid and gid of its own (pod-uids.ts: one of
 *   `kubernetes.task_uids`, recorded in its `berth.dev/uid` label), or as
 *   the fixed `kubernetes.run_as_user` / `run_as_group` when set
 *   (`runAsNonRoot`), with `fsGroup` so its volumes are the task's; with
 *   its own ids, /etc/passwd and /etc/group name them (the task's account
 *   `sandbox`, from the pod's annotations through a downwardAPI volume),
 *   and `kubernetes.user_namespace` gives it a user namespace
 *   (`hostUsers: false`);
 * - has no service-account token (`automountServiceAccountToken: false`),
 *   seccomp `RuntimeDefault`, every capability dropped, no privilege
 *   escalation, and a read-only root file system unless
 *   `kubernetes.read_only_root` is off: /workspace, the home directory, /tmp
 *   and /var/tmp are volumes (emptyDir, or the task's claims in persistent
 *   mode);
 * - requests and limits cpu and memory from `terminal.container_cpu` /
 *   `container_memory`, and `ephemeral-storage` from `container_disk`;
 * - carries `runtimeClassName`, node selector, tolerations, extra labels and
 *   annotations from config;
 * - runs `sleep infinity`: the exec agent (started over `pods/exec`) is the
 *   one that runs commands, and it reaps what they leave (a subreaper).
 *
 * Names: a task's pod is `berth-<hash>-<random>`, its claims
 * `berth-<hash>-workspace` and `-home`, where the hash is a keyed hash of
 * tenant and task (so different tasks never share one, and a tenant's name
 * is not readable off the cluster). Pods are found by label, not by name: a
 * warm-pool pod keeps its own name when a task claims it.
 */
import { createHmac, randomBytes } from 'node:crypto';
import type { V1PersistentVolumeClaim, V1Pod, V1Toleration, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import type { TaskKey } from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import { taskAccounts, type AccountFiles, type TaskIdentity } from '../shared/task-uid-range.js';

export const LABEL = {
  managedBy: 'app.kubernetes.io/managed-by',
  executor: 'berth.dev/executor',
  tenant: 'berth.dev/tenant',
  task: 'berth.dev/task',
  policy: 'berth.dev/policy',
  /** `warm` on warm-pool pods until a task claims one. */
  pool: 'berth.dev/pool',
  /** On claims: `workspace` or `home`. */
  volume: 'berth.dev/volume',
  /** On pods and claims with a task's own ids (pod-uids.ts): the uid, also the gid. */
  uid: 'berth.dev/uid',
} as const;

/** Annotations of a pod with its own ids: its /etc/passwd and /etc/group (read through a downwardAPI volume). */
export const ACCOUNT_ANNOTATION = { passwd: 'berth.dev/passwd', group: 'berth.dev/group' } as const;

/**
 * The accounts a pod with its own ids sees besides the task's: the image's
 * own files cannot be read before the pod runs, so root and nobody stand
 * for them (files of other accounts of the image show their numeric ids).
 */
const BASE_ACCOUNTS: AccountFiles = {
  passwd: 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n',
  group: 'root:x:0:\nnogroup:x:65534:\n',
};

/** The pod's one container. */
export const CONTAINER_NAME = 'sandbox';
/** Where tasks start, a volume of its own. */
export const WORKSPACE_DIR = '/workspace';

/** A label value of `text`'s keyed hash: 40 hex digits, stable for one key. */
export function labelHash(secret: string, text: string): string {
  return createHmac('sha256', `berth-kubernetes-labels:${secret}`).update(text).digest('hex').slice(0, 40);
}

/** The task's labels (tenant and task as keyed hashes); `secret` keys the hash. */
export function taskLabelValues(secret: string, key: TaskKey): { tenant: string; task: string } {
  return { tenant: labelHash(secret, `tenant:${key.tenant}`), task: labelHash(secret, `task:${taskKeyString(key)}`) };
}

/** A new name for a task's pod: DNS-1123, 52 characters, unique per start (a replaced pod may still be terminating). */
export function taskPodName(taskLabel: string): string {
  return `berth-${taskLabel}-${randomBytes(3).toString('hex').slice(0, 5)}`;
}

/** A new warm-pool pod's name. */
export function warmPodName(): string {
  return `berth-warm-${randomBytes(8).toString('hex')}`;
}

/** The task's claims in persistent mode. */
export function claimNames(taskLabel: string): { workspace: string; home: string } {
  return { workspace: `berth-${taskLabel}-workspace`, home: `berth-${taskLabel}-home` };
}

/** Label selector of `labels` (`k=v,k2=v2`). */
export function selectorOf(labels: Readonly<Record<string, string>>): string {
  return Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
}

export interface PodSettings {
  readonly namespace: string;
  readonly image: string;
  readonly executorId: string;
  readonly cpu: number;
  readonly memoryMiB: number;
  readonly diskMiB: number;
  /** `kubernetes.run_as_user`: every pod's fixed uid; unset: each pod its own ({@link PodIdentity}). */
  readonly runAsUser?: number;
  /** `kubernetes.run_as_group`: with a fixed uid, the gid (default: the uid). */
  readonly runAsGroup?: number;
  /** `kubernetes.user_namespace`: `hostUsers: false`. */
  readonly userNamespace?: boolean;
  readonly homeDir: string;
  readonly readOnlyRoot: boolean;
  readonly runtimeClass?: string;
  readonly nodeSelector?: Readonly<Record<string, string>>;
  readonly tolerations?: readonly V1Toleration[];
  readonly labels?: Readonly<Record<string, string>>;
  readonly annotations?: Readonly<Record<string, string>>;
  /** Variables set in the pod (never secrets: `kubectl get pod -o yaml` shows them). */
  readonly env?: Readonly<Record<string, string>>;
}

/** What a pod is for: a task's (with its labels and, persistent, its claims) or the warm pool's. */
export type PodPurpose =
  | { readonly kind: 'task'; readonly tenant: string; readonly task: string; readonly policy: string; readonly claims?: { workspace: string; home: string } }
  | { readonly kind: 'warm'; readonly policy: string };

/** The ids a pod runs as; `own`: the task's own (pod-uids.ts), labelled and named in the pod's account files. */
export interface PodIdentity extends TaskIdentity {
  readonly own: boolean;
}

/** The identity of every pod under a fixed `kubernetes.run_as_user`, else undefined. */
export function fixedIdentity(s: Pick<PodSettings, 'runAsUser' | 'runAsGroup'>): PodIdentity | undefined {
  return s.runAsUser === undefined ? undefined : { uid: s.runAsUser, gid: s.runAsGroup ?? s.runAsUser, own: false };
}

/** The labels every object of this executor carries. */
export function executorLabels(s: Pick<PodSettings, 'executorId' | 'labels'>): Record<string, string> {
  return { ...(s.labels ?? {}), [LABEL.managedBy]: 'berth', [LABEL.executor]: s.executorId };
}

/** The labels of a pod for `purpose`. */
export function podLabels(s: PodSettings, purpose: PodPurpose): Record<string, string> {
  const base = { ...executorLabels(s), [LABEL.policy]: purpose.policy };
  return purpose.kind === 'task' ? { ...base, [LABEL.tenant]: purpose.tenant, [LABEL.task]: purpose.task } : { ...base, [LABEL.pool]: 'warm' };
}

/** Kubernetes' quantity of `cpu` cores, in millicores. */
export function cpuQuantity(cpu: number): string {
  return `${Math.max(1, Math.round(cpu * 1000))}m`;
}

/** The pod of `purpose`, named `name`, running as `identity`. */
export function buildPod(s: PodSettings, name: string, purpose: PodPurpose, identity: PodIdentity): V1Pod {
  const claims = purpose.kind === 'task' ? purpose.claims : undefined;
  const volume = (volumeName: string, claim: string | undefined): V1Volume =>
    claim ? { name: volumeName, persistentVolumeClaim: { claimName: claim } } : { name: volumeName, emptyDir: {} };
  const volumes: V1Volume[] = [
    volume('workspace', claims?.workspace),
    volume('home', claims?.home),
    { name: 'tmp', emptyDir: {} },
    { name: 'var-tmp', emptyDir: {} },
  ];
  const mounts: V1VolumeMount[] = [
    { name: 'workspace', mountPath: WORKSPACE_DIR },
    { name: 'home', mountPath: s.homeDir },
    { name: 'tmp', mountPath: '/tmp' },
    { name: 'var-tmp', mountPath: '/var/tmp' },
  ];
  const annotations: Record<string, string> = { ...(s.annotations ?? {}) };
  const labels = podLabels(s, purpose);
  if (identity.own) {
    const accounts = taskAccounts(BASE_ACCOUNTS, identity, s.homeDir);
    labels[LABEL.uid] = String(identity.uid);
    annotations[ACCOUNT_ANNOTATION.passwd] = accounts.passwd;
    annotations[ACCOUNT_ANNOTATION.group] = accounts.group;
    const item = (file: 'passwd' | 'group') => ({ path: file, fieldRef: { fieldPath: `metadata.annotations['${ACCOUNT_ANNOTATION[file]}']` } });
    volumes.push({ name: 'accounts', downwardAPI: { defaultMode: 0o644, items: [item('passwd'), item('group')] } });
    mounts.push(
      { name: 'accounts', mountPath: '/etc/passwd', subPath: 'passwd', readOnly: true },
      { name: 'accounts', mountPath: '/etc/group', subPath: 'group', readOnly: true },
    );
  }
  const resources = {
    cpu: cpuQuantity(s.cpu),
    memory: `${s.memoryMiB}Mi`,
    'ephemeral-storage': `${s.diskMiB}Mi`,
  };
  const env = { ...(s.env ?? {}), HOME: s.homeDir };
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace: s.namespace,
      labels,
      ...(Object.keys(annotations).length > 0 ? { annotations } : {}),
    },
    spec: {
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 2,
      ...(s.runtimeClass ? { runtimeClassName: s.runtimeClass } : {}),
      ...(s.userNamespace ? { hostUsers: false } : {}),
      ...(s.nodeSelector && Object.keys(s.nodeSelector).length > 0 ? { nodeSelector: { ...s.nodeSelector } } : {}),
      ...(s.tolerations && s.tolerations.length > 0 ? { tolerations: s.tolerations.map((t) => ({ ...t })) } : {}),
      securityContext: {
        runAsNonRoot: true,
        runAsUser: identity.uid,
        runAsGroup: identity.gid,
        fsGroup: identity.gid,
        seccompProfile: { type: 'RuntimeDefault' },
      },
      containers: [
        {
          name: CONTAINER_NAME,
          image: s.image,
          imagePullPolicy: 'IfNotPresent',
          command: ['sleep', 'infinity'],
          workingDir: WORKSPACE_DIR,
          env: Object.entries(env).map(([k, v]) => ({ name: k, value: v })),
          resources: { requests: { ...resources }, limits: { ...resources } },
          securityContext: {
            allowPrivilegeEscalation: false,
            readOnlyRootFilesystem: s.readOnlyRoot,
            runAsNonRoot: true,
            capabilities: { drop: ['ALL'] },
          },
          volumeMounts: mounts,
        },
      ],
      volumes,
    },
  };
}

/** A task's claim (persistent mode): ReadWriteOnce, `container_disk` MiB. */
export function buildClaim(
  s: Pick<PodSettings, 'executorId' | 'labels' | 'diskMiB' | 'namespace'>,
  name: string,
  task: { tenant: string; task: string },
  role: 'workspace' | 'home',
  storageClass: string,
  identity?: PodIdentity,
): V1PersistentVolumeClaim {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: {
      name,
      namespace: s.namespace,
      labels: {
        ...executorLabels(s),
        [LABEL.tenant]: task.tenant,
        [LABEL.task]: task.task,
        [LABEL.volume]: role,
        // The record a replaced pod takes its uid from: the files here are that uid's.
        ...(identity?.own ? { [LABEL.uid]: String(identity.uid) } : {}),
      },
    },
    spec: {
      accessModes: ['ReadWriteOnce'],
      ...(storageClass ? { storageClassName: storageClass } : {}),
      resources: { requests: { storage: `${s.diskMiB}Mi` } },
    },
  };
}
