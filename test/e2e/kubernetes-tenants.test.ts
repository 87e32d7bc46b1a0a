/**
 * Two tenants on `berth serve --backend kubernetes`, against the Kubernetes
 * stand-in (a test double of a Kubernetes API server whose pods are
 * containers of the local Docker engine, not a cluster), reached only
 * through KUBECONFIG: tenant B, using the same task id as tenant A, gets a
 * pod of its own, and nothing B does (terminal, read_file of A's paths, the
 * process list, kill of A's session, EndTask) reaches A's pod, and each
 * pod runs as a uid of its own (per-user kernel limits are not shared).
 *
 * The network between the two pods: the stand-in enforces only a policy
 * that leaves a pod no traffic at all, and a task pod's policy allows DNS,
 * so on the stand-in the pods could reach each other. What is checked is
 * what the API shows and a cluster's network plugin enforces: the
 * NetworkPolicy objects exist, select both pods (the default deny and each
 * tenant's egress object), and allow no ingress.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import { taskLabelValues } from '../../services/executor/backends/kubernetes/pod-spec.js';
import { SANDBOX_IMAGE, dockerUnavailableReason, runTaskIds } from '../support/docker-fixtures.js';
import { startKubernetesStandIn, type RunningKubernetesStandIn } from '../support/kubernetes-standin.js';
import { TENANT_A, TENANT_B, startTwoTenants, type TwoTenants } from '../support/two-tenants.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const { task } = runTaskIds();
const NS = 'berth-sandboxes';

interface PodJson {
  metadata: { name: string; labels: Record<string, string> };
}
interface PolicyJson {
  metadata: { name: string };
  spec: {
    podSelector: { matchLabels?: Record<string, string>; matchExpressions?: unknown[] };
    policyTypes: string[];
    ingress?: unknown[];
  };
}

/** Whether a policy's podSelector (matchLabels only, as Berth writes them) selects `pod`. */
function selects(policy: PolicyJson, pod: PodJson): boolean {
  assert.equal(policy.spec.podSelector.matchExpressions, undefined, `${policy.metadata.name}: Berth selects by matchLabels`);
  return Object.entries(policy.spec.podSelector.matchLabels ?? {}).every(([k, v]) => pod.metadata.labels[k] === v);
}

