/**
 * terminal.container_disk on the docker backend, against real engines:
 * - the main engine, whatever its storage: `auto` runs the task and learns
 *   whether the limit holds; where it cannot, `require` refuses with the fix
 *   and leaves no container behind; `off` never asks;
 * - a private engine on btrfs (see test/support/quota-docker.ts), where
 *   Docker enforces the limit on a container: a command that writes past it
 *   fails with "Disk quota exceeded" inside the container, and the task goes
 *   on. Its local volumes cannot be capped, which exercises the per-part
 *   handling: `auto` caps the layer and runs, `require` refuses.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { FailedPreconditionError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { DockerBackend } from '../../services/executor/backends/docker/docker-backend.js';
import type { DockerBackendOptions } from '../../services/executor/backends/docker/docker-backend-options.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { SANDBOX_IMAGE, cleanupDocker, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { quotaDockerUnavailableReason, startQuotaDocker, type QuotaDocker } from '../support/quota-docker.js';

const RUN = randomBytes(4).toString('hex');
const TENANT = `disk-it-${RUN}`;
let taskNo = 0;
const newKey = (): TaskKey => ({ tenant: TENANT, taskId: `t${++taskNo}` });

const mainDocker = new Dockerode();
const mainUnavailable = await dockerUnavailableReason(mainDocker);

/** Backends of one engine, and what to clean up there. */
class Engine {
  readonly docker: Dockerode;
  readonly #socketPath: string | undefined;
  readonly #backends: DockerBackend[] = [];
  readonly #stateRoots: string[] = [];

  constructor(socketPath?: string) {
    this.#socketPath = socketPath;
    this.docker = new Dockerode(socketPath ? { socketPath } : undefined);
  }

