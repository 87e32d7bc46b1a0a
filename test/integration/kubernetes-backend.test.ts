/**
 * The kubernetes backend against the Kubernetes stand-in (a test double of
 * a Kubernetes API server whose pods are containers of the local Docker
 * engine), reached only through the kubeconfig it writes: the pod a task
 * gets (labels, hardening, limits, scheduling settings) and what holds
 * inside it, persistent claims across release and their removal by
 * EndTask, the warm pool, a restarted executor finding its pod, and the
 * failures a user meets (image pull, unschedulable, RBAC, eviction and
 * deletion mid-task, an API server that does not answer), each leaving
 * nothing behind. One stand-in serves the whole file.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import type { BackendEnvironment, TaskKey } from '../../services/executor/backend.js';
import { KubernetesBackend, type KubernetesBackendOptions } from '../../services/executor/backends/kubernetes/kubernetes-backend.js';
import { KubernetesEnvironment } from '../../services/executor/backends/kubernetes/kubernetes-environment.js';
import { policyLabelValue } from '../../services/executor/backends/kubernetes/network-policy.js';
import { LABEL } from '../../services/executor/backends/kubernetes/pod-spec.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { STANDIN_NAMESPACE, kubernetesTestOptions } from '../support/kubernetes-backend-fixtures.js';
import { startKubernetesStandIn, type RunningKubernetesStandIn } from '../support/kubernetes-standin.js';

const docker = new Dockerode();
const skip = await dockerUnavailableReason(docker);
const NS = STANDIN_NAMESPACE;

/** Runs `script` in `env`; its output and exit code. */
async function run(env: BackendEnvironment, script: string): Promise<{ out: string; code: number }> {
  let out = '';
  const r = await env.exec({ script, timeoutMs: 60_000, onOutput: (c) => (out += c.toString('utf8')) });
  return { out, code: r.exitCode };
}

const newKey = (tenant = 'acme'): TaskKey => ({ tenant, taskId: `task-${randomBytes(4).toString('hex')}` });

