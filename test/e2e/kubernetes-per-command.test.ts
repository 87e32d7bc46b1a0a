/**
 * End to end on the kubernetes backend with an image without python3,
 * against the Kubernetes stand-in (a test double of a Kubernetes API server
 * whose pods are containers of the local Docker engine, not a cluster),
 * reached only through KUBECONFIG: `bin/berth serve` runs every command as
 * a `pods/exec` of its own and says so once in its log however many tasks
 * start, and `bin/berth doctor` says it as a warning. The image is built once
 * for this file FROM the local berth-sandbox image and removed afterwards.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import Dockerode from 'dockerode';
import { dockerUnavailableReason, runTaskIds } from '../support/docker-fixtures.js';
import { startKubernetesStandIn, type RunningKubernetesStandIn } from '../support/kubernetes-standin.js';
import { buildNoPythonImage, type NoPythonImage } from '../support/no-python-image.js';
import { BERTH_BIN, REPO_ROOT, startServe, type ServeProcess } from '../support/serve-process.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const { task } = runTaskIds();
const NS = 'berth-sandboxes';
const FALLBACK_LINE = /the exec agent cannot run here; commands start one process each \(slower\)/g;

describe('berth serve and doctor --backend kubernetes with an image without python3 (stand-in)', { skip: unavailable, timeout: 600_000 }, () => {
  let k: RunningKubernetesStandIn;
  let image: NoPythonImage;
  let serve: ServeProcess | undefined;
  let dir: string;
  let configFile: string;

  before(async () => {
    image = await buildNoPythonImage();
    k = await startKubernetesStandIn(['--namespace', NS, '--node-cpu', '64', '--node-memory', '64Gi']);
    dir = mkdtempSync(path.join(tmpdir(), 'berth-k8s-per-command-'));
    configFile = path.join(dir, 'berth.yaml');
    writeFileSync(
      configFile,
      [
        'terminal:',
        '  backend: kubernetes',
        `  kubernetes_image: ${image.tag}`,
        '  container_memory: 1024',
        '  container_disk: 2048',
        '  container_persistent: false',
        'kubernetes:',
        `  namespace: ${NS}`,
        '  executor_id: e2e-per-command',
        '',
      ].join('\n'),
    );
  });

  after(async () => {
    await serve?.stop();
    await k?.stopAndCheck();
    await image?.remove();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('commands run one pods/exec each, said once in the log for all tasks; execute_code says what to do', async () => {
    serve = await startServe(['--backend', 'kubernetes', '--config', configFile], { env: { KUBECONFIG: k.kubeconfig } });
    const s = serve;
    const call = async (tool: string, args: object, taskId: string) =>
      JSON.parse((await s.client.callTool({ name: tool, argumentsJson: JSON.stringify(args), taskId, sessionId: '' })).resultJson) as Record<string, unknown>;
    const [t1, t2] = [task('one'), task('two')];
    assert.deepEqual(await call('terminal', { command: 'cd /tmp && export X=1; command -v python3 || echo no-python' }, t1), { output: 'no-python', exit_code: 0, error: null, cwd: '/tmp' });
    assert.equal((await call('terminal', { command: 'echo "$X $(pwd)"' }, t1)).output, '1 /tmp');
    const timedOut = await call('terminal', { command: 'echo partial; sleep 30', timeout: 2 }, t1);
    assert.equal(timedOut.exit_code, 124);
    assert.equal((await call('terminal', { command: 'ps -eo args | grep -c "[s]leep 30" || true' }, t1)).output, '0');
    assert.equal((await call('terminal', { command: 'id -un' }, t2)).output, 'sandbox');
    // A tool error in the result, or Berth's refusal as the call's error: either way it says what to do.
    const code = await call('execute_code', { code: 'print(1)' }, t2).catch((err: unknown) => ({ error: (err as Error).message }));
    assert.match(JSON.stringify(code), /execute_code needs python3 in the task's pod.*kubernetes_image/);
    assert.equal(s.logs().match(FALLBACK_LINE)?.length, 1, 'said once for both tasks');
    await Promise.all([t1, t2].map((taskId) => s.client.endTask({ taskId })));
  });

  test('berth doctor --backend kubernetes warns that every command is a pods/exec of its own', async () => {
    let out: { code: number; stdout: string };
    try {
      const { stdout } = await promisify(execFile)(process.execPath, [BERTH_BIN, 'doctor', '--backend', 'kubernetes', '--config', configFile], {
        cwd: REPO_ROOT,
        // The state root in the test's own directory: the doctor's suspension keeps its archive there.
        env: { ...process.env, KUBECONFIG: k.kubeconfig, BERTH_STATE_ROOT: path.join(dir, 'state') },
        timeout: 180_000,
      });
      out = { code: 0, stdout };
    } catch (err) {
      const e = err as { code?: number; stdout?: string };
      out = { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '' };
    }
    assert.equal(out.code, 0, out.stdout);
    assert.match(out.stdout, /^ok {4}a new task runs a command/m);
    assert.match(
      out.stdout,
      new RegExp(`^warn {2}terminal\\.kubernetes_image "${image.tag.replace(/[.:]/g, '\\$&')}" cannot run the exec agent \\(.*\\): commands reach pod berth-\\S+ in namespace ${NS} one pods/exec each .*execute_code cannot run; use an image with python3`, 'm'),
    );
    assert.match(out.stdout, /^ok {4}release deleted the task's pod$/m);
  });
});
