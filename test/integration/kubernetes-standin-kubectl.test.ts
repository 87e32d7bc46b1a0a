/**
 * The Kubernetes stand-in (a test double of a Kubernetes API server on the
 * local Docker engine) kept honest by an independent client: this machine's
 * kubectl, reaching it only through the kubeconfig the stand-in writes, as
 * it reaches a cluster. One stand-in serves every test of this file.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { dockerUnavailableReason, SANDBOX_IMAGE } from '../support/docker-fixtures.js';
import { startKubernetesStandIn, type RunningKubernetesStandIn } from '../support/kubernetes-standin.js';

const docker = new Dockerode();
const skip = await dockerUnavailableReason(docker);
const NS = 'berth-sandboxes';

/** A pod manifest as a backend would write it: non-root, no token, read-only root, all capabilities dropped. */
function podYaml(name: string, labels: Record<string, string>, extra = ''): string {
  return `apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  labels: ${JSON.stringify(labels)}
spec:
  automountServiceAccountToken: false
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 1000
    runAsGroup: 1000
    runAsNonRoot: true
    fsGroup: 1000
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: sandbox
    image: ${SANDBOX_IMAGE}
    command: [sleep, infinity]
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
    resources:
      limits: {cpu: 500m, memory: 256Mi}
${extra}`;
}

