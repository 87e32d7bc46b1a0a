/**
 * Each task pod's own uid on the kubernetes backend (`kubernetes.run_as_user`
 * unset), against the Kubernetes stand-in (a test double whose pods are
 * containers of the local Docker engine, so of one kernel, as pods on one
 * node): two tasks' pods run under different uids from
 * `kubernetes.task_uids`, recorded in their `berth.dev/uid` label, named
 * `sandbox` in /etc/passwd, their files owned accordingly; persistent
 * claims record the uid and the task's next pod takes it; a claimed warm
 * pod keeps its own; and B using up its user's inotify instances leaves A
 * its own. One stand-in serves the whole file.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import type { BackendEnvironment, TaskKey } from '../../services/executor/backend.js';
import { KubernetesBackend, type KubernetesBackendOptions } from '../../services/executor/backends/kubernetes/kubernetes-backend.js';
import type { KubernetesEnvironment } from '../../services/executor/backends/kubernetes/kubernetes-environment.js';
import { LABEL } from '../../services/executor/backends/kubernetes/pod-spec.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { STANDIN_NAMESPACE, kubernetesTestOptions } from '../support/kubernetes-backend-fixtures.js';
import { startKubernetesStandIn, type RunningKubernetesStandIn } from '../support/kubernetes-standin.js';

const docker = new Dockerode();
const skip = await dockerUnavailableReason(docker);
const EMFILE = 24;

async function run(env: BackendEnvironment, script: string): Promise<{ out: string; code: number }> {
  let out = '';
  const r = await env.exec({ script, timeoutMs: 60_000, onOutput: (c) => (out += c.toString('utf8')) });
  return { out, code: r.exitCode };
}

const newKey = (tenant: string): TaskKey => ({ tenant, taskId: `task-${randomBytes(4).toString('hex')}` });

/** Who the pod's commands are, and the owner of a file each made in /workspace, the home directory and /tmp. */
const WHO =
  'id -u; id -g; id -un; echo ~; touch /workspace/f "$HOME/f" /tmp/f; stat -c %u:%g /workspace/f "$HOME/f" /tmp/f; ' +
  'python3 -c "import os, pwd; print(pwd.getpwuid(os.getuid()).pw_name)"';

/** Python that opens inotify instances until the kernel refuses, says how far it got, and keeps them. */
const EXHAUST_INSTANCES = [
  'import ctypes, time',
  'libc = ctypes.CDLL(None, use_errno=True)',
  'n = 0',
  'while libc.inotify_init1(0) >= 0: n += 1',
  'print("exhausted %d %d" % (n, ctypes.get_errno()), flush=True)',
  'time.sleep(3600)',
].join('\n');
const PROBE = 'import ctypes; print("inotify=%s" % (ctypes.CDLL(None).inotify_init1(0) >= 0))';

