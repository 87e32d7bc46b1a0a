/**
 * End to end on the kubernetes backend, against the Kubernetes stand-in (a
 * test double of a Kubernetes API server whose pods are containers of the
 * local Docker engine, not a cluster): `bin/berth serve --backend
 * kubernetes` and `bin/berth doctor --backend kubernetes` as child
 * processes, pointed at the stand-in only through KUBECONFIG, the pods and
 * claims looked at with kubectl. The README tour, background processes, a
 * timeout, an interrupt, execute_code in the task's pod with the seed
 * document's three scripts, files kept in claims across a server restart,
 * and EndTask leaving no pod and no claim.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import Dockerode from 'dockerode';
import { taskLabelValues } from '../../services/executor/backends/kubernetes/pod-spec.js';
import { SANDBOX_IMAGE, dockerUnavailableReason, runTaskIds } from '../support/docker-fixtures.js';
import { startKubernetesStandIn, type RunningKubernetesStandIn } from '../support/kubernetes-standin.js';
import { batchRefactorSeed, buildAndTestSeed, yamlSearchSeed } from '../support/seed-scripts.js';
import { BERTH_BIN, REPO_ROOT, startServe, waitForLog, type ServeProcess } from '../support/serve-process.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const { task } = runTaskIds();
const NS = 'berth-sandboxes';

describe('berth serve and doctor --backend kubernetes against the stand-in', { skip: unavailable, timeout: 900_000 }, () => {
  let k: RunningKubernetesStandIn;
  let serve: ServeProcess;
  let dir: string;
  let configFile: string;
  let env: NodeJS.ProcessEnv;

  before(async () => {
    k = await startKubernetesStandIn(['--namespace', NS, '--node-cpu', '64', '--node-memory', '64Gi']);
    dir = mkdtempSync(path.join(tmpdir(), 'berth-k8s-e2e-'));
    configFile = path.join(dir, 'berth.yaml');
    writeFileSync(
      configFile,
      [
        'terminal:',
        '  backend: kubernetes',
        `  kubernetes_image: ${SANDBOX_IMAGE}`,
        '  container_cpu: 1',
        '  container_memory: 1024',
        '  container_disk: 2048',
        '  container_persistent: true',
        'kubernetes:',
        `  namespace: ${NS}`,
        '  executor_id: e2e',
        '',
      ].join('\n'),
    );
    // The state root in the test's own directory: what the server and the doctor keep there (a suspension's archive) goes with it.
    env = { KUBECONFIG: k.kubeconfig, BERTH_STATE_ROOT: path.join(dir, 'state') };
    serve = await startServe(['--backend', 'kubernetes', '--config', configFile], { env });
  });

  after(async () => {
    await serve?.stop();
    await k?.stopAndCheck();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const call = async (tool: string, args: object, taskId: string) => {
    const r = await serve.cli(['call', tool, JSON.stringify(args), '--task', taskId], { timeoutMs: 120_000 });
    // 1: the call went through and the command failed (a timeout); anything else is not a tool result.
    assert.ok(r.code === 0 || r.code === 1, `${tool} ${JSON.stringify(args)} exited ${r.code}: ${r.stderr}${r.stdout}`);
    return JSON.parse(r.stdout) as Record<string, unknown>;
  };
  /** `pod NAME` and `claim NAME` lines of the task's objects, through kubectl. */
  const objectsOf = async (taskId: string) => {
    const label = `berth.dev/task=${taskLabelValues('', { tenant: 'default', taskId }).task}`;
    const r = await k.kubectl(['-n', NS, 'get', 'pods,persistentvolumeclaims', '-l', label, '-o', 'jsonpath={range .items[*]}{.kind} {.metadata.name}{"\\n"}{end}']);
    assert.equal(r.code, 0, r.stderr);
    return r.stdout.split('\n').filter(Boolean);
  };

  test('the README tour runs in a pod of its own per task', async () => {
    const t1 = task('readme');
    const who = await call('terminal', { command: 'id -un; pwd' }, t1);
    assert.deepEqual([who.exit_code, who.output], [0, 'sandbox\n/workspace']);
    const objects = await objectsOf(t1);
    assert.equal(objects.filter((o) => o.startsWith('Pod ')).length, 1, objects.join(', '));
    assert.equal(objects.filter((o) => o.startsWith('PersistentVolumeClaim ')).length, 2, objects.join(', '));

    await call('terminal', { command: 'mkdir -p /workspace/proj && cd /workspace/proj && export GREETING=hello' }, t1);
    assert.deepEqual(await call('terminal', { command: 'pwd; echo $GREETING' }, t1), { output: '/workspace/proj\nhello', exit_code: 0, error: null });
    const w = await call('write_file', { path: 'notes with space.txt', content: 'alpha\nbeta\n' }, t1);
    assert.equal(w.bytes_written, 11);
    const rd = await call('read_file', { path: '/workspace/proj/notes with space.txt' }, t1);
    assert.match(String(rd.content), /^1\|alpha\n2\|beta/);
    assert.equal((await call('terminal', { command: 'cat "notes with space.txt"' }, t1)).output, 'alpha\nbeta');
    // The executor's kubeconfig never reaches the pod, nor does a service-account token.
    assert.equal((await call('terminal', { command: 'env | grep -c KUBE || true; ls /var/run/secrets 2>&1 | grep -c "No such" ' }, t1)).output, '0\n1');

    const other = task('other');
    assert.equal((await call('terminal', { command: 'echo "[$GREETING]"; ls /workspace' }, other)).output, '[]');
    assert.notDeepEqual(await objectsOf(other), await objectsOf(t1));
    await serve.client.endTask({ taskId: other });
  });

  test('background processes, a timeout and an interrupt; EndTask leaves no pod and no claim', async () => {
    const t2 = task('bg');
    const start = await call('terminal', { command: 'echo hello-bg; sleep 1000', background: true }, t2);
    assert.equal(start.output, 'Background process started');
    let logText = '';
    for (let i = 0; i < 100 && !logText.includes('hello-bg'); i++) {
      logText = String((await call('process', { action: 'log', session_id: start.session_id }, t2)).output);
      if (!logText.includes('hello-bg')) await sleep(100);
    }
    assert.match(logText, /hello-bg/);
    const kill = await call('process', { action: 'kill', session_id: start.session_id }, t2);
    assert.deepEqual([kill.status, kill.completion_reason], ['killed', 'killed']);

    const timedOut = await call('terminal', { command: 'echo partial; sleep 30', timeout: 2 }, t2);
    assert.equal(timedOut.exit_code, 124);
    assert.match(String(timedOut.output), /partial[\s\S]*Command timed out after 2s/);

    const running = serve.client.callTool({ name: 'terminal', argumentsJson: JSON.stringify({ command: 'echo started; sleep 999' }), taskId: t2, sessionId: '' });
    for (let i = 0; i < 100; i++) {
      const r = await serve.client.interrupt({ taskId: t2 });
      if (r.interrupted > 0) break;
      await sleep(100);
    }
    const interrupted = JSON.parse((await running).resultJson) as Record<string, unknown>;
    assert.equal(interrupted.exit_code, 130);
    assert.match(String(interrupted.output), /\[Command interrupted\]$/);
    assert.equal((await call('terminal', { command: 'ps -eo args | grep -c "[s]leep 999" || true' }, t2)).output, '0');

    assert.notDeepEqual(await objectsOf(t2), []);
    assert.equal((await serve.client.endTask({ taskId: t2 })).released, true);
    // The stand-in keeps a deleted claim Terminating until its pod is gone, as the API server does: wait for both.
    let left = await objectsOf(t2);
    for (let i = 0; i < 100 && left.length > 0; i++) {
      await sleep(100);
      left = await objectsOf(t2);
    }
    assert.deepEqual(left, [], 'EndTask leaves no pod and no claim');
  });

  test('execute_code runs the script inside the task\'s pod: open() sees what terminal() wrote', async () => {
    const t4 = task('code');
    await call('write_file', { path: '/workspace/from-tool.txt', content: 'pod side' }, t4);
    const code = `import json, os
from hermes_tools import terminal, read_file
terminal("echo written by terminal > /workspace/from-terminal.txt")
open("/workspace/from-open.txt", "w").write("written by open()")
print(json.dumps({
    "terminal_hostname": terminal("hostname")["output"].strip(),
    "open_hostname": open("/etc/hostname").read().strip(),
    "open_sees_terminal": open("/workspace/from-terminal.txt").read(),
    "read_file": read_file("/workspace/from-tool.txt")["content"],
    "terminal_sees_open": terminal("cat /workspace/from-open.txt")["output"],
    "socket_dir": os.path.dirname(os.path.dirname(os.environ["HERMES_RPC_SOCKET"])),
}))
`;
    const r = JSON.parse((await serve.client.callTool({ name: 'execute_code', argumentsJson: JSON.stringify({ code }), taskId: t4, sessionId: '' })).resultJson) as Record<string, unknown>;
    assert.equal(r.status, 'success', JSON.stringify(r));
    const seen = JSON.parse(String(r.output)) as Record<string, string>;
    assert.deepEqual(seen, {
      terminal_hostname: seen.open_hostname,
      open_hostname: seen.open_hostname,
      open_sees_terminal: 'written by terminal\n',
      read_file: '1|pod side',
      terminal_sees_open: 'written by open()',
      socket_dir: '/tmp/berth-code',
    });
    assert.ok((await objectsOf(t4)).includes(`Pod ${seen.open_hostname}`), 'the script ran in the task\'s pod');
    assert.equal(r.notice, undefined, 'no code-container notice');
    await waitForLog(serve, /"msg":"execute_code success in the task's kubernetes environment/);
    await serve.client.endTask({ taskId: t4 });
  });

  const runCode = async (code: string, taskId: string) =>
    JSON.parse((await serve.client.callTool({ name: 'execute_code', argumentsJson: JSON.stringify({ code }), taskId, sessionId: '' })).resultJson) as {
      status: string;
      output: string;
      tool_calls_made: number;
      notice?: string;
    };
  const put = async (files: Record<string, string>, taskId: string) => {
    for (const [p, content] of Object.entries(files)) await call('write_file', { path: p, content }, taskId);
  };

  test('seed scripts: YAML search, batch refactor, build-and-test, in the pod', async () => {
    const t = task('seeds');
    await put(yamlSearchSeed.files('/workspace/configs'), t);
    yamlSearchSeed.assertResult(await runCode(yamlSearchSeed.code('/workspace/configs'), t));
    await put(batchRefactorSeed.files('/workspace/refactor'), t);
    assert.equal((await call('terminal', { command: 'cd /workspace/refactor' }, t)).exit_code, 0);
    batchRefactorSeed.assertResult(await runCode(batchRefactorSeed.code, t));
    assert.equal(
      (await call('terminal', { command: 'cat src/b.py; grep -c old_api_call src/*.py || true' }, t)).output,
      `${batchRefactorSeed.patchedB}src/a.py:0\nsrc/b.py:0\nsrc/c.py:0\nsrc/d.py:0`,
    );
    await put(buildAndTestSeed.files('/workspace/project'), t);
    buildAndTestSeed.assertResult(await runCode(buildAndTestSeed.code('/workspace/project'), t));
    await serve.client.endTask({ taskId: t });
  });

  test('a persistent task\'s files are kept in its claims across a server restart; EndTask then removes them', async () => {
    const t3 = task('persist');
    await call('terminal', { command: 'echo remembered > /workspace/state.txt; echo home > ~/h.txt' }, t3);
    assert.equal(await serve.stop(), 0);
    // Deleted pods terminate within their grace period.
    let kept = await objectsOf(t3);
    for (let i = 0; i < 100 && kept.some((o) => o.startsWith('Pod ')); i++) {
      await sleep(100);
      kept = await objectsOf(t3);
    }
    assert.deepEqual(kept.filter((o) => o.startsWith('Pod ')), [], 'stopping the server deletes its pods');
    assert.equal(kept.length, 2, `the claims are kept: ${kept.join(', ')}`);
    serve = await startServe(['--backend', 'kubernetes', '--config', configFile], { env });
    assert.equal((await call('terminal', { command: 'cat /workspace/state.txt ~/h.txt' }, t3)).output, 'remembered\nhome');
    await serve.client.endTask({ taskId: t3 });
    let left = await objectsOf(t3);
    for (let i = 0; i < 100 && left.length > 0; i++) {
      await sleep(100);
      left = await objectsOf(t3);
    }
    assert.deepEqual(left, []);
  });

  test('berth doctor --backend kubernetes runs a task in a pod and leaves nothing behind', async () => {
    // An executor id of its own, so what it leaves is told apart from the server's tasks.
    const doctorConfig = path.join(dir, 'doctor.yaml');
    writeFileSync(doctorConfig, readFileSync(configFile, 'utf8').replace('executor_id: e2e', 'executor_id: doctor'));
    let out: { code: number; stdout: string };
    try {
      const { stdout } = await promisify(execFile)(process.execPath, [BERTH_BIN, 'doctor', '--backend', 'kubernetes', '--config', doctorConfig], {
        cwd: REPO_ROOT,
        env: { ...process.env, ...env },
        timeout: 180_000,
      });
      out = { code: 0, stdout };
    } catch (err) {
      const e = err as { code?: number; stdout?: string };
      out = { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '' };
    }
    assert.equal(out.code, 0, out.stdout);
    assert.match(out.stdout, /^ok {4}the kubernetes backend starts$/m);
    // Each task pod's own uid (kubernetes.task_uids, run_as_user unset).
    assert.match(out.stdout, /^ok {4}a new task runs a command \(\d+ ms, as uid 19\d{8}\)$/m);
    assert.match(out.stdout, /^ok {4}commands reach pod berth-[0-9a-f]{40}-[0-9a-f]{5} in namespace berth-sandboxes through the exec agent, on one pods\/exec WebSocket/m);
    assert.match(
      out.stdout,
      /^ok {4}task pods run each as a uid of its own from kubernetes\.task_uids \(1900000000-1916777215\) \(non-root\), no service-account token, seccomp RuntimeDefault, all capabilities dropped/m,
    );
    assert.match(out.stdout, /^warn {2}Kubernetes sets no per-pod process limit: the pids limit is the kubelet's/m);
    assert.match(out.stdout, /^ok {4}NetworkPolicy "berth-default-deny" in namespace "berth-sandboxes" holds Berth's rules$/m);
    assert.match(out.stdout, /^ok {4}release deleted the task's pod \(and its claims were removed\)$/m);
    // Its pod was deleted with a grace period of a second: wait for it to go.
    let left = '';
    for (let i = 0; i < 100; i++) {
      left = (await k.kubectl(['-n', NS, 'get', 'pods,persistentvolumeclaims', '-l', 'berth.dev/executor=doctor', '-o', 'name'])).stdout.trim();
      if (left === '') break;
      await sleep(100);
    }
    assert.equal(left, '', 'the doctor left nothing');
  });
});
