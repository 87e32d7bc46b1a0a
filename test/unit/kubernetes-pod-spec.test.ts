/**
 * The kubernetes backend's pure builders: task pod names are DNS-1123 and
 * differ between tasks, labels are keyed hashes (no tenant or task id on
 * the cluster), and every pod has the hardening and limits the docs
 * promise, whatever the purpose (task or warm pool).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  LABEL,
  buildClaim,
  buildPod,
  claimNames,
  taskLabelValues,
  taskPodName,
  type PodSettings,
} from '../../services/executor/backends/kubernetes/pod-spec.js';

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
    const pod = buildPod(settings, 'berth-x', { kind: 'task', tenant, task, policy: 'p-0123456789abcdef' });
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
    const pod = buildPod(settings, 'berth-x', { kind: 'task', tenant: 't', task: 'abc', policy: 'p', claims: names });
    assert.deepEqual(
      pod.spec?.volumes?.slice(0, 2).map((v) => v.persistentVolumeClaim?.claimName),
      [names.workspace, names.home],
    );
    const claim = buildClaim(settings, names.workspace, { tenant: 't', task: 'abc' }, 'workspace', 'fast');
    assert.deepEqual(claim.spec, { accessModes: ['ReadWriteOnce'], storageClassName: 'fast', resources: { requests: { storage: '10240Mi' } } });
    assert.equal(claim.metadata?.labels?.[LABEL.task], 'abc');
    const warm = buildPod(settings, 'berth-warm-1', { kind: 'warm', policy: 'warm' });
    assert.equal(warm.metadata?.labels?.[LABEL.pool], 'warm');
    assert.equal(warm.metadata?.labels?.[LABEL.task], undefined);
    assert.equal(warm.metadata?.labels?.[LABEL.tenant], undefined);
  });
});