describe('two tenants on berth serve --backend kubernetes (stand-in)', { skip: unavailable, timeout: 600_000 }, () => {
  let k: RunningKubernetesStandIn;
  let t: TwoTenants;

  before(async () => {
    k = await startKubernetesStandIn(['--namespace', NS, '--node-cpu', '64', '--node-memory', '64Gi']);
    t = await startTwoTenants({
      backend: 'kubernetes',
      configLines: [
        'terminal:',
        `  kubernetes_image: ${SANDBOX_IMAGE}`,
        '  container_cpu: 1',
        '  container_memory: 1024',
        '  container_disk: 2048',
        'docker:',
        '  egress: public-only',
        'kubernetes:',
        `  namespace: ${NS}`,
        '  executor_id: e2e-tenants',
      ],
      // Tenant B's policy narrowed: the two pods carry different policy objects.
      tenantFields: { [TENANT_B]: 'network: { egress: none }' },
      env: { KUBECONFIG: k.kubeconfig },
    });
  });

  after(async () => {
    await t?.stop();
    await k?.stopAndCheck();
  });

  const run = async (client: TwoTenants['a'], tool: string, args: object, taskId: string) =>
    JSON.parse(await t.call(client, tool, args, taskId)) as Record<string, unknown>;
  /** The pods of `tenant`'s task, through kubectl. */
  const podsOf = async (tenant: string, taskId: string): Promise<PodJson[]> => {
    const labels = taskLabelValues('', { tenant, taskId });
    const r = await k.kubectl(['-n', NS, 'get', 'pods', '-l', `berth.dev/tenant=${labels.tenant},berth.dev/task=${labels.task}`, '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    return (JSON.parse(r.stdout) as { items: PodJson[] }).items;
  };

  test('the same task id is a different pod, and B reaches nothing of A\'s', async () => {
    const id = task('shared-id');
    const secret = `a-secret-${Date.now()}`;
    assert.equal((await run(t.a, 'write_file', { path: '/workspace/secret.txt', content: secret }, id)).bytes_written, secret.length);
    const bg = await run(t.a, 'terminal', { command: 'echo a-running; sleep 1000', background: true }, id);
    const sessionA = String(bg.session_id);
    const hostA = String((await run(t.a, 'terminal', { command: 'hostname' }, id)).output);

    const hostB = String((await run(t.b, 'terminal', { command: 'hostname' }, id)).output);
    const [podA] = await podsOf(TENANT_A, id);
    const [podB] = await podsOf(TENANT_B, id);
    assert.ok(podA && podB, 'one pod per tenant');
    assert.deepEqual([hostA, hostB], [podA.metadata.name, podB.metadata.name]);
    assert.notEqual(podA.metadata.name, podB.metadata.name);

    // B's view of A's paths and processes is B's own pod.
    const cat = await run(t.b, 'terminal', { command: 'cat /workspace/secret.txt; ps -eo args | grep -c "[s]leep 1000" || true' }, id);
    assert.match(String(cat.output), /No such file or directory\n0$/);
    const read = await run(t.b, 'read_file', { path: '/workspace/secret.txt' }, id);
    assert.doesNotMatch(JSON.stringify(read), new RegExp(secret));
    assert.match(String(read.error), /not found/i);
    const list = await run(t.b, 'process', { action: 'list' }, id);
    assert.doesNotMatch(JSON.stringify(list), new RegExp(sessionA));
    const kill = await run(t.b, 'process', { action: 'kill', session_id: sessionA }, id);
    assert.doesNotMatch(String(kill.status), /killed/);
    assert.equal((await t.b.endTask({ taskId: id })).released, true);

    // A's pod, file and process are untouched.
    assert.deepEqual((await podsOf(TENANT_A, id)).map((p) => p.metadata.name), [podA.metadata.name]);
    assert.equal((await run(t.a, 'terminal', { command: 'cat /workspace/secret.txt; echo; ps -eo args | grep -c "[s]leep 1000"' }, id)).output, `${secret}\n1`);
    const polled = await run(t.a, 'process', { action: 'poll', session_id: sessionA }, id);
    assert.equal(polled.status, 'running');
    await t.a.endTask({ taskId: id });
  });

  test('each tenant\'s pod runs as a uid of its own (kubernetes.task_uids), and its files are that uid\'s', async () => {
    const id = task('uids');
    const who = 'id -u; id -un; touch /workspace/f "$HOME/f"; stat -c %u:%g /workspace/f "$HOME/f"';
    const uids: string[] = [];
    for (const [client, tenant] of [[t.a, TENANT_A], [t.b, TENANT_B]] as const) {
      const r = await run(client, 'terminal', { command: who }, id);
      const [uid, name, ...owners] = String(r.output).split('\n');
      assert.match(uid ?? '', /^19\d{8}$/, JSON.stringify(r));
      assert.deepEqual([name, ...owners], ['sandbox', `${uid}:${uid}`, `${uid}:${uid}`]);
      const [pod] = await podsOf(tenant, id);
      assert.equal(pod?.metadata.labels['berth.dev/uid'], uid, 'the pod records its uid');
      uids.push(uid!);
    }
    assert.notEqual(uids[0], uids[1], 'the same task id of two tenants: two uids');
    await Promise.all([t.a.endTask({ taskId: id }), t.b.endTask({ taskId: id })]);
  });

  test('NetworkPolicy objects select both tenants\' pods and let nothing in (enforcement: the cluster\'s plugin)', async () => {
    const id = task('net');
    await run(t.a, 'terminal', { command: 'true' }, id);
    await run(t.b, 'terminal', { command: 'true' }, id);
    const pods = [...(await podsOf(TENANT_A, id)), ...(await podsOf(TENANT_B, id))];
    assert.equal(pods.length, 2);
    const [podA, podB] = pods as [PodJson, PodJson];
    assert.notEqual(podA.metadata.labels['berth.dev/policy'], podB.metadata.labels['berth.dev/policy'], 'public-only and none are different policies');
    const r = await k.kubectl(['-n', NS, 'get', 'networkpolicies', '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    const policies = (JSON.parse(r.stdout) as { items: PolicyJson[] }).items;
    const deny = policies.find((p) => p.metadata.name === 'berth-default-deny');
    assert.ok(deny, 'the default deny exists');
    assert.deepEqual([...deny.spec.policyTypes].sort(), ['Egress', 'Ingress']);
    for (const pod of pods) {
      const selecting = policies.filter((p) => selects(p, pod));
      assert.ok(selecting.includes(deny), `the default deny selects ${pod.metadata.name}`);
      const own = selecting.find((p) => p.metadata.name === `berth-egress-${pod.metadata.labels['berth.dev/policy']}`);
      assert.ok(own, `the egress object of ${pod.metadata.name}'s policy exists and selects it`);
      // NetworkPolicies add up: no object selecting a task pod allows any ingress, so neither pod can open a connection to the other.
      for (const p of selecting) {
        assert.ok(p.spec.policyTypes.includes('Ingress'), `${p.metadata.name} covers ingress`);
        assert.deepEqual(p.spec.ingress ?? [], [], `${p.metadata.name} allows no ingress`);
      }
    }
    await Promise.all([t.a.endTask({ taskId: id }), t.b.endTask({ taskId: id })]);
  });
});
