/**
 * docker.start_concurrency against the real engine: with 1, three tasks'
 * first calls at once all succeed, and the engine is never asked to start
 * two of their containers at the same time. The engine's start requests are
 * observed where dockerode sends them (its Container.start, wrapped to note
 * when each request went out and when it was answered; the requests still
 * go to the engine).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { after, before, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { DockerBackend } from '../../services/executor/backends/docker/docker-backend.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { SANDBOX_IMAGE, cleanupDocker, containerOfTask, dockerUnavailableReason } from '../support/docker-fixtures.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const RUN = randomBytes(4).toString('hex');
const TENANT = `docker-gate-${RUN}`;

interface StartRequest {
  readonly id: string;
  readonly sent: number;
  readonly answered: number;
}

describe('docker.start_concurrency (real engine)', { skip: unavailable, timeout: 300_000 }, () => {
  let stateRoot: string;
  let backend: DockerBackend;
  let envs: TaskEnvironments;
  const requests: StartRequest[] = [];
  const prototype = Dockerode.Container.prototype as { start: (...args: unknown[]) => Promise<unknown> };
  const originalStart = prototype.start;

  before(async () => {
    prototype.start = async function (this: Dockerode.Container, ...args: unknown[]) {
      const sent = performance.now();
      try {
        return await originalStart.apply(this, args);
      } finally {
        requests.push({ id: this.id, sent, answered: performance.now() });
      }
    };
    stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-docker-gate-'));
    backend = await DockerBackend.start({
      image: SANDBOX_IMAGE,
      stateRoot,
      persistent: false,
      memoryMiB: 256,
      startConcurrency: 1,
      sweepIntervalMs: 0,
      logger: silentLogger(),
    });
    envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
  });
  after(async () => {
    prototype.start = originalStart;
    await envs?.closeAll();
    await backend?.close();
    await cleanupDocker(docker, TENANT, [stateRoot]);
    await rm(stateRoot, { recursive: true, force: true });
  });

  it('with 1, starts the containers of three new tasks one after another, and each first call succeeds', async () => {
    const keys: TaskKey[] = [1, 2, 3].map((n) => ({ tenant: TENANT, taskId: `gate-${RUN}-${n}` }));
    const results = await Promise.all(
      keys.map((key) => envs.exec(key, { command: 'echo started', timeoutMs: 120_000, maxOutputChars: 1000 })),
    );
    assert.deepEqual(
      results.map((r) => [r.exitCode, r.output.trim()]),
      keys.map(() => [0, 'started']),
    );
    const ids = await Promise.all(
      keys.map(async (key) => (await docker.getContainer((await containerOfTask(docker, key.taskId))!).inspect()).Id),
    );
    const ours = requests.filter((r) => ids.includes(r.id)).sort((a, b) => a.sent - b.sent);
    assert.equal(ours.length, 3, 'one start request per task container');
    for (let i = 1; i < ours.length; i++) {
      assert.ok(
        ours[i]!.sent >= ours[i - 1]!.answered,
        `start ${i + 1} was sent ${(ours[i - 1]!.answered - ours[i]!.sent).toFixed(0)} ms before start ${i} was answered`,
      );
    }
  });
});
