/**
 * Failover and fencing on the docker backend: a dispatcher (in this process)
 * in front of two real `berth executor --backend docker` processes sharing
 * one state root (as two executors on one host do), tasks with persistent
 * volumes. An executor killed with SIGKILL: its task's next call gets one
 * error, the call after runs on the other executor with the task's files.
 * An executor stopped with SIGSTOP: the dispatcher gives up on it after its
 * configured health checks, the other executor takes the task over once the
 * stopped one's heartbeat is stale (docker.executor_stale_ms), and the
 * stopped one, continued, can no longer drive the task's container or touch
 * its host directory, not even when it drains and releases its environments.
 * Times to recovery are printed, never asserted.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Dockerode from 'dockerode';
import { createChannel, createClient, type Channel } from 'nice-grpc';
import { parseConfig } from '../../services/common/config-load.js';
import { silentLogger } from '../../services/common/logging.js';
import { startDispatcher, type RunningDispatcher } from '../../services/dispatcher/dispatcher-main.js';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { DispatcherDefinition, type DispatcherClient } from '../../services/gen/berth/v1/dispatcher.js';
import { startListeningChild, type ListeningChild } from '../../services/cli/bench/listening-child.js';
import { dockerUnavailableReason, removeLabelled } from '../support/docker-fixtures.js';
import { BERTH_BIN } from '../support/serve-process.js';
import { freePort } from '../support/free-port.js';
import { waitUntil } from '../support/host-processes.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const execFileAsync = promisify(execFile);
const SECRET = 'failover-fencing-test-secret';
const STALE_MS = 2000;
const run = randomBytes(4).toString('hex');

const until = (what: string, check: () => boolean | Promise<boolean>) => waitUntil(what, check, 30_000);

interface TerminalResult {
  output?: string;
  exit_code?: number;
  error?: string | null;
}

describe('failover and fencing between two docker executors', { skip: unavailable }, () => {
  let dir = '';
  let stateRoot = '';
  let configFile = '';
  const ports: number[] = [];
  const executors: ListeningChild[] = [];
  let dispatcher: RunningDispatcher;
  let channel: Channel;
  let client: DispatcherClient;
  const tasks: string[] = [];

  const address = (i: number) => `127.0.0.1:${ports[i]}`;
  const startExecutor = async (i: number) => {
    executors[i] = await startListeningChild({
      name: `berth executor ${i}`,
      args: [BERTH_BIN, 'executor', '--backend', 'docker', '--config', configFile, '--host', '127.0.0.1', '--port', String(ports[i])],
      env: { ...process.env, BERTH_LOG_LEVEL: 'warn' },
      startTimeoutMs: 60_000,
    });
  };
  const call = async (taskId: string, command: string) =>
    JSON.parse(
      (await client.callTool({ name: 'terminal', argumentsJson: JSON.stringify({ command }), taskId, sessionId: '' })).resultJson,
    ) as TerminalResult;
  const healthy = (i: number) => dispatcher.executors().find((e) => e.id === address(i))?.healthy === true;
  /** The task's containers: id and the pid of the executor that made it. */
  const containersOf = async (taskId: string) =>
    (await docker.listContainers({ all: true, filters: { label: [`${LABEL.task}=${taskId}`] } })).map((c) => ({
      id: c.Id,
      pid: Number(c.Labels[LABEL.executorPid]),
    }));
  const holderOf = async (taskId: string) => {
    const [container, ...more] = await containersOf(taskId);
    assert.ok(container && more.length === 0, `task ${taskId} has one container`);
    const i = executors.findIndex((e) => e.pid === container.pid);
    assert.ok(i >= 0, `the container of ${taskId} is one of the test's executors'`);
    return { i, other: 1 - i, containerId: container.id };
  };
  const newTask = (name: string) => {
    const id = `fencing-${name}-${run}`;
    tasks.push(id);
    return id;
  };
  const lostError = (taskId: string, i: number) =>
    new RegExp(`^The environment of task '${taskId}' was lost: its executor \\(${address(i).replace(/\./g, '\\.')}\\) stopped answering\\.`);

  before(async () => {
    dir = realpathSync(mkdtempSync(join(tmpdir(), 'berth-e2e-fencing-')));
    stateRoot = join(dir, 'state');
    configFile = join(dir, 'executor.yaml');
    writeFileSync(
      configFile,
      `executor: { shared_secret: ${SECRET}, state_root: ${stateRoot}, drain_grace_ms: 1000 }\n` +
        `docker: { network: none, executor_stale_ms: ${STALE_MS} }\n`,
    );
    ports.push(await freePort(), await freePort());
    await startExecutor(0);
    await startExecutor(1);
    const config = parseConfig({
      executors: [0, 1].map((i) => ({ address: address(i), backend: 'docker' })),
      executor: { shared_secret: SECRET },
      terminal: { backend: 'docker' },
      executor_health_interval_ms: 200,
      executor_health_timeout_ms: 300,
      executor_health_failures: 2,
    });
    dispatcher = await startDispatcher({
      config,
      logger: silentLogger(),
      host: '127.0.0.1',
      port: 0,
      executors: [0, 1].map((i) => ({ address: address(i), backend: 'docker' as const, sharedSecret: SECRET })),
    });
    channel = createChannel(dispatcher.address);
    client = createClient(DispatcherDefinition, channel);
  });

  after(async () => {
    channel?.close();
    await dispatcher?.close(0);
    for (const e of executors) {
      e.child.kill('SIGCONT');
      await e.stop('SIGKILL');
    }
    for (const id of tasks) await removeLabelled(docker, LABEL.task, id);
    await removeLabelled(docker, LABEL.stateRoot, stateRoot);
    rmSync(dir, { recursive: true, force: true });
  });

  test('SIGKILL: the next call gets one error, the call after runs on the other executor with the volume files', async () => {
    const task = newTask('kill');
    assert.deepEqual(await call(task, 'echo kept > /workspace/kept.txt && export MOOD=set'), { output: '', exit_code: 0, error: null });
    const { i, other, containerId } = await holderOf(task);

    const killedAt = performance.now();
    executors[i]!.child.kill('SIGKILL');
    await executors[i]!.exited;
    const lost = await call(task, 'cat /workspace/kept.txt');
    const errorMs = performance.now() - killedAt;
    assert.match(String(lost.error), lostError(task, i));
    assert.equal(lost.output, undefined, 'the one error is all the call returns');

    const after = await call(task, 'cat /workspace/kept.txt; echo "mood=$MOOD"');
    const recoveredMs = performance.now() - killedAt;
    assert.equal(after.error, null);
    assert.match(String(after.output), /^kept\nmood=$/m, 'the volume files are back; the shell variables are not');
    assert.match(String(after.output), /started anew/, 'the result says the environment was started anew');
    const now = await holderOf(task);
    assert.equal(now.i, other, 'the task runs on the other executor');
    assert.notEqual(now.containerId, containerId);
    console.log(
      `# failover after SIGKILL: the error ${Math.round(errorMs)} ms after the kill, ` +
        `the next successful call (a new container) ${Math.round(recoveredMs)} ms after it`,
    );

    // The killed executor comes back (same address) for the next test.
    await startExecutor(i);
    await until('the dispatcher sees the restarted executor', () => healthy(i));
  });

  test('SIGSTOP: the task moves to the other executor; continued, the stopped one cannot drive its container or host directory', async () => {
    const task = newTask('stop');
    assert.equal((await call(task, 'echo kept > /workspace/kept.txt')).error, null);
    const { i: stoppedIndex, other, containerId: oldContainer } = await holderOf(task);
    const stopped = executors[stoppedIndex]!;

    // A command in flight on the executor about to stop: it ends as the task's one error, and must never finish its write.
    const inFlight = call(task, 'touch /workspace/started; sleep 30; echo stale > /workspace/stale.txt').then(
      (result) => ({ result }),
      (err: unknown) => ({ err: err as Error }),
    );
    await until('the command in flight runs', async () =>
      execFileAsync('docker', ['exec', oldContainer, 'test', '-f', '/workspace/started']).then(
        () => true,
        () => false,
      ),
    );

    const stoppedAt = performance.now();
    stopped.child.kill('SIGSTOP');
    await until('the dispatcher takes the stopped executor out of rotation', () => !healthy(stoppedIndex));
    const outOfRotationMs = performance.now() - stoppedAt;
    // Out of rotation, the dispatcher ends the call in flight: the task's one error (not a wait for the executor).
    const settled = await inFlight;
    assert.match('err' in settled ? settled.err.message : String(settled.result.error), lostError(task, stoppedIndex));

    const moved = await call(task, 'cat /workspace/kept.txt; echo mine > /workspace/by-new-owner.txt; mkdir -p /workspace/sub; cd /workspace/sub');
    const recoveredMs = performance.now() - stoppedAt;
    assert.equal(moved.error, null, JSON.stringify(moved));
    assert.match(String(moved.output), /^kept$/m);
    const owner = await holderOf(task);
    assert.equal(owner.i, other, 'the other executor took the task over');
    assert.notEqual(owner.containerId, oldContainer, "the stopped executor's container was removed, not shared");
    console.log(
      `# failover after SIGSTOP: out of rotation after ${Math.round(outOfRotationMs)} ms, ` +
        `next successful call ${Math.round(recoveredMs)} ms after the stop (executor_stale_ms ${STALE_MS})`,
    );

    stopped.child.kill('SIGCONT');

    // Continued, it drains: releasing its environment must leave the new owner's container and host directory alone.
    stopped.child.kill('SIGTERM');
    assert.equal(await stopped.exited, 0);
    assert.deepEqual(await containersOf(task), [{ id: owner.containerId, pid: executors[other]!.pid }], "the new owner's container is untouched");
    const hostDir = (await docker.getContainer(owner.containerId).inspect()).Config.Labels[LABEL.hostDir]!;
    assert.ok(existsSync(join(hostDir, 'state')), "the task's host directory (the new owner's) is still there");
    assert.deepEqual(
      await call(task, 'pwd; cat /workspace/by-new-owner.txt /workspace/kept.txt; test -e /workspace/stale.txt && echo stale || echo no-stale'),
      { output: '/workspace/sub\nmine\nkept\nno-stale', exit_code: 0, error: null },
      "the new owner's files are intact and it still drives the task",
    );
  });
});
