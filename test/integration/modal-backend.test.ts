/**
 * The modal backend's lifecycle through the pinned `modal` SDK and the Modal
 * stand-in (a test double of Modal's control plane, backed by the local
 * Docker engine), started once for this file: persistence across release,
 * an executor restart finding the task's sandbox by name, a sandbox lost
 * mid-task, renewal before the sandbox's timeout, the network policy, and
 * what a user reads when Modal says no (bad or missing token, unknown image,
 * quota).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { PassThrough } from 'node:stream';
import { createLogger, silentLogger } from '../../services/common/logging.js';
import type { BackendEnvironment, TaskKey } from '../../services/executor/backend.js';
import { ModalBackend, type ModalBackendOptions } from '../../services/executor/backends/modal/modal-backend.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { startModalStandin, type StandinProcess } from '../support/modal-standin-process.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);

async function run(env: BackendEnvironment, script: string): Promise<{ exitCode: number; output: string }> {
  let output = '';
  const r = await env.exec({ script, timeoutMs: 30_000, onOutput: (c) => (output += c.toString('utf8')) });
  return { exitCode: r.exitCode, output };
}

const sandboxIdOf = (env: BackendEnvironment) => (env as unknown as { sandboxId: string }).sandboxId;

async function containersOf(sandboxId: string): Promise<string[]> {
  const list = await docker.listContainers({ all: true, filters: { label: [`berth.standin.sandbox=${sandboxId}`] } });
  return list.map((c) => c.Id);
}

describe('modal backend', { skip: unavailable }, () => {
  let standin: StandinProcess;
  let stateDir: string;
  const backends: ModalBackend[] = [];
  const saved = { ...process.env };
  const key = (): TaskKey => ({ tenant: 'modal-test', taskId: `task-${randomBytes(4).toString('hex')}` });
  const start = async (extra: Partial<ModalBackendOptions> = {}) => {
    const backend = await ModalBackend.start({ image: SANDBOX_IMAGE, stateDir, cpu: 1, memoryMiB: 512, logger: silentLogger(), ...extra });
    backends.push(backend);
    return backend;
  };
  const restoreEnv = () => {
    for (const name of ['MODAL_SERVER_URL', 'MODAL_TOKEN_ID', 'MODAL_TOKEN_SECRET']) {
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    }
  };

  before(async () => {
    standin = await startModalStandin();
    Object.assign(process.env, standin.env);
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'berth-modal-backend-'));
  });

  after(async () => {
    await Promise.all(backends.map((b) => b.close().catch(() => undefined)));
    restoreEnv();
    await standin?.stop();
    await rm(stateDir, { recursive: true, force: true });
  });

  it('keeps a persistent task\'s files across release through a snapshot, and terminates the sandbox', { timeout: 120_000 }, async () => {
    const backend = await start({ persistent: true });
    const task = key();
    const first = await backend.createEnvironment(task);
    assert.equal((await run(first, 'echo kept > ~/notes.txt && pip_like=1; echo ok')).output, 'ok\n');
    const firstId = sandboxIdOf(first);
    await first.dispose();
    assert.deepEqual(await containersOf(firstId), [], 'the released sandbox was terminated');

    const second = await backend.createEnvironment(task);
    assert.notEqual(sandboxIdOf(second), firstId);
    assert.equal((await run(second, 'cat ~/notes.txt')).output, 'kept\n');
    await second.dispose();
  });

  it('suspends by terminating the sandbox after a snapshot of its files, and resumes in a new sandbox from it', { timeout: 120_000 }, async () => {
    const backend = await start({ persistent: false });
    const env = await backend.createEnvironment(key());
    await run(env, 'echo kept > ~/suspended.txt');
    const firstId = sandboxIdOf(env);
    assert.deepEqual(await env.suspend!(), { processesKept: false });
    assert.deepEqual(await containersOf(firstId), [], 'a suspended task holds no sandbox');
    await env.resume!();
    assert.notEqual(sandboxIdOf(env), firstId);
    assert.equal((await run(env, 'cat ~/suspended.txt')).output, 'kept\n');
    await env.dispose();
  });

  it('starts a non-persistent task afresh after release', { timeout: 120_000 }, async () => {
    const backend = await start({ persistent: false });
    const task = key();
    const first = await backend.createEnvironment(task);
    await run(first, 'echo gone > ~/notes.txt');
    await first.dispose();
    const second = await backend.createEnvironment(task);
    assert.equal((await run(second, 'cat ~/notes.txt 2>/dev/null || echo missing')).output, 'missing\n');
    await second.dispose();
  });

  it('finds the running sandbox of a task again after an executor restart', { timeout: 120_000 }, async () => {
    const task = key();
    const before = await (await start({ persistent: false })).createEnvironment(task);
    await run(before, 'echo from-before > /tmp/marker');
    // A new backend (a restarted executor) knows nothing of the first one's environments.
    const restarted = await start({ persistent: false });
    const after = await restarted.createEnvironment(task);
    assert.equal(sandboxIdOf(after), sandboxIdOf(before));
    assert.match(after.takeNotices?.().join(' ') ?? '', /was still running \(an earlier executor started it\)/);
    assert.equal((await run(after, 'cat /tmp/marker')).output, 'from-before\n');
    await after.dispose();
  });

  it("replaces an earlier executor's sandbox that can no longer run the exec agent", { timeout: 120_000 }, async () => {
    const task = key();
    const before = await (await start({ persistent: false })).createEnvironment(task);
    const oldId = sandboxIdOf(before);
    // Something in the sandbox took python3 away (as root, from outside).
    for (const id of await containersOf(oldId)) {
      const exec = await docker.getContainer(id).exec({ Cmd: ['sh', '-c', 'rm -f /usr/bin/python3*'], User: 'root' });
      await exec.start({});
      await sleep(500);
    }
    const after = await (await start({ persistent: false })).createEnvironment(task);
    assert.notEqual(sandboxIdOf(after), oldId);
    assert.match(after.takeNotices?.().join(' ') ?? '', /was still running but could not run the exec agent; a new sandbox was started/);
    assert.equal((await run(after, 'echo fresh')).output, 'fresh\n');
    assert.deepEqual(await containersOf(oldId), []);
    await after.dispose();
  });

  it('starts a new sandbox with a notice when the sandbox is gone mid-task', { timeout: 120_000 }, async () => {
    const backend = await start({ persistent: false });
    const env = await backend.createEnvironment(key());
    const lostId = sandboxIdOf(env);
    for (const id of await containersOf(lostId)) await docker.getContainer(id).remove({ force: true });
    const r = await run(env, 'echo still-works');
    assert.equal(r.output.trim().split('\n').pop(), 'still-works');
    assert.notEqual(sandboxIdOf(env), lostId);
    assert.match(env.takeNotices?.().join(' ') ?? '', /a new sandbox was started: background processes were stopped/);
    // The typed flag behind the terminal's environment_recreated key, handed out once.
    assert.deepEqual([env.takeRecreated?.(), env.takeRecreated?.()], [true, false]);
    await env.dispose();
  });

  it('renews a sandbox near its timeout from a snapshot of its files', { timeout: 120_000 }, async () => {
    const backend = await start({ persistent: false, sandboxTimeoutMs: 30_000 });
    const env = await backend.createEnvironment(key());
    await run(env, 'echo survives > ~/renewal.txt');
    const oldId = sandboxIdOf(env);
    // Renewal is due 7.5 s before the 30 s timeout.
    await sleep(23_000);
    assert.equal((await run(env, 'cat ~/renewal.txt')).output, 'survives\n');
    assert.notEqual(sandboxIdOf(env), oldId);
    assert.match(env.takeNotices?.().join(' ') ?? '', /reached the end of its 30-second lifetime; a new sandbox was started from a snapshot/);
    assert.equal(env.takeRecreated?.(), true);
    assert.deepEqual(await containersOf(oldId), []);
    await env.dispose();
  });

  it('blocks the network for egress none and keeps credentials out of the sandbox', { timeout: 120_000 }, async () => {
    const backend = await start({ persistent: false, network: { egress: 'none', egressAllow: [] } });
    const env = await backend.createEnvironment(key());
    assert.equal((await run(env, 'ls /sys/class/net')).output, 'lo\n');
    assert.equal((await run(env, 'env | grep -c MODAL_ || true')).output, '0\n');
    await env.dispose();
  });

  it("logs at start which tenant's network policy Modal cannot apply", { timeout: 60_000 }, async () => {
    const log = new PassThrough();
    let text = '';
    log.on('data', (d: Buffer) => (text += d.toString('utf8')));
    await start({
      network: { egress: 'open', egressAllow: [] },
      tenantNetworks: { acme: { egress: 'public-only' }, quiet: { egress: 'none' } },
      logger: createLogger('warn', log),
    });
    const warnings = text
      .split('\n')
      .filter(Boolean)
      .map((line) => (JSON.parse(line) as { msg: string }).msg);
    assert.deepEqual(
      warnings.filter((m) => m.startsWith('network policy')),
      [
        "network policy of tenant acme: egress public-only has no Modal option: the sandbox gets open egress (it has no route into the executor's networks; private ranges on Modal's side are not blocked by Berth)",
      ],
    );
  });

  it('fails an image Modal cannot build with the image and the fix, leaving nothing running', { timeout: 60_000 }, async () => {
    const backend = await start({ image: 'berth-no-such-image:1', persistent: false });
    await assert.rejects(backend.createEnvironment(key()), (err: Error) => {
      assert.equal(err.name, 'FailedPreconditionError');
      assert.match(err.message, /^Modal could not build terminal.modal_image "berth-no-such-image:1" while creating the sandbox of task/);
      assert.match(err.message, /check the image name and that Modal can pull it/);
      return true;
    });
  });

  it("says when Modal's quota is reached, naming Modal, and leaves the task without a sandbox", { timeout: 120_000 }, async () => {
    const limited = await startModalStandin(['--max-sandboxes', '1']);
    try {
      // The SDK reads its settings when the client is made: this backend talks to the limited stand-in.
      Object.assign(process.env, limited.env);
      const backend = await start({ persistent: false });
      Object.assign(process.env, standin.env);
      const first = await backend.createEnvironment(key());
      await assert.rejects(backend.createEnvironment(key()), (err: Error) => {
        assert.equal(err.name, 'ResourceExhaustedError');
        assert.match(err.message, /^Modal has no capacity or quota left while creating the sandbox of task modal-test\/task-[0-9a-f]+: the workspace's limit of 1 running sandboxes is reached/);
        return true;
      });
      await first.dispose();
      // With the first one gone there is room again.
      const again = await backend.createEnvironment(key());
      await again.dispose();
    } finally {
      Object.assign(process.env, standin.env);
      await limited.stop();
    }
  });

  it('refuses to start with a bad token or none, naming Modal and the fix', { timeout: 60_000 }, async () => {
    try {
      process.env.MODAL_TOKEN_SECRET = 'as-wrong';
      await assert.rejects(start(), /^FailedPreconditionError: Modal refused the credentials while looking up the app berth .*check MODAL_TOKEN_ID and MODAL_TOKEN_SECRET/);
      delete process.env.MODAL_TOKEN_ID;
      delete process.env.MODAL_TOKEN_SECRET;
      await assert.rejects(start(), /Modal credentials are missing: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET/);
    } finally {
      Object.assign(process.env, standin.env);
    }
  });
});
