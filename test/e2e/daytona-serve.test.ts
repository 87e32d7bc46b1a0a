/**
 * End to end on the daytona backend, against the Daytona stand-in (a test
 * double of Daytona's API backed by the local Docker engine, not the
 * cloud): `bin/berth serve --backend daytona` and `bin/berth doctor
 * --backend daytona` as child processes, pointed at the stand-in only with
 * the SDK's own settings (DAYTONA_API_URL, DAYTONA_API_KEY, DAYTONA_TARGET).
 * The README flow, a timeout, an interrupt, a background process, persistence across
 * EndTask (stop, then start on next use), and a bad key. The stand-in
 * removes every container it made when it stops.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Daytona } from '@daytonaio/sdk';
import Dockerode from 'dockerode';
import { sandboxName } from '../../services/executor/backends/daytona/daytona-backend.js';
import { SANDBOX_IMAGE, dockerUnavailableReason, runTaskIds } from '../support/docker-fixtures.js';
import { startDaytonaStandIn, type RunningStandIn } from '../support/daytona-standin.js';
import { BERTH_BIN, REPO_ROOT, startServe, type ServeProcess } from '../support/serve-process.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const { task } = runTaskIds();

describe('berth serve and doctor --backend daytona against the stand-in', { skip: unavailable, timeout: 600_000 }, () => {
  let standIn: RunningStandIn;
  let serve: ServeProcess;
  let client: Daytona;
  let daytonaEnv: NodeJS.ProcessEnv;

  before(async () => {
    standIn = await startDaytonaStandIn();
    daytonaEnv = {
      DAYTONA_API_KEY: standIn.apiKey,
      DAYTONA_API_URL: standIn.apiUrl,
      DAYTONA_TARGET: 'stand-in',
      TERMINAL_DAYTONA_IMAGE: SANDBOX_IMAGE,
      TERMINAL_CONTAINER_PERSISTENT: 'true',
    };
    serve = await startServe(['--backend', 'daytona'], { env: daytonaEnv });
    client = new Daytona({ apiKey: standIn.apiKey, apiUrl: standIn.apiUrl, target: 'stand-in' });
  });

  after(async () => {
    await serve?.stop();
    await client?.[Symbol.asyncDispose]();
    assert.equal(await standIn?.stop(), 0);
    assert.deepEqual(await docker.listContainers({ all: true, filters: { label: [standIn.containerLabel] } }), []);
  });

  /** `berth call`, which exits 1 when the command ran and failed (docs/ci.md). */
  const call = async (tool: string, args: object, taskId: string, exitStatus = 0) => {
    const r = await serve.cli(['call', tool, JSON.stringify(args), '--task', taskId], { timeoutMs: 120_000 });
    assert.equal(r.code, exitStatus, r.stderr);
    return JSON.parse(r.stdout) as Record<string, unknown>;
  };
  const sandboxOf = (taskId: string) => client.get(sandboxName({ tenant: 'default', taskId }));

  test('the README flow runs in a Daytona sandbox', async () => {
    const t1 = task('readme');
    const who = await call('terminal', { command: 'id -un; pwd' }, t1);
    assert.deepEqual([who.exit_code, who.output], [0, 'sandbox\n/workspace']);
    const sandbox = await sandboxOf(t1);
    assert.deepEqual([sandbox.state, sandbox.labels['berth.task']], ['started', t1]);

    await call('terminal', { command: 'mkdir -p /workspace/proj && cd /workspace/proj && export GREETING=hello' }, t1);
    assert.deepEqual(await call('terminal', { command: 'pwd; echo $GREETING' }, t1), {
      output: '/workspace/proj\nhello',
      exit_code: 0,
      error: null,
    });
    const w = await call('write_file', { path: 'notes with space.txt', content: 'alpha\nbeta\n' }, t1);
    assert.equal(w.bytes_written, 11);
    const rd = await call('read_file', { path: '/workspace/proj/notes with space.txt' }, t1);
    assert.match(String(rd.content), /^1\|alpha\n2\|beta/);
    // The executor's Daytona credentials never reach the sandbox.
    const env = await call('terminal', { command: 'env | grep -c DAYTONA_ || true' }, t1);
    assert.equal(env.output, '0');
    const other = task('other');
    assert.equal((await call('terminal', { command: 'echo "[$GREETING]"' }, other)).output, '[]');
  });

  test('background processes, timeouts and an interrupt; EndTask stops the sandbox and the next use finds the files', async () => {
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
    assert.equal(kill.status, 'killed');

    const timedOut = await call('terminal', { command: 'echo partial; sleep 30', timeout: 2 }, t2, 1);
    assert.equal(timedOut.exit_code, 124);
    assert.match(String(timedOut.output), /partial[\s\S]*Command timed out after 2s/);
    assert.equal((await call('terminal', { command: 'ps -eo args | grep -c "[s]leep 30" || true' }, t2)).output, '0');

    // Interrupt through the server: the command's process group in the sandbox is killed, 130.
    const running = serve.client.callTool({
      name: 'terminal',
      argumentsJson: JSON.stringify({ command: 'echo started; sleep 999' }),
      taskId: t2,
      sessionId: '',
    });
    for (let i = 0; i < 100; i++) {
      const r = await serve.client.interrupt({ taskId: t2 });
      if (r.interrupted > 0) break;
      await sleep(100);
    }
    const interrupted = JSON.parse((await running).resultJson) as Record<string, unknown>;
    assert.equal(interrupted.exit_code, 130);
    assert.match(String(interrupted.output), /\[Command interrupted\]$/);
    assert.equal((await call('terminal', { command: 'ps -eo args | grep -c "[s]leep 999" || true' }, t2)).output, '0');

    await call('write_file', { path: '/workspace/kept.txt', content: 'kept\n' }, t2);
    const id = (await sandboxOf(t2)).id;
    assert.equal((await serve.client.endTask({ taskId: t2 })).released, true);
    assert.equal((await sandboxOf(t2)).state, 'stopped');
    // Persistent: the same task starts the same sandbox again, with its files.
    assert.equal((await call('terminal', { command: 'cat /workspace/kept.txt' }, t2)).output, 'kept');
    const again = await sandboxOf(t2);
    assert.deepEqual([again.id, again.state], [id, 'started']);
    await serve.client.endTask({ taskId: t2 });
  });

  const doctor = async (env: NodeJS.ProcessEnv) => {
    try {
      const { stdout } = await promisify(execFile)(process.execPath, [BERTH_BIN, 'doctor', '--backend', 'daytona'], {
        cwd: REPO_ROOT,
        env: { ...process.env, ...daytonaEnv, ...env },
        timeout: 180_000,
      });
      return { code: 0, stdout };
    } catch (err) {
      const e = err as { code?: number; stdout?: string };
      return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '' };
    }
  };

  test('berth doctor --backend daytona checks credentials, a command, release, the lifecycle and the network policy', async () => {
    const ok = await doctor({});
    assert.equal(ok.code, 0, ok.stdout);
    assert.match(ok.stdout, /^ok {4}the daytona backend starts$/m);
    assert.match(ok.stdout, /^ok {4}a new task runs a command \(\d+ ms, as uid 1000\)$/m);
    assert.match(ok.stdout, /^ok {4}commands reach the Daytona sandbox through the exec agent, over one PTY session$/m);
    assert.match(ok.stdout, /^ok {4}lifecycle of the daytona backend: snapshot yes, processes in snapshots no, suspend yes$/m);
    // The default policy (isolated, public-only) has no Daytona equivalent: said, not hidden.
    assert.match(ok.stdout, /^warn {2}daytona backend: docker\.egress public-only: Daytona has no way to block only private ranges/m);
    // Persistent mode would only stop the doctor's sandbox: it deletes it.
    const left: string[] = [];
    for await (const s of client.list({ labels: { 'berth.tenant': 'berth-doctor' } })) {
      // Daytona finishes a deletion after it answers.
      if (s.state !== 'destroying' && s.state !== 'destroyed') left.push(`${s.id} (${s.state})`);
    }
    assert.deepEqual(left, []);

    const bad = await doctor({ DAYTONA_API_KEY: 'not-the-key' });
    assert.equal(bad.code, 1, bad.stdout);
    assert.match(
      bad.stdout,
      /^fail {2}the daytona backend does not start: Daytona refused the API key while listing sandboxes \(checking the credentials\) \(Invalid credentials\): set DAYTONA_API_KEY/m,
    );
  });
});
