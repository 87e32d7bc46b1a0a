/**
 * The Kubernetes stand-in (a test double of a Kubernetes API server on the
 * local Docker engine) driven by the pinned @kubernetes/client-node, the
 * client the kubernetes backend uses, loaded from the kubeconfig the
 * stand-in writes: CoreV1Api and NetworkingV1Api calls, the API server's
 * error Status objects, a watch that follows a relabelling, and Exec over
 * v5.channel.k8s.io (stdin half-closed, output and status intact) and over
 * v4 when that is all a client offers. One stand-in serves the whole file.
 */
import assert from 'node:assert/strict';
import { request } from 'node:https';
import { PassThrough } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import type { V1Pod, V1Status } from '@kubernetes/client-node';
import type * as K8s from '@kubernetes/client-node';
// Not re-exported by the package index; the v4 test builds its own handler with it.
import type { WebSocketInterface } from '@kubernetes/client-node/dist/web-socket-handler.js';
import Dockerode from 'dockerode';
import WebSocket from 'ws';
import { dockerUnavailableReason, SANDBOX_IMAGE } from '../support/docker-fixtures.js';
import { startKubernetesStandIn, type RunningKubernetesStandIn } from '../support/kubernetes-standin.js';

const docker = new Dockerode();
const skip = await dockerUnavailableReason(docker);
const NS = 'berth-sandboxes';

function pod(name: string, labels: Record<string, string>): V1Pod {
  return {
    metadata: { name, labels },
    spec: {
      automountServiceAccountToken: false,
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 1,
      securityContext: { runAsUser: 1000, runAsGroup: 1000, runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
      containers: [
        {
          name: 'sandbox',
          image: SANDBOX_IMAGE,
          command: ['sleep', 'infinity'],
          securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } },
        },
      ],
    },
  };
}

/** The Status body of a failed call. */
function statusOf(err: unknown): V1Status {
  const body = (err as { body?: unknown }).body;
  return (typeof body === 'string' ? JSON.parse(body) : body) as V1Status;
}

interface ExecResult {
  stdout: string;
  stderr: string;
  status: V1Status;
  protocol: string;
}