describe('Kubernetes stand-in, driven by kubectl', { skip, timeout: 600_000 }, () => {
  let k: RunningKubernetesStandIn;
  const kubectl = (args: readonly string[], options?: Parameters<RunningKubernetesStandIn['kubectl']>[1]) => k.kubectl(args, options);
  const ok = async (args: readonly string[], input?: string) => {
    const r = await kubectl(args, input === undefined ? {} : { input });
    assert.equal(r.code, 0, `kubectl ${args.join(' ')} failed:\n${r.stderr}\nstand-in stderr:\n${k.stderr()}`);
    return r.stdout;
  };

  before(async () => {
    k = await startKubernetesStandIn(['--namespace', NS, '--deny', 'create:pods/exec', '--deny', 'delete:networkpolicies']);
    await ok(['apply', '-f', '-'], podYaml('task-a', { 'berth.dev/tenant': 't1', 'berth.dev/task': 'a' }) + podYaml('task-b', { 'berth.dev/tenant': 't2', 'berth.dev/task': 'b' }).replace(/^/, '---\n'));
    await ok(['wait', '--for=condition=Ready', 'pod/task-a', 'pod/task-b', '--timeout=60s']);
  });

  after(async () => {
    await k?.stopAndCheck();
  });

  it('writes a kubeconfig kubectl uses as it uses a cluster: https with the CA, a bearer token, a default namespace', async () => {
    const view = JSON.parse(await ok(['config', 'view', '--raw', '-o', 'json'])) as { clusters: { cluster: Record<string, string> }[]; contexts: { context: { namespace: string } }[] };
    assert.match(view.clusters[0]!.cluster.server!, /^https:\/\/127\.0\.0\.1:\d+$/);
    assert.ok(view.clusters[0]!.cluster['certificate-authority-data'], 'no CA in the kubeconfig');
    assert.equal(view.clusters[0]!.cluster['insecure-skip-tls-verify'], undefined);
    assert.equal(view.contexts[0]!.context.namespace, NS);
    assert.match(await ok(['version']), /Server Version: v1\.32\.\d+/);
    const stranger = await kubectl(['--token', 'not-a-token', 'get', 'pods']);
    assert.notEqual(stranger.code, 0);
    assert.match(stranger.stderr, /You must be logged in to the server \(Unauthorized\)/);
  });

  it('get pods -l selects by label and prints the server-side table', async () => {
    const out = await ok(['get', 'pods', '-l', 'berth.dev/tenant=t1']);
    assert.match(out, /^NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE\n/);
    assert.match(out, /^task-a\s+1\/1\s+Running\s+0\s+\S+$/m);
    assert.doesNotMatch(out, /task-b/);
    const names = await ok(['get', 'pods', '-l', 'berth.dev/tenant in (t1,t2),berth.dev/task!=a', '-o', 'jsonpath={.items[*].metadata.name}']);
    assert.equal(names, 'task-b');
    const none = await kubectl(['get', 'pods', '-l', 'berth.dev/tenant=nobody']);
    assert.equal(none.code, 0);
    assert.match(none.stderr, /No resources found in berth-sandboxes namespace\./);
  });

  it('runs the pod as its spec says: user, read-only root, no capabilities, memory limit', async () => {
    const out = await ok(['exec', 'task-a', '--', 'sh', '-c', 'id -u; id -g; touch /x 2>&1; grep CapEff /proc/self/status; cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes']);
    const lines = out.trim().split('\n');
    assert.equal(lines[0], '1000');
    assert.equal(lines[1], '1000');
    assert.match(lines[2]!, /Read-only file system/);
    assert.match(lines[3]!, /CapEff:\s+0000000000000000/);
    assert.equal(lines[4], String(256 * 1024 * 1024));
  });

  it('exec passes stdin to the command, keeps stdout and stderr apart, and returns its exit code', async () => {
    const r = await kubectl(['exec', '-i', 'task-a', '--', 'sh', '-c', 'cat; echo to-stderr >&2; exit 7'], { input: 'line one\nline two\n' });
    assert.equal(r.code, 7, r.stderr);
    assert.equal(r.stdout, 'line one\nline two\n');
    assert.match(r.stderr, /to-stderr/);
    assert.match(r.stderr, /command terminated with exit code 7/);
    const big = 'x'.repeat(300_000);
    const echo = await kubectl(['exec', '-i', 'task-a', '--', 'wc', '-c'], { input: big });
    assert.equal(echo.stdout.trim(), String(big.length), 'stdin was cut');
  });

  it('refuses what RBAC denies with its Forbidden message, and answers 404 for what is not there', async () => {
    const denied = await kubectl(['exec', 'task-a', '--', 'true'], { context: 'kubernetes-standin-restricted' });
    assert.notEqual(denied.code, 0);
    assert.match(denied.stderr, /pods "task-a" is forbidden: User "standin-restricted" cannot create resource "pods\/exec" in API group "" in the namespace "berth-sandboxes"/);
    const allowed = await kubectl(['get', 'pod', 'task-a', '-o', 'name'], { context: 'kubernetes-standin-restricted' });
    assert.equal(allowed.stdout.trim(), 'pod/task-a');
    const missing = await kubectl(['get', 'pod', 'nosuch']);
    assert.match(missing.stderr, /Error from server \(NotFound\): pods "nosuch" not found/);
    const otherKind = await kubectl(['get', 'deployments']);
    assert.notEqual(otherKind.code, 0);
    assert.match(otherKind.stderr, /the server doesn't have a resource type "deployments"/);
  });

  it('rejects unknown fields (kubectl sends fieldValidation=Strict) and refuses what it cannot honour', async () => {
    const typo = await kubectl(['apply', '-f', '-'], { input: podYaml('typo', { a: 'b' }).replace('command:', 'comand:') });
    assert.notEqual(typo.code, 0);
    assert.match(typo.stderr, /strict decoding error: unknown field "spec\.containers\[0\]\.comand"/);
    const host = await kubectl(['apply', '-f', '-'], { input: podYaml('host', { a: 'b' }).replace('  restartPolicy: Never', '  restartPolicy: Never\n  hostNetwork: true') });
    assert.notEqual(host.code, 0);
    assert.match(host.stderr, /The Pod "host" is invalid: spec\.hostNetwork: Forbidden: not supported by the Kubernetes stand-in/);
    const badName = await kubectl(['run', 'Bad_Name', `--image=${SANDBOX_IMAGE}`]);
    assert.match(badName.stderr, /Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain/);
  });

  it('applies a NetworkPolicy, shows it as JSON, applies a change as a patch, and isolates the pods it fences in', async () => {
    const policy = (egress: string) => `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: isolate-t1
spec:
  podSelector:
    matchLabels: {berth.dev/tenant: t1}
  policyTypes: [Ingress, Egress]
${egress}`;
    assert.match(await ok(['apply', '-f', '-'], policy('')), /networkpolicy\.networking\.k8s\.io\/isolate-t1 created/);
    const stored = JSON.parse(await ok(['get', 'networkpolicy', 'isolate-t1', '-o', 'json'])) as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
    assert.equal(stored.apiVersion, 'networking.k8s.io/v1');
    assert.equal(stored.kind, 'NetworkPolicy');
    assert.match(stored.metadata.uid, /^[0-9a-f-]{36}$/);
    assert.match(stored.metadata.resourceVersion, /^\d+$/);
    assert.deepEqual(stored.spec, { podSelector: { matchLabels: { 'berth.dev/tenant': 't1' } }, policyTypes: ['Ingress', 'Egress'] });
    // Fully isolated: the stand-in takes the pod off its network; the other tenant's pod keeps it.
    const interfaces = async (pod: string) => (await ok(['exec', pod, '--', 'ls', '/sys/class/net'])).split('\n').filter(Boolean);
    assert.deepEqual(await interfaces('task-a'), ['lo']);
    assert.ok((await interfaces('task-b')).length > 1);
    assert.match(await ok(['apply', '-f', '-'], policy('  egress:\n  - ports: [{port: 53, protocol: UDP}]\n')), /isolate-t1 configured/);
    const changed = JSON.parse(await ok(['get', 'netpol', 'isolate-t1', '-o', 'json'])) as { spec: { egress: unknown }; metadata: { generation: number } };
    assert.deepEqual(changed.spec.egress, [{ ports: [{ port: 53, protocol: 'UDP' }] }]);
    assert.equal(changed.metadata.generation, 2);
    const denied = await kubectl(['delete', 'netpol', 'isolate-t1'], { context: 'kubernetes-standin-restricted' });
    assert.match(denied.stderr, /networkpolicies\.networking\.k8s\.io "isolate-t1" is forbidden: User "standin-restricted" cannot delete resource "networkpolicies" in API group "networking\.k8s\.io"/);
    assert.match(await ok(['delete', 'netpol', 'isolate-t1']), /networkpolicy\.networking\.k8s\.io "isolate-t1" deleted/);
  });

  it('shows image-pull and scheduling failures with the reasons a cluster gives', async () => {
    await ok(['run', 'no-image', '--image=berth-no-such-image:1', '--restart=Never']);
    await ok(['run', 'no-node', `--image=${SANDBOX_IMAGE}`, '--restart=Never', '--overrides={"spec":{"nodeSelector":{"pool":"gpu"}}}']);
    await ok(['wait', '--for=jsonpath={.status.containerStatuses[0].state.waiting.reason}=ImagePullBackOff', 'pod/no-image', '--timeout=30s']);
    await ok(['wait', '--for=condition=PodScheduled=false', 'pod/no-node', '--timeout=30s']);
    const message = await ok(['get', 'pod', 'no-node', '-o', 'jsonpath={.status.conditions[?(@.type=="PodScheduled")].message}']);
    assert.equal(message, "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.");
    const table = await ok(['get', 'pods', 'no-image', 'no-node']);
    assert.match(table, /no-image\s+0\/1\s+(ImagePullBackOff|ErrImagePull)\s/);
    assert.match(table, /no-node\s+0\/1\s+Pending\s/);
    await ok(['delete', 'pod', 'no-image', 'no-node']);
  });

  it('a finished pod is Succeeded or Failed, with its container terminated and its exit code', async () => {
    const finishing = (name: string, code: number) =>
      podYaml(name, { 'berth.dev/task': name }).replace('command: [sleep, infinity]', `command: [sh, -c, 'exit ${code}']`);
    await ok(['apply', '-f', '-'], finishing('ends-well', 0) + '---\n' + finishing('ends-badly', 3));
    await ok(['wait', '--for=jsonpath={.status.phase}=Succeeded', 'pod/ends-well', '--timeout=60s']);
    await ok(['wait', '--for=jsonpath={.status.phase}=Failed', 'pod/ends-badly', '--timeout=60s']);
    const state = (name: string) => ok(['get', 'pod', name, '-o', 'jsonpath={.status.containerStatuses[0].state.terminated.reason} {.status.containerStatuses[0].state.terminated.exitCode}']);
    assert.equal(await state('ends-well'), 'Completed 0');
    assert.equal(await state('ends-badly'), 'Error 3');
    const table = await ok(['get', 'pods', 'ends-well', 'ends-badly']);
    assert.match(table, /^ends-well\s+0\/1\s+Completed\s+0\s/m);
    assert.match(table, /^ends-badly\s+0\/1\s+Error\s+0\s/m);
    const refused = await kubectl(['exec', 'ends-well', '--', 'true']);
    assert.match(refused.stderr, /cannot exec into a container in a completed pod; current phase is Succeeded/);
    await ok(['delete', 'pod', 'ends-well', 'ends-badly']);
  });

  it('streams changes to get -w, and delete stops the container within the grace period', async () => {
    await ok(['apply', '-f', '-'], podYaml('doomed', { 'berth.dev/task': 'doomed' }));
    await ok(['wait', '--for=condition=Ready', 'pod/doomed', '--timeout=60s']);
    const watching = kubectl(['get', 'pods', '-l', 'berth.dev/task=doomed', '-w'], { stopAfterMs: 8000 });
    await new Promise((r) => setTimeout(r, 1000));
    assert.match(await ok(['delete', 'pod', 'doomed']), /pod "doomed" deleted/);
    const watched = await watching;
    assert.match(watched.stdout, /^doomed\s+1\/1\s+Running\s/m);
    assert.match(watched.stdout, /^doomed\s+\d\/1\s+Terminating\s/m);
    const gone = await kubectl(['get', 'pod', 'doomed']);
    assert.match(gone.stderr, /pods "doomed" not found/);
    const left = await docker.listContainers({ all: true, filters: { label: [k.label, `berth.standin.kubernetes.pod=${NS}/doomed`] } });
    assert.deepEqual(left, []);
  });

  it('keeps a PersistentVolumeClaim across pods and deletes it once no pod uses it', async () => {
    await ok(['apply', '-f', '-'], 'apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: ws-a}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 1Gi}}\n');
    await ok(['wait', '--for=jsonpath={.status.phase}=Bound', 'pvc/ws-a', '--timeout=30s']);
    const withClaim = (name: string) =>
      podYaml(name, { 'berth.dev/task': name }, '    volumeMounts: [{name: ws, mountPath: /workspace}]\n  volumes: [{name: ws, persistentVolumeClaim: {claimName: ws-a}}]\n');
    await ok(['apply', '-f', '-'], withClaim('writer'));
    await ok(['wait', '--for=condition=Ready', 'pod/writer', '--timeout=60s']);
    await ok(['exec', 'writer', '--', 'sh', '-c', 'echo kept > /workspace/note']);
    await ok(['delete', 'pod', 'writer']);
    await ok(['apply', '-f', '-'], withClaim('reader'));
    await ok(['wait', '--for=condition=Ready', 'pod/reader', '--timeout=60s']);
    assert.equal(await ok(['exec', 'reader', '--', 'cat', '/workspace/note']), 'kept\n');
    await ok(['delete', 'pvc', 'ws-a', '--wait=false']);
    assert.match(await ok(['get', 'pvc', 'ws-a']), /ws-a\s+Terminating\s/);
    await ok(['delete', 'pod', 'reader']);
    await ok(['wait', '--for=delete', 'pvc/ws-a', '--timeout=30s']);
    const { Volumes: volumes } = await docker.listVolumes({ filters: { label: [k.label] } });
    assert.deepEqual((volumes ?? []).map((v) => v.Name), []);
  });
});
