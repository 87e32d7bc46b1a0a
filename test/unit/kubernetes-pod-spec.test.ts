/**
 * The kubernetes backend's pure builders: task pod names are DNS-1123 and
 * differ between tasks, labels are keyed hashes (no tenant or task id on
 * the cluster), and every pod has the hardening and limits the docs
 * promise, whatever the purpose (task or warm pool).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  ACCOUNT_ANNOTATION,
  LABEL,
  buildClaim,
  buildPod,
  claimNames,
  fixedIdentity,
  taskLabelValues,
  taskPodName,
  type PodIdentity,
  type PodSettings,
} from '../../services/executor/backends/kubernetes/pod-spec.js';
import { restrictedViolations } from '../support/pod-security.js';

const settings: PodSettings = {
  namespace: 'sandboxes',
  image: 'registry.example.com/berth-sandbox:0.1.0',
  executorId: 'exec-a',
  cpu: 1.5,
  memoryMiB: 2048,
  diskMiB: 10240,
  runAsUser: 1000,
  runAsGroup: 1000,
  homeDir: '/home/sandbox',
  readOnlyRoot: true,
  runtimeClass: 'gvisor',
  nodeSelector: { pool: 'sandboxes' },
  tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'sandboxes', effect: 'NoSchedule' }],
  labels: { team: 'agents' },
  annotations: { 'example.com/owner': 'platform' },
};
const FIXED = fixedIdentity(settings)!;
const OWN: PodIdentity = { uid: 1_900_001_234, gid: 1_900_001_234, own: true };
const DNS_1123_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

describe('kubernetes pod spec', () => {
  it('names and labels are DNS-1123 / label-safe, differ per task and tenant, and carry no id in clear', () => {
    const a = taskLabelValues('secret', { tenant: 'Acme Corp/έ', taskId: '../../x y' });
    const b = taskLabelValues('secret', { tenant: 'Acme Corp/έ', taskId: '../../x z' });
    const c = taskLabelValues('secret', { tenant: 'other', taskId: '../../x y' });
    assert.equal(a.tenant, b.tenant);
    assert.notEqual(a.task, b.task);
    assert.notEqual(a.tenant, c.tenant);
    assert.notEqual(a.task, c.task, 'the same task id of another tenant is another task');
    // Keyed: another installation's secret gives other labels.
    assert.notEqual(taskLabelValues('other-secret', { tenant: 'other', taskId: '../../x y' }).task, c.task);
    for (const name of [taskPodName(a.task), claimNames(a.task).workspace, claimNames(a.task).home]) {
      assert.match(name, DNS_1123_LABEL);
    }
    assert.notEqual(taskPodName(a.task), taskPodName(a.task), 'a replacement pod never waits for its terminating predecessor\'s name');
  });

  it('a task pod is hardened, limited and scheduled from config', () => {
    const { tenant, task } = taskLabelValues('s', { tenant: 't', taskId: 'x' });
    const pod = buildPod(settings, 'berth-x', { kind: 'task', tenant, task, policy: 'p-0123456789abcdef' }, FIXED);
    assert.deepEqual(pod.metadata?.labels, {
      team: 'agents',
      [LABEL.managedBy]: 'berth',
      [LABEL.executor]: 'exec-a',
      [LABEL.policy]: 'p-0123456789abcdef',
      [LABEL.tenant]: tenant,
      [LABEL.task]: task,
    });
    assert.deepEqual(pod.metadata?.annotations, { 'example.com/owner': 'platform' });
    const spec = pod.spec!;
    assert.equal(spec.automountServiceAccountToken, false);
    assert.equal(spec.runtimeClassName, 'gvisor');
    assert.deepEqual(spec.nodeSelector, { pool: 'sandboxes' });
    assert.deepEqual(spec.securityContext, {
      runAsNonRoot: true,
      runAsUser: 1000,
      runAsGroup: 1000,
      fsGroup: 1000,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    const c = spec.containers[0]!;
    assert.deepEqual(c.securityContext, {
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      runAsNonRoot: true,
      capabilities: { drop: ['ALL'] },
    });
    const limits = { cpu: '1500m', memory: '2048Mi', 'ephemeral-storage': '10240Mi' };
    assert.deepEqual(c.resources, { requests: limits, limits });
    assert.deepEqual(
      c.volumeMounts?.map((m) => m.mountPath),
      ['/workspace', '/home/sandbox', '/tmp', '/var/tmp'],
    );
    assert.ok(spec.volumes?.every((v) => v.emptyDir !== undefined), 'without claims every volume is an emptyDir');
  });

  it('persistent mode mounts the task\'s claims; a warm pod has no task labels', () => {
    const names = claimNames('abc');
    const pod = buildPod(settings, 'berth-x', { kind: 'task', tenant: 't', task: 'abc', policy: 'p', claims: names }, FIXED);
    assert.deepEqual(
      pod.spec?.volumes?.slice(0, 2).map((v) => v.persistentVolumeClaim?.claimName),
      [names.workspace, names.home],
    );
    const claim = buildClaim(settings, names.workspace, { tenant: 't', task: 'abc' }, 'workspace', 'fast');
    assert.deepEqual(claim.spec, { accessModes: ['ReadWriteOnce'], storageClassName: 'fast', resources: { requests: { storage: '10240Mi' } } });
    assert.equal(claim.metadata?.labels?.[LABEL.task], 'abc');
    const warm = buildPod(settings, 'berth-warm-1', { kind: 'warm', policy: 'warm' }, FIXED);
    assert.equal(warm.metadata?.labels?.[LABEL.pool], 'warm');
    assert.equal(warm.metadata?.labels?.[LABEL.task], undefined);
    assert.equal(warm.metadata?.labels?.[LABEL.tenant], undefined);
  });

  it('a fixed run_as_user is every pod\'s uid, with the image\'s own account files and no uid label', () => {
    assert.deepEqual(FIXED, { uid: 1000, gid: 1000, own: false });
    assert.deepEqual(fixedIdentity({ runAsUser: 2000 }), { uid: 2000, gid: 2000, own: false }, 'run_as_group defaults to the uid');
    assert.equal(fixedIdentity({}), undefined, 'unset: each pod its own uid');
    const pod = buildPod(settings, 'berth-x', { kind: 'task', tenant: 't', task: 'x', policy: 'p' }, FIXED);
    assert.equal(pod.metadata?.labels?.[LABEL.uid], undefined);
    assert.equal(pod.spec?.volumes?.some((v) => v.downwardAPI), false);
    assert.equal(pod.spec?.hostUsers, undefined);
  });

  it('a pod with its own ids runs as them, records them, and names them in /etc/passwd and /etc/group', () => {
    const pod = buildPod({ ...settings, runAsUser: undefined, runAsGroup: undefined } as PodSettings, 'berth-x', { kind: 'task', tenant: 't', task: 'x', policy: 'p' }, OWN);
    const spec = pod.spec!;
    assert.deepEqual(spec.securityContext, {
      runAsNonRoot: true,
      runAsUser: OWN.uid,
      runAsGroup: OWN.gid,
      fsGroup: OWN.gid,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    assert.equal(pod.metadata?.labels?.[LABEL.uid], '1900001234');
    assert.equal(pod.metadata?.annotations?.['example.com/owner'], 'platform', 'the operator\'s annotations stay');
    assert.equal(
      pod.metadata?.annotations?.[ACCOUNT_ANNOTATION.passwd],
      'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nsandbox:x:1900001234:1900001234::/home/sandbox:/bin/bash\n',
    );
    assert.equal(pod.metadata?.annotations?.[ACCOUNT_ANNOTATION.group], 'root:x:0:\nnogroup:x:65534:\nsandbox:x:1900001234:\n');
    assert.deepEqual(spec.volumes?.find((v) => v.name === 'accounts'), {
      name: 'accounts',
      downwardAPI: {
        defaultMode: 0o644,
        items: [
          { path: 'passwd', fieldRef: { fieldPath: "metadata.annotations['berth.dev/passwd']" } },
          { path: 'group', fieldRef: { fieldPath: "metadata.annotations['berth.dev/group']" } },
        ],
      },
    });
    assert.deepEqual(
      spec.containers[0]!.volumeMounts?.filter((m) => m.name === 'accounts'),
      [
        { name: 'accounts', mountPath: '/etc/passwd', subPath: 'passwd', readOnly: true },
        { name: 'accounts', mountPath: '/etc/group', subPath: 'group', readOnly: true },
      ],
    );
    assert.deepEqual(restrictedViolations(spec as object as Record<string, unknown>, pod.metadata?.annotations), [], 'Pod Security restricted admits it');
    const claim = buildClaim(settings, 'berth-x-home', { tenant: 't', task: 'x' }, 'home', '', OWN);
    assert.equal(claim.metadata?.labels?.[LABEL.uid], '1900001234', 'the claim records whose files it holds');
    assert.equal(buildClaim(settings, 'berth-x-home', { tenant: 't', task: 'x' }, 'home', '', FIXED).metadata?.labels?.[LABEL.uid], undefined);
  });

  it('kubernetes.user_namespace gives every pod a user namespace (hostUsers: false)', () => {
    const pod = buildPod({ ...settings, userNamespace: true }, 'berth-warm-1', { kind: 'warm', policy: 'warm' }, { uid: 12345, gid: 12345, own: true });
    assert.equal(pod.spec?.hostUsers, false);
    assert.equal(pod.metadata?.labels?.[LABEL.uid], '12345', 'a warm pod records its uid too: the task that claims it keeps it');
  });
});