describe('Kubernetes stand-in, driven by @kubernetes/client-node', { skip, timeout: 300_000 }, () => {
  let k: RunningKubernetesStandIn;
  let k8s: typeof K8s;
  let kc: K8s.KubeConfig;
  let core: K8s.CoreV1Api;

  async function runningPod(name: string, labels: Record<string, string>): Promise<V1Pod> {
    await core.createNamespacedPod({ namespace: NS, body: pod(name, labels) });
    for (let i = 0; i < 600; i++) {
      const p = await core.readNamespacedPod({ name, namespace: NS });
      if (p.status?.phase === 'Running') return p;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`pod ${name} did not start: ${k.stderr()}`);
  }

  /** Runs `command` through client-node's Exec; `stdin` (if given) is written and ended. */
  async function exec(name: string, command: string[], stdin: string | undefined, handler?: WebSocketInterface): Promise<ExecResult> {
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    stdout.on('data', (c: Buffer) => out.push(c));
    stderr.on('data', (c: Buffer) => err.push(c));
    const input = stdin === undefined ? null : new PassThrough();
    let resolveStatus!: (s: V1Status) => void;
    const statusArrived = new Promise<V1Status>((r) => (resolveStatus = r));
    const ws = await new k8s.Exec(kc, handler).exec(NS, name, 'sandbox', command, stdout, stderr, input, false, (s) => resolveStatus(s));
    if (input) input.end(stdin);
    const closed = new Promise<void>((r) => ws.once('close', () => r()));
    const status = await statusArrived;
    await closed;
    return { stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8'), status, protocol: ws.protocol };
  }

  before(async () => {
    k = await startKubernetesStandIn(['--namespace', NS, '--deny', 'create:pods', '--deny', 'delete:persistentvolumeclaims']);
    k8s = await import('@kubernetes/client-node');
    kc = new k8s.KubeConfig();
    kc.loadFromFile(k.kubeconfig);
    core = kc.makeApiClient(k8s.CoreV1Api);
    await runningPod('exec-target', { 'berth.dev/task': 'exec' });
  });

  after(async () => {
    await k?.stopAndCheck();
  });

  it('creates, reads, lists by label and deletes pods, with the API server shapes', async () => {
    const created = await core.createNamespacedPod({ namespace: NS, body: pod('crud', { 'berth.dev/tenant': 'acme', 'berth.dev/task': 'crud' }) });
    assert.equal(created.metadata?.namespace, NS);
    assert.match(created.metadata?.uid ?? '', /^[0-9a-f-]{36}$/);
    assert.ok(created.metadata?.creationTimestamp instanceof Date);
    assert.equal(created.status?.phase, 'Pending');
    // The server's defaults are filled in.
    assert.equal(created.spec?.dnsPolicy, 'ClusterFirst');
    assert.equal(created.spec?.schedulerName, 'default-scheduler');
    assert.equal(created.spec?.containers[0]?.imagePullPolicy, SANDBOX_IMAGE.endsWith(':latest') ? 'Always' : 'IfNotPresent');
    const list = await core.listNamespacedPod({ namespace: NS, labelSelector: 'berth.dev/tenant=acme' });
    assert.deepEqual(list.items.map((p) => p.metadata?.name), ['crud']);
    assert.match(list.metadata?.resourceVersion ?? '', /^\d+$/);
    const deleted = await core.deleteNamespacedPod({ name: 'crud', namespace: NS, gracePeriodSeconds: 0 });
    assert.equal(deleted.metadata?.name, 'crud');
    await assert.rejects(core.readNamespacedPod({ name: 'crud', namespace: NS }), (err: unknown) => {
      const s = statusOf(err);
      assert.equal((err as { code?: number }).code, 404);
      assert.deepEqual([s.kind, s.status, s.reason, s.message, s.code], ['Status', 'Failure', 'NotFound', 'pods "crud" not found', 404]);
      return true;
    });
  });

  it('answers AlreadyExists, Invalid and Forbidden as Status objects with their codes', async () => {
    await assert.rejects(core.createNamespacedPod({ namespace: NS, body: pod('exec-target', {}) }), (err: unknown) => {
      assert.deepEqual([statusOf(err).reason, statusOf(err).code, statusOf(err).message], ['AlreadyExists', 409, 'pods "exec-target" already exists']);
      return true;
    });
    const bad = pod('bad', {});
    bad.spec!.containers[0]!.image = '';
    bad.spec!.volumes = [{ name: 'host', hostPath: { path: '/' } }];
    await assert.rejects(core.createNamespacedPod({ namespace: NS, body: bad }), (err: unknown) => {
      const s = statusOf(err);
      assert.equal(s.code, 422);
      assert.equal(s.reason, 'Invalid');
      assert.deepEqual(s.details?.causes?.map((c) => c.field), ['spec.volumes[0].hostPath', 'spec.containers[0].image']);
      assert.match(s.message ?? '', /^Pod "bad" is invalid: \[spec\.volumes\[0\]\.hostPath: Forbidden: .*, spec\.containers\[0\]\.image: Required value\]$/);
      return true;
    });
    const restricted = new k8s.KubeConfig();
    restricted.loadFromFile(k.kubeconfig);
    restricted.setCurrentContext('kubernetes-standin-restricted');
    await assert.rejects(restricted.makeApiClient(k8s.CoreV1Api).createNamespacedPod({ namespace: NS, body: pod('denied', {}) }), (err: unknown) => {
      const s = statusOf(err);
      assert.equal(s.code, 403);
      assert.equal(s.message, 'pods is forbidden: User "standin-restricted" cannot create resource "pods" in API group "" in the namespace "berth-sandboxes"');
      return true;
    });
  });

  it('exec over v5.channel.k8s.io: stdin is half-closed, cat sees EOF, and its output and exit status all arrive', async () => {
    const text = Array.from({ length: 2000 }, (_, i) => `line ${i}`).join('\n') + '\n';
    const r = await exec('exec-target', ['sh', '-c', 'cat; echo done >&2'], text);
    assert.equal(r.protocol, 'v5.channel.k8s.io');
    assert.equal(r.stdout, text);
    assert.equal(r.stderr, 'done\n');
    assert.equal(r.status.status, 'Success');
    const failed = await exec('exec-target', ['sh', '-c', 'wc -l; exit 42'], 'a\nb\n');
    assert.equal(failed.stdout.trim(), '2');
    assert.equal(failed.status.status, 'Failure');
    assert.equal(failed.status.reason, 'NonZeroExitCode');
    assert.deepEqual(failed.status.details?.causes, [{ reason: 'ExitCode', message: '42' }]);
  });

  it('exec falls back to v4.channel.k8s.io when that is all the client offers, with the status as JSON', async () => {
    const { WebSocketHandler } = await import('@kubernetes/client-node/dist/web-socket-handler.js');
    const v4Only = new WebSocketHandler(kc, (uri: string, _protocols: string[], opts: WebSocket.ClientOptions) => new WebSocket(uri, ['v4.channel.k8s.io'], opts));
    const r = await exec('exec-target', ['sh', '-c', 'echo out; echo err >&2; exit 4'], undefined, v4Only);
    assert.equal(r.protocol, 'v4.channel.k8s.io');
    assert.equal(r.stdout, 'out\n');
    assert.equal(r.stderr, 'err\n');
    assert.equal(r.status.reason, 'NonZeroExitCode');
    assert.deepEqual(r.status.details?.causes, [{ reason: 'ExitCode', message: '4' }]);
  });

  it('a watch from a list\'s resourceVersion replays what changed after the list', async () => {
    const list = await core.listNamespacedPod({ namespace: NS, labelSelector: 'berth.dev/task=late' });
    assert.deepEqual(list.items, []);
    await core.createNamespacedPod({ namespace: NS, body: pod('late', { 'berth.dev/task': 'late' }) });
    let first!: (e: string) => void;
    const event = new Promise<string>((r) => (first = r));
    const watch = await new k8s.Watch(kc).watch(
      `/api/v1/namespaces/${NS}/pods`,
      { labelSelector: 'berth.dev/task=late', resourceVersion: list.metadata!.resourceVersion! },
      (type: string, obj: V1Pod) => first(`${type} ${obj.metadata?.name}`),
      () => undefined,
    );
    try {
      assert.equal(await event, 'ADDED late');
    } finally {
      watch.abort();
    }
    await core.deleteNamespacedPod({ name: 'late', namespace: NS, gracePeriodSeconds: 0 });
  });

  it('a watch by label sees a warm pod claimed by relabelling, then its deletion', async () => {
    await runningPod('warm-1', { 'berth.dev/pool': 'warm' });
    const events: string[] = [];
    let seen!: () => void;
    const deleted = new Promise<void>((r) => (seen = r));
    const watch = await new k8s.Watch(kc).watch(
      `/api/v1/namespaces/${NS}/pods`,
      { labelSelector: 'berth.dev/task=claimed' },
      (type: string, obj: V1Pod) => {
        events.push(`${type} ${obj.metadata?.name} ${obj.metadata?.labels?.['berth.dev/pool'] ?? '-'}`);
        if (type === 'DELETED') seen();
      },
      () => undefined,
    );
    try {
      const patched = await core.patchNamespacedPod(
        { name: 'warm-1', namespace: NS, body: { metadata: { labels: { 'berth.dev/pool': null, 'berth.dev/task': 'claimed' } } } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
      assert.deepEqual(patched.metadata?.labels, { 'berth.dev/task': 'claimed' });
      // client-node's default PATCH is a JSON patch (RFC 6902).
      await core.patchNamespacedPod({ name: 'warm-1', namespace: NS, body: [{ op: 'add', path: '/metadata/annotations', value: { 'berth.dev/tenant': 'acme' } }] });
      await core.deleteNamespacedPod({ name: 'warm-1', namespace: NS, gracePeriodSeconds: 1 });
      await deleted;
    } finally {
      watch.abort();
    }
    assert.equal(events[0], 'ADDED warm-1 -');
    assert.ok(events.includes('MODIFIED warm-1 -'), events.join('\n'));
    assert.equal(events.at(-1), 'DELETED warm-1 -');
  });

  it('PersistentVolumeClaims and NetworkPolicies: create, read, list, delete', async () => {
    const claim = await core.createNamespacedPersistentVolumeClaim({
      namespace: NS,
      body: { metadata: { name: 'ws-1', labels: { 'berth.dev/task': 'x' } }, spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } } },
    });
    assert.deepEqual(claim.metadata?.finalizers, ['kubernetes.io/pvc-protection']);
    let bound = claim;
    for (let i = 0; i < 100 && bound.status?.phase !== 'Bound'; i++) {
      await new Promise((r) => setTimeout(r, 50));
      bound = await core.readNamespacedPersistentVolumeClaim({ name: 'ws-1', namespace: NS });
    }
    assert.equal(bound.status?.phase, 'Bound');
    assert.equal(bound.status?.capacity?.storage, '1Gi');
    const claims = await core.listNamespacedPersistentVolumeClaim({ namespace: NS, labelSelector: 'berth.dev/task=x' });
    assert.deepEqual(claims.items.map((c) => c.metadata?.name), ['ws-1']);
    await core.deleteNamespacedPersistentVolumeClaim({ name: 'ws-1', namespace: NS });
    await assert.rejects(core.readNamespacedPersistentVolumeClaim({ name: 'ws-1', namespace: NS }), (err: unknown) => statusOf(err).code === 404);

    const net = kc.makeApiClient(k8s.NetworkingV1Api);
    const policy = await net.createNamespacedNetworkPolicy({
      namespace: NS,
      body: {
        metadata: { name: 'deny-t1', labels: { 'berth.dev/tenant': 't1' } },
        spec: { podSelector: { matchLabels: { 'berth.dev/tenant': 't1' } }, policyTypes: ['Ingress', 'Egress'], egress: [{ to: [{ ipBlock: { cidr: '0.0.0.0/0', except: ['10.0.0.0/8'] } }] }] },
      },
    });
    assert.equal(policy.metadata?.generation, 1);
    const policies = await net.listNamespacedNetworkPolicy({ namespace: NS, labelSelector: 'berth.dev/tenant=t1' });
    assert.deepEqual(policies.items.map((p) => p.spec?.egress?.[0]?.to?.[0]?.ipBlock?.except), [['10.0.0.0/8']]);
    const status = await net.deleteNamespacedNetworkPolicy({ name: 'deny-t1', namespace: NS });
    assert.equal(status.status, 'Success');
    await assert.rejects(
      net.createNamespacedNetworkPolicy({ namespace: NS, body: { metadata: { name: 'bad' }, spec: { podSelector: {}, egress: [{ to: [{ ipBlock: { cidr: 'not-a-cidr' } }] }] } } }),
      (err: unknown) => statusOf(err).reason === 'Invalid' && /spec\.egress\[0\]\.to\[0\]\.ipBlock\.cidr: Invalid value: "not-a-cidr"/.test(statusOf(err).message ?? ''),
    );
  });

  it('a pod evicted out of band (node pressure) is Failed with reason Evicted, and exec into it is refused', async () => {
    await runningPod('evictee', { 'berth.dev/task': 'evictee' });
    const options: Record<string, unknown> = { method: 'POST', path: `/stand-in/v1/namespaces/${NS}/pods/evictee/node-pressure-eviction?resource=memory` };
    await kc.applyToHTTPSOptions(options);
    const server = new URL(kc.getCurrentCluster()!.server);
    const code = await new Promise<number>((resolve, reject) => {
      request({ ...options, host: server.hostname, port: server.port }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      })
        .on('error', reject)
        .end();
    });
    assert.equal(code, 200);
    const p = await core.readNamespacedPod({ name: 'evictee', namespace: NS });
    assert.equal(p.status?.phase, 'Failed');
    assert.equal(p.status?.reason, 'Evicted');
    assert.equal(p.status?.message, 'The node was low on resource: memory. ');
    // The handshake is answered 400 (`cannot exec into a container in a completed pod`); ws reports the status.
    await assert.rejects(exec('evictee', ['true'], undefined), (err: unknown) => /Unexpected server response: 400/.test(String((err as { message?: unknown }).message)));
  });
});