  async backend(options: Partial<DockerBackendOptions>): Promise<{ backend: DockerBackend; envs: TaskEnvironments }> {
    const stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-disk-it-'));
    this.#stateRoots.push(stateRoot);
    const backend = await DockerBackend.start({
      image: SANDBOX_IMAGE,
      stateRoot,
      // The private engine lives in a network namespace of its own, where the executor's rules cannot reach.
      ...(this.#socketPath ? { socketPath: this.#socketPath, network: 'none' as const } : {}),
      persistent: false,
      memoryMiB: 512,
      sweepIntervalMs: 0,
      logger: silentLogger(),
      ...options,
    });
    this.#backends.push(backend);
    return { backend, envs: new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 }) };
  }

  async cleanup(): Promise<void> {
    await Promise.all(this.#backends.map((b) => b.close().catch(() => undefined)));
    await cleanupDocker(this.docker, TENANT, this.#stateRoots);
    await Promise.all(this.#stateRoots.map((r) => rm(r, { recursive: true, force: true })));
  }
}

async function run(envs: TaskEnvironments, key: TaskKey, command: string): Promise<{ output: string; exitCode: number }> {
  const r = await envs.exec(key, { command, timeoutMs: 60_000 });
  return { output: r.output, exitCode: r.exitCode };
}

/** Writes `mib` MiB of zeros to `file` and prints what dd said, then the exit status. */
const writeMiB = (file: string, mib: number) =>
  `dd if=/dev/zero of=${file} bs=1M count=${mib} 2>&1; echo "status=$?"; rm -f ${file}`;

const DISK_FULL = /No space left on device|Disk quota exceeded/;

describe('container_disk on the main engine', { skip: mainUnavailable }, () => {
  const engine = new Engine();
  after(() => engine.cleanup());

  it('auto: the task runs and the backend learns whether the daemon applies the limit; require refuses where it cannot', async () => {
    const auto = await engine.backend({ diskMiB: 1024, persistent: true, diskLimit: 'auto' });
    const key = newKey();
    assert.equal((await run(auto.envs, key, 'echo fine')).output, 'fine\n');
    const state = auto.backend.diskLimits;
    for (const part of ['layer', 'volumes'] as const) {
      assert.ok(state[part] === 'enforced' || state[part] === 'unsupported', `${part}: ${state[part]} after the first create`);
    }
    await auto.envs.closeAll();

    const strict = await engine.backend({ diskMiB: 1024, persistent: true, diskLimit: 'require' });
    const strictKey = newKey();
    if (state.layer === 'unsupported' || state.volumes === 'unsupported') {
      await assert.rejects(
        run(strict.envs, strictKey, 'echo never'),
        (err: unknown) =>
          err instanceof FailedPreconditionError &&
          /terminal\.container_disk \(1024 MiB\) cannot be applied/.test(err.message) &&
          /docker\.disk_limit: auto/.test(err.message),
      );
      const left = await engine.docker.listContainers({
        all: true,
        filters: { label: [`${LABEL.task}=${strictKey.taskId}`, `${LABEL.tenant}=${TENANT}`] },
      });
      assert.deepEqual(left, [], 'no container is left behind by a refused create');
    } else {
      assert.equal((await run(strict.envs, strictKey, 'echo enforced')).output, 'enforced\n');
    }
    await strict.envs.closeAll();
  });

  it('off: never asks, whatever the daemon can do', async () => {
    const off = await engine.backend({ diskMiB: 1024, diskLimit: 'off' });
    assert.equal((await run(off.envs, newKey(), 'echo ok')).output, 'ok\n');
    assert.deepEqual(off.backend.diskLimits, { layer: 'off', volumes: 'off' });
    await off.envs.closeAll();
  });
});

const quotaUnavailable = quotaDockerUnavailableReason();

describe('container_disk on an engine whose storage enforces it (btrfs driver)', { skip: quotaUnavailable }, () => {
  let quota: QuotaDocker;
  let engine: Engine;

  before(async () => {
    quota = await startQuotaDocker({ images: [SANDBOX_IMAGE] });
    engine = new Engine(quota.socketPath);
  });

  after(async () => {
    await engine?.cleanup();
    await quota?.stop();
  });

  // btrfs counts the image's files (about 200 MiB) against the limit too.
  const LIMIT_MIB = 512;

  it('a write past the limit fails inside the container; smaller writes and the next commands work', async () => {
    const { backend, envs } = await engine.backend({ diskMiB: LIMIT_MIB, persistent: false, diskLimit: 'require' });
    const key = newKey();
    const small = await run(envs, key, writeMiB('/workspace/small', 64));
    assert.match(small.output, /status=0/, small.output);
    const big = await run(envs, key, writeMiB('/workspace/big', 640));
    assert.match(big.output, DISK_FULL, big.output);
    assert.doesNotMatch(big.output, /status=0/);
    assert.match((await run(envs, key, writeMiB('/home/sandbox/big', 640))).output, DISK_FULL, 'home is in the same layer');
    assert.deepEqual(backend.diskLimits, { layer: 'enforced', volumes: 'off' });
    // The space is back once the file is gone, and the task goes on.
    assert.match((await run(envs, key, writeMiB('/workspace/again', 64))).output, /status=0/);
    // /tmp is a tmpfs of its own size, not part of the layer.
    assert.match((await run(envs, key, writeMiB('/tmp/scratch', 100))).output, /status=0/);
    await envs.closeAll();
  });

  it('persistent tasks: where volumes cannot be capped, auto caps the layer and says so; require refuses', async () => {
    const auto = await engine.backend({ diskMiB: LIMIT_MIB, persistent: true, diskLimit: 'auto' });
    const key = newKey();
    assert.equal((await run(auto.envs, key, 'echo kept > /workspace/note; cat /workspace/note')).output, 'kept\n');
    assert.deepEqual(auto.backend.diskLimits, { layer: 'enforced', volumes: 'unsupported' });
    await auto.envs.closeAll();

    const strict = await engine.backend({ diskMiB: LIMIT_MIB, persistent: true, diskLimit: 'require' });
    await assert.rejects(
      run(strict.envs, newKey(), 'echo never'),
      (err: unknown) =>
        err instanceof FailedPreconditionError &&
        /cannot be applied to a task's named volumes/.test(err.message) &&
        /quota size requested but no quota support/.test(err.message),
    );
    await strict.envs.closeAll();
  });
});
