/**
 * terminal.container_disk where Docker cannot enforce it (overlay2 over ext4,
 * local volumes without quotas): Berth measures each task's writable layer
 * and named volumes, and once a task holds more than the limit its next
 * command, background process or file write is refused RESOURCE_EXHAUSTED
 * with a message starting `terminal.container_disk:`. Reading its files still
 * works, ending the task frees the space, and other tasks (of its tenant or
 * another) are unaffected. Against the real engine of this host.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { ResourceExhaustedError, isInfrastructureError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { DockerBackend } from '../../services/executor/backends/docker/docker-backend.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { SANDBOX_IMAGE, cleanupDocker, dockerUnavailableReason } from '../support/docker-fixtures.js';

const RUN = randomBytes(4).toString('hex');
const TENANT_A = `meter-a-${RUN}`;
const TENANT_B = `meter-b-${RUN}`;
const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);

const LIMIT_MIB = 64;
const refused = (err: unknown): boolean =>
  err instanceof ResourceExhaustedError &&
  isInfrastructureError(err) &&
  /^terminal\.container_disk: task meter-a-\w+\/t\d+ uses \d+ MiB of disk .*past its limit of 64 MiB/.test(err.message) &&
  /End the task to free its container's disk .*volumes labelled with its berth\.tenant and berth\.task/.test(err.message);

describe('container_disk measured by Berth where Docker cannot enforce it', { skip: unavailable }, () => {
  let stateRoot = '';
  let backend: DockerBackend | undefined;
  let envs: TaskEnvironments | undefined;

  after(async () => {
    await envs?.closeAll().catch(() => undefined);
    await backend?.close().catch(() => undefined);
    await cleanupDocker(docker, TENANT_A, stateRoot ? [stateRoot] : []);
    await cleanupDocker(docker, TENANT_B, []);
    if (stateRoot) await rm(stateRoot, { recursive: true, force: true });
  });

  const run = async (key: TaskKey, command: string) => (await envs!.exec(key, { command, timeoutMs: 60_000 })).output;

  it('a task past the limit in /workspace or its home is refused its next call; others go on', async () => {
    stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-disk-meter-'));
    backend = await DockerBackend.start({
      image: SANDBOX_IMAGE,
      stateRoot,
      persistent: true,
      memoryMiB: 256,
      diskMiB: LIMIT_MIB,
      diskLimit: 'auto',
      diskMeterCacheMs: 0,
      diskCheckIntervalMs: 200,
      sweepIntervalMs: 0,
      logger: silentLogger(),
    });
    envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
    const workspaceTask: TaskKey = { tenant: TENANT_A, taskId: 't1' };
    const homeTask: TaskKey = { tenant: TENANT_A, taskId: 't2' };
    const small: TaskKey = { tenant: TENANT_A, taskId: 't3' };
    const other: TaskKey = { tenant: TENANT_B, taskId: 't1' };

    assert.equal(await run(workspaceTask, 'echo started'), 'started\n');
    const state = backend.diskLimits;
    // This test is about hosts where Docker cannot cap both parts; where it can, docker-disk-limit.test.ts covers it.
    assert.ok(state.layer === 'unsupported' || state.volumes === 'unsupported', `Docker enforces the limit here: ${JSON.stringify(state)}`);

    // Past the limit in /workspace: the write itself succeeds (nothing caps it), the next call is refused.
    assert.match(await run(workspaceTask, 'fallocate -l 80M /workspace/big && echo wrote'), /wrote/);
    await assert.rejects(run(workspaceTask, 'echo never'), refused);
    await assert.rejects(envs.writeFile(workspaceTask, '/workspace/x', 'x'), refused);
    await assert.rejects(envs.startBackground(workspaceTask, { command: 'sleep 100' }), refused);
    // The task's files can still be read.
    assert.equal((await envs.stat(workspaceTask, '/workspace/big')).sizeBytes, 80 * 1024 * 1024);

    // Past it in the home, with dd.
    assert.match(await run(homeTask, 'dd if=/dev/zero of=$HOME/big bs=1M count=80 status=none && echo wrote'), /wrote/);
    await assert.rejects(run(homeTask, 'echo never'), refused);

    // Files hidden from the measure (a directory its owner made unreadable) do not escape it: refused too.
    const hidden: TaskKey = { tenant: TENANT_A, taskId: 't4' };
    assert.match(await run(hidden, 'mkdir ~/hid && echo x > ~/hid/f && chmod 000 ~/hid && echo hid'), /hid/);
    await assert.rejects(
      run(hidden, 'echo never'),
      (err: unknown) =>
        err instanceof ResourceExhaustedError &&
        /^terminal\.container_disk: the disk task meter-a-\w+\/t4 uses cannot be measured/.test(err.message) &&
        /Permission denied/.test(err.message),
    );

    // Under the limit, and another tenant's task: unaffected.
    assert.match(await run(small, 'dd if=/dev/zero of=/workspace/f bs=1M count=8 status=none && echo fine'), /fine/);
    assert.equal(await run(small, 'echo still'), 'still\n');
    assert.equal(await run(other, 'echo other'), 'other\n');
    await envs.writeFile(other, '/workspace/note', 'ok');

    // A background process that writes past the limit between calls is stopped, with a notice.
    const writer: TaskKey = { tenant: TENANT_A, taskId: 't5' };
    await envs.startBackground(writer, { command: 'sleep 1; fallocate -l 80M /workspace/bg; exec sleep 1000' });
    const writerEnv = backend.environmentOf(writer)!;
    let notices: string[] = [];
    while (notices.length === 0) {
      await new Promise((r) => setTimeout(r, 100));
      notices = writerEnv.takeNotices();
    }
    assert.match(notices.join('\n'), /^Background processes were stopped: terminal\.container_disk: task meter-a-\w+\/t5 uses/);
    const top = await docker.getContainer(writerEnv.container.id).top();
    assert.ok(!top.Processes.some((p: string[]) => p.join(' ').includes('sleep 1000')), JSON.stringify(top.Processes));

    // berth doctor's line: measured by Berth, with what the task uses.
    const findings = await backend.diagnose(small, 'live');
    const measured = findings.find((f) => /terminal\.container_disk is measured by Berth/.test(f.text));
    assert.equal(measured?.verdict, 'ok', JSON.stringify(findings));
    assert.match(measured.text, /this task uses \d+ MiB$/);

    // Ending the task frees it: the same task id starts anew with its volumes removed.
    await envs.release(workspaceTask);
    await backend.removeTaskVolumes(workspaceTask);
    assert.equal(await run(workspaceTask, 'ls /workspace | wc -l'), '0\n');
  });
});