describe('kubernetes backend: a uid of its own per task pod (stand-in)', { skip, timeout: 600_000 }, () => {
  let k: RunningKubernetesStandIn;
  const backends: KubernetesBackend[] = [];

  async function start(over: Partial<Omit<KubernetesBackendOptions, 'pod'>> = {}): Promise<KubernetesBackend> {
    const b = await KubernetesBackend.start(kubernetesTestOptions({ image: SANDBOX_IMAGE, logger: silentLogger(), ownUids: true, ...over }));
    backends.push(b);
    return b;
  }

  const uidLabel = async (b: KubernetesBackend, env: KubernetesEnvironment) => (await b.api.readPod(env.podName))?.metadata?.labels?.[LABEL.uid];

  before(async () => {
    k = await startKubernetesStandIn(['--namespace', STANDIN_NAMESPACE, '--node-cpu', '64', '--node-memory', '64Gi']);
    process.env.KUBECONFIG = k.kubeconfig;
  });

  after(async () => {
    for (const b of backends) await b.close().catch(() => undefined);
    delete process.env.KUBECONFIG;
    await k.stopAndCheck();
  });

  it('two tasks\' pods run as different uids of kubernetes.task_uids, named sandbox, and their files are theirs', async () => {
    const b = await start();
    const envs = [(await b.createEnvironment(newKey('alpha'))) as KubernetesEnvironment, (await b.createEnvironment(newKey('beta'))) as KubernetesEnvironment];
    try {
      const uids: number[] = [];
      for (const env of envs) {
        const r = await run(env, WHO);
        assert.equal(r.code, 0, r.out);
        const [uid, gid, name, home, ...owners] = r.out.trim().split('\n');
        assert.equal(gid, uid, 'the gid is the uid');
        assert.ok(Number(uid) >= 1_900_000_000 && Number(uid) <= 1_916_777_215, `uid ${uid} is one of kubernetes.task_uids`);
        assert.deepEqual([name, home, ...owners], ['sandbox', '/home/sandbox', `${uid}:${uid}`, `${uid}:${uid}`, `${uid}:${uid}`, 'sandbox']);
        assert.equal(await uidLabel(b, env), uid, 'the pod records its uid');
        uids.push(Number(uid));
      }
      assert.notEqual(uids[0], uids[1]);
    } finally {
      await Promise.all(envs.map((e) => e.dispose()));
    }
  });

  it('B holding every inotify instance its user may have: A still gets one', async () => {
    const b = await start();
    const aEnv = (await b.createEnvironment(newKey('alpha'))) as KubernetesEnvironment;
    const bEnv = (await b.createEnvironment(newKey('beta'))) as KubernetesEnvironment;
    try {
      await run(bEnv, `(nohup python3 -c '${EXHAUST_INSTANCES}' > /tmp/exhaust.out 2>&1 &)`);
      let said = '';
      for (let i = 0; i < 300 && !/exhausted \d+ \d+/.test(said); i++) {
        if (i > 0) await sleep(200);
        said = (await run(bEnv, 'cat /tmp/exhaust.out')).out;
      }
      const m = /exhausted (\d+) (\d+)/.exec(said);
      assert.ok(m, `B's script did not say how far it got: ${said}`);
      assert.equal(Number(m[2]), EMFILE, `B stopped at ${m[1]} instances with errno ${m[2]}`);
      // Control: B's own uid is refused now; A's, another uid, is not.
      assert.equal((await run(bEnv, `python3 -c '${PROBE}'`)).out.trim(), 'inotify=False');
      assert.equal((await run(aEnv, `python3 -c '${PROBE}'`)).out.trim(), 'inotify=True');
    } finally {
      await Promise.all([aEnv.dispose(), bEnv.dispose()]);
    }
  });

  it('persistent claims record the uid; the task\'s next pod runs as it and its files are still its own', async () => {
    const b = await start({ persistent: true });
    const key = newKey('alpha');
    let env = (await b.createEnvironment(key)) as KubernetesEnvironment;
    const uid = (await run(env, 'id -u; echo kept > /workspace/w')).out.trim();
    const claims = await b.api.listClaims(b.taskSelector(key));
    assert.deepEqual(claims.map((c) => c.metadata?.labels?.[LABEL.uid]), [uid, uid]);
    await env.dispose('idle');
    env = (await b.createEnvironment(key)) as KubernetesEnvironment;
    try {
      const again = await run(env, 'id -u; stat -c %u /workspace/w; echo more >> /workspace/w && cat /workspace/w');
      assert.deepEqual(again.out.trim().split('\n'), [uid, uid, 'kept', 'more']);
    } finally {
      await env.dispose('end_task');
    }
  });

  it('a claimed warm pod keeps the uid it was made with', async () => {
    const b = await start({ warmPool: 1 });
    const selector = `${LABEL.pool}=warm,${LABEL.executor}=${b.executorId}`;
    let warm: { name: string; uid: string } | undefined;
    for (let i = 0; i < 300 && !warm; i++) {
      const ready = (await b.api.listPods(selector)).find((p) => p.status?.phase === 'Running');
      if (ready) warm = { name: ready.metadata!.name!, uid: ready.metadata!.labels![LABEL.uid]! };
      else await sleep(200);
    }
    assert.ok(warm, 'no warm pod came up');
    assert.match(warm.uid, /^19\d{8}$/);
    const env = (await b.createEnvironment(newKey('alpha'))) as KubernetesEnvironment;
    try {
      assert.equal(env.podName, warm.name);
      assert.equal((await run(env, 'id -u; id -un')).out.trim(), `${warm.uid}\nsandbox`);
    } finally {
      await env.dispose();
      await b.close();
    }
  });
});