describe('kubernetes backend (stand-in)', { skip, timeout: 600_000 }, () => {
  let k: RunningKubernetesStandIn;
  const backends: KubernetesBackend[] = [];
  const scheduling = {
    nodeSelector: { pool: 'sandboxes' },
    tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'sandboxes', effect: 'NoSchedule' }],
    runtimeClass: 'sandboxed',
  };

  async function start(over: Partial<Omit<KubernetesBackendOptions, 'pod'>> & { pod?: Partial<KubernetesBackendOptions['pod']>; image?: string } = {}) {
    const { pod, image, ...rest } = over;
    const b = await KubernetesBackend.start(
      kubernetesTestOptions({ image: image ?? SANDBOX_IMAGE, logger: silentLogger(), pod: { ...scheduling, ...pod }, ...rest }),
    );
    backends.push(b);
    return b;
  }

  /** Pods and claims of `selector` that are not on their way out. */
  async function objects(b: KubernetesBackend, selector: string): Promise<string[]> {
    const pods = (await b.api.listPods(selector)).filter((p) => !p.metadata?.deletionTimestamp).map((p) => `pod ${p.metadata?.name}`);
    const claims = (await b.api.listClaims(selector)).filter((c) => !c.metadata?.deletionTimestamp).map((c) => `claim ${c.metadata?.name}`);
    return [...pods, ...claims];
  }

  async function standInHook(pathname: string): Promise<number> {
    const b = backends[0]!;
    const options: Record<string, unknown> = { method: 'POST', path: pathname };
    await b.api.kc.applyToHTTPSOptions(options);
    const server = new URL(b.api.server);
    return new Promise<number>((resolve, reject) => {
      request({ ...options, host: server.hostname, port: server.port }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      })
        .on('error', reject)
        .end();
    });
  }

  before(async () => {
    k = await startKubernetesStandIn([
      '--namespace', NS,
      '--node-cpu', '64', '--node-memory', '64Gi',
      '--node-label', 'pool=sandboxes',
      '--node-taint', 'dedicated=sandboxes:NoSchedule',
      '--runtime-class', 'sandboxed=runc',
      '--deny', 'create:pods/exec',
    ]);
    process.env.KUBECONFIG = k.kubeconfig;
    await start();
  });

  after(async () => {
    for (const b of backends) await b.close().catch(() => undefined);
    delete process.env.KUBECONFIG;
    await k.stopAndCheck();
  });

  it('a task gets a hardened pod of its own, labelled for its tenant, task and executor, limited from config', async () => {
    const b = await start({ pod: { labels: { team: 'agents' }, annotations: { 'example.com/owner': 'platform' } } });
    const key = newKey();
    const env = await b.createEnvironment(key);
    try {
      assert.ok(env instanceof KubernetesEnvironment);
      const [pod, ...others] = await b.api.listPods(b.taskSelector(key));
      assert.equal(others.length, 0, 'one pod per task');
      assert.equal(pod!.metadata?.name, env.podName);
      assert.match(env.podName, /^berth-[0-9a-f]{40}-[0-9a-f]{5}$/);
      const labels = pod!.metadata?.labels ?? {};
      assert.equal(labels[LABEL.managedBy], 'berth');
      // The tenant's policy (egress open here), and its NetworkPolicy objects made before the pod.
      assert.equal(labels[LABEL.policy], policyLabelValue({ egress: 'open', egressAllow: [] }));
      const policies = await k.kubectl(['-n', NS, 'get', 'networkpolicies', '-o', 'name']);
      assert.match(policies.stdout, /^networkpolicy.networking.k8s.io\/berth-default-deny$/m);
      assert.match(policies.stdout, new RegExp(`^networkpolicy.networking.k8s.io/berth-egress-${labels[LABEL.policy]}$`, 'm'));
      assert.equal(labels.team, 'agents');
      assert.match(labels[LABEL.tenant] ?? '', /^[0-9a-f]{40}$/);
      assert.match(labels[LABEL.task] ?? '', /^[0-9a-f]{40}$/);
      assert.ok(!JSON.stringify(pod!.metadata).includes(key.taskId), 'the task id is not readable off the pod');
      assert.equal(pod!.metadata?.annotations?.['example.com/owner'], 'platform');
      const spec = pod!.spec!;
      assert.equal(spec.automountServiceAccountToken, false);
      assert.equal(spec.runtimeClassName, 'sandboxed');
      assert.deepEqual({ ...spec.nodeSelector }, { pool: 'sandboxes' });
      assert.ok(spec.tolerations?.some((t) => t.key === 'dedicated' && t.effect === 'NoSchedule'));
      assert.equal(spec.securityContext?.seccompProfile?.type, 'RuntimeDefault');
      assert.equal(spec.securityContext?.runAsNonRoot, true);
      const c = spec.containers[0]!;
      assert.deepEqual([...(c.securityContext?.capabilities?.drop ?? [])], ['ALL']);
      assert.equal(c.securityContext?.allowPrivilegeEscalation, false);
      assert.equal(c.securityContext?.readOnlyRootFilesystem, true);
      assert.deepEqual({ ...c.resources?.limits }, { cpu: '1000m', memory: '1024Mi', 'ephemeral-storage': '1024Mi' });
      // What holds inside: the uid, no capabilities, no token, a read-only root with writable task directories.
      const inside = await run(
        env,
        'id -u; grep CapEff /proc/self/status | tr -d "\\t"; ls /var/run/secrets/kubernetes.io 2>&1 | head -1; ' +
          'touch /etc/berth-probe 2>/dev/null && echo root-writable || echo root-read-only; ' +
          'touch /workspace/a "$HOME/b" /tmp/c && echo dirs-writable; pwd',
      );
      const lines = inside.out.trim().split('\n');
      assert.equal(lines[0], '1000');
      assert.equal(lines[1], 'CapEff:0000000000000000');
      assert.match(lines[2]!, /No such file or directory/);
      assert.deepEqual(lines.slice(3), ['root-read-only', 'dirs-writable', '/workspace']);
    } finally {
      await env.dispose();
    }
    assert.deepEqual(await objects(b, b.taskSelector(key)), [], 'release deletes the pod');
  });

  it('a dropped exec stream is resumed in the same pod: cwd, files and background processes are kept', async () => {
    const b = backends[0]!;
    const env = (await b.createEnvironment(newKey())) as KubernetesEnvironment;
    try {
      await run(env, 'echo kept > /tmp/kept; (sleep 300 >/dev/null 2>&1 &); echo started');
      const pod = env.podName;
      env.agentChannel.dropStream();
      const after = await run(env, 'cat /tmp/kept; pgrep -c -f "^sleep 300"');
      assert.deepEqual(after.out.trim().split('\n'), ['kept', '1']);
      assert.equal(env.podName, pod);
      assert.equal(env.takeRecreated(), false);
    } finally {
      await env.dispose();
    }
  });

  it('a pod evicted mid-task is replaced: the next call runs in a new pod and says so', async () => {
    const b = backends[0]!;
    const key = newKey();
    const env = (await b.createEnvironment(key)) as KubernetesEnvironment;
    try {
      await run(env, 'echo before > /tmp/file');
      const old = env.podName;
      assert.equal(await standInHook(`/stand-in/v1/namespaces/${NS}/pods/${old}/node-pressure-eviction?resource=memory`), 200);
      const next = await run(env, 'cat /tmp/file 2>&1; echo ran');
      assert.match(next.out, /ran/);
      assert.match(next.out, /No such file/);
      assert.notEqual(env.podName, old);
      assert.equal(env.takeRecreated(), true);
      const notices = env.takeNotices().join('\n');
      assert.match(notices, new RegExp(`pod ${old} was evicted \\(The node was low on resource: memory\\.\\)`));
      assert.match(notices, new RegExp(`a new pod ${env.podName} was started`));
      const names = (await b.api.listPods(b.taskSelector(key))).map((p) => p.metadata?.name);
      assert.deepEqual(names, [env.podName], 'the evicted pod was deleted');
    } finally {
      await env.dispose();
    }
  });

  it('a pod deleted mid-task (kubectl delete) is replaced on the next call', async () => {
    const b = backends[0]!;
    const env = (await b.createEnvironment(newKey())) as KubernetesEnvironment;
    try {
      const old = env.podName;
      const del = await k.kubectl(['-n', NS, 'delete', 'pod', old, '--grace-period=1']);
      assert.equal(del.code, 0, del.stderr);
      const next = await run(env, 'echo ran');
      assert.equal(next.out.trim(), 'ran');
      assert.notEqual(env.podName, old);
      assert.match(env.takeNotices().join('\n'), new RegExp(`pod ${old} was deleted`));
    } finally {
      await env.dispose();
    }
  });

  it('persistent mode keeps /workspace and home in claims across release; EndTask deletes pod and claims', async () => {
    const b = await start({ persistent: true });
    const key = newKey();
    let env = await b.createEnvironment(key);
    await run(env, 'echo work > /workspace/w; echo home > "$HOME/h"; echo tmp > /tmp/t');
    await env.dispose('idle');
    const kept = await objects(b, b.taskSelector(key));
    assert.equal(kept.filter((o) => o.startsWith('pod ')).length, 0, 'the pod is deleted on release');
    assert.equal(kept.filter((o) => o.startsWith('claim ')).length, 2, `the claims are kept: ${kept.join(', ')}`);
    env = await b.createEnvironment(key);
    const back = await run(env, 'cat /workspace/w "$HOME/h"; cat /tmp/t 2>/dev/null || echo no-tmp');
    assert.deepEqual(back.out.trim().split('\n'), ['work', 'home', 'no-tmp']);
    await env.dispose('end_task');
    assert.deepEqual(await objects(b, b.taskSelector(key)), [], 'EndTask leaves no pod and no claim');
  });

  it('a restarted executor (same executor id) finds the task\'s running pod and uses it again', async () => {
    const first = backends[0]!;
    const key = newKey();
    const env = (await first.createEnvironment(key)) as KubernetesEnvironment;
    await run(env, 'echo from-before > /tmp/marker');
    // The second backend is the restarted executor: same id and label key, no memory of the task.
    const second = await start({ pod: { executorId: executorIdOf(first) } });
    const again = (await second.createEnvironment(key)) as KubernetesEnvironment;
    try {
      assert.equal(again.podName, env.podName);
      assert.equal((await run(again, 'cat /tmp/marker')).out.trim(), 'from-before');
      assert.match(again.takeNotices().join('\n'), /was still running \(an earlier executor started it\) and is used again/);
    } finally {
      await again.dispose();
      await env.dispose();
    }
  });

  it('a warm-pool pod is claimed by relabelling, and the pool is refilled', async () => {
    const b = await start({ warmPool: 1 });
    const warmSelector = `${LABEL.pool}=warm,${LABEL.executor}=${executorIdOf(b)}`;
    const waitWarm = async (not?: string) => {
      for (let i = 0; i < 300; i++) {
        const ready = (await b.api.listPods(warmSelector)).filter((p) => p.status?.phase === 'Running' && p.metadata?.name !== not);
        if (ready.length > 0) return ready[0]!.metadata!.name!;
        await new Promise((r) => setTimeout(r, 200));
      }
      throw new Error('no warm pod came up');
    };
    const warm = await waitWarm();
    const key = newKey();
    const env = (await b.createEnvironment(key)) as KubernetesEnvironment;
    try {
      assert.equal(env.podName, warm, 'the task got the warm pod');
      const pod = await b.api.readPod(warm);
      assert.equal(pod?.metadata?.labels?.[LABEL.pool], undefined);
      assert.ok(pod?.metadata?.labels?.[LABEL.task]);
      assert.equal(pod?.metadata?.labels?.[LABEL.policy], policyLabelValue({ egress: 'open', egressAllow: [] }), 'it took the tenant\'s policy label');
      assert.equal((await run(env, 'pwd; id -u')).out.trim(), '/workspace\n1000');
      assert.notEqual(await waitWarm(warm), warm, 'the pool was refilled');
    } finally {
      await env.dispose();
      await b.close();
    }
    assert.deepEqual(await objects(b, warmSelector), [], 'closing the backend deletes the pool');
  });

  it('an image that cannot be pulled fails at once, naming the pod, the reason and what to do; nothing is left', async () => {
    // A pending timeout far beyond the test's: only the kubelet's image-pull state can end this wait.
    const b = await start({ image: 'registry.invalid/berth-no-such-image:404', pendingTimeoutMs: 3_600_000 });
    const key = newKey();
    await assert.rejects(b.createEnvironment(key), (err: Error) => {
      assert.equal(err.name, 'FailedPreconditionError');
      assert.match(err.message, /^pod berth-[0-9a-f]{40}-[0-9a-f]{5} in namespace berth-sandboxes cannot pull its image "registry.invalid\/berth-no-such-image:404" \((ErrImagePull|ImagePullBackOff): /);
      assert.match(err.message, /check terminal.kubernetes_image/);
      return true;
    });
    assert.deepEqual(await objects(b, b.taskSelector(key)), []);
  });

  it('a pod the scheduler cannot place fails after kubernetes.pending_timeout with its reason; nothing is left', async () => {
    const b = await start({ pod: { nodeSelector: { pool: 'gpu' } }, pendingTimeoutMs: 1500 });
    const key = newKey();
    await assert.rejects(b.createEnvironment(key), (err: Error) => {
      assert.equal(err.name, 'ResourceExhaustedError');
      assert.match(err.message, /^pod berth-\S+ in namespace berth-sandboxes was not scheduled within 2 s \(Unschedulable: 0\/1 nodes are available: 1 node\(s\) didn't match Pod's node affinity\/selector/);
      assert.match(err.message, /check kubernetes.node_selector/);
      return true;
    });
    assert.deepEqual(await objects(b, b.taskSelector(key)), []);
  });

  it('RBAC without create on pods/exec: the error names the verb and the resource; nothing is left', async () => {
    const b = await start({ context: 'kubernetes-standin-restricted' });
    const key = newKey();
    await assert.rejects(b.createEnvironment(key), (err: Error) => {
      assert.equal(err.name, 'FailedPreconditionError');
      assert.match(err.message, /refused to exec into pod berth-\S+ \(Forbidden\)/);
      assert.match(err.message, /the verbs "create" and "get" on "pods\/exec" in namespace berth-sandboxes/);
      return true;
    });
    assert.deepEqual(await objects(b, b.taskSelector(key)), []);
  });

  it('an API server that does not answer: the backend does not start, and says which server and what to check', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'berth-k8s-unreachable-'));
    const file = path.join(dir, 'kubeconfig');
    writeFileSync(
      file,
      'apiVersion: v1\nkind: Config\nclusters: [{name: gone, cluster: {server: "https://127.0.0.1:9"}}]\n' +
        'users: [{name: u, user: {token: t}}]\ncontexts: [{name: gone, context: {cluster: gone, user: u}}]\ncurrent-context: gone\n',
    );
    process.env.KUBECONFIG = file;
    try {
      await assert.rejects(KubernetesBackend.start(kubernetesTestOptions({ image: SANDBOX_IMAGE })), (err: Error) => {
        assert.equal(err.name, 'UnavailableError');
        assert.match(err.message, /^cannot reach the Kubernetes API server at https:\/\/127\.0\.0\.1:9 to list pods in namespace berth-sandboxes: /);
        assert.match(err.message, /check that the cluster is up and the kubeconfig/);
        return true;
      });
    } finally {
      process.env.KUBECONFIG = k.kubeconfig;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** The executor id a backend labels its pods with. */
function executorIdOf(b: KubernetesBackend): string {
  return b.executorId;
}
