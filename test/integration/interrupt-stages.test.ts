/**
 * An interrupt is never lost, on the local and docker backends: a call held
 * at each stage it can wait in (quota admission, environment creation,
 * replacement of a lost container, the command itself) answers as
 * interrupted at once, and what it would have started never runs (the
 * cases are in test/support/interrupt-stages.ts). The docker backend
 * reaches the real engine through a socket that holds container creation
 * while a case asks it to; its containers are killed with the real engine.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, describe, it } from 'node:test';
import { Metadata } from 'nice-grpc';
import { errorBoundary } from '../../services/common/grpc-errors.js';
import { createInProcessClient } from '../../services/common/in-process-client.js';
import { CALL_ID_HEADER } from '../../services/common/interrupts.js';
import { CodeRunner } from '../../services/executor/code-execution/code-runner.js';
import { createExecutorService } from '../../services/executor/executor-service.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { ExecutorDefinition } from '../../services/gen/berth/v1/executor.js';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { DockerBackend } from '../../services/executor/backends/docker/docker-backend.js';
import { DockerEnvironment } from '../../services/executor/backends/docker/docker-environment.js';
import { LocalBackend } from '../../services/executor/backends/local/local-backend.js';
import { cleanupDocker, dockerUnavailableReason, heldCreateDockerProxy, SANDBOX_IMAGE } from '../support/docker-fixtures.js';
import { runInterruptStages } from '../support/interrupt-stages.js';

const roots: string[] = [];
const newRoot = async (name: string) => {
  const root = await mkdtemp(path.join(os.tmpdir(), `bi-${name}-`));
  roots.push(root);
  return root;
};

runInterruptStages(
  'local',
  async () => {
    const root = await newRoot('local');
    return new LocalBackend({ stateRoot: path.join(root, 't'), initialCwd: root });
  },
  { backend: 'local' },
);

describe('the executor: an InterruptTask that names a call before it arrives', () => {
  it('interrupts that call on arrival (nothing runs); a call of another id runs', async () => {
    const root = await newRoot('early');
    const logger = silentLogger();
    const envs = new TaskEnvironments({ backend: new LocalBackend({ stateRoot: path.join(root, 't'), initialCwd: root }), logger, lifetimeSeconds: 0 });
    const shutdown = new AbortController();
    const service = createExecutorService(envs, { executorId: 'early' }, shutdown.signal, new CodeRunner(envs, { logger }));
    const client = createInProcessClient(ExecutorDefinition, service, { middleware: errorBoundary(logger, shutdown.signal) });
    const task = { tenant: 'early', taskId: 'a' };
    const exec = async (callId: string, command: string) => {
      const stream = client.exec(
        { task, command, timeoutMs: 30_000, workdir: '', stdin: Buffer.alloc(0), pty: false, stateless: false, maxOutputChars: 0, streamOutput: false },
        { metadata: Metadata({ [CALL_ID_HEADER]: callId }) },
      );
      for await (const event of stream) if (event.event?.$case === 'exit') return event.event.value;
      throw new Error('no exit event');
    };
    try {
      assert.equal((await client.interruptTask({ task, callIds: ['call-early'] })).interrupted, 0);
      const late = await exec('call-early', `touch ${path.join(root, 'early')}`);
      assert.deepEqual([late.exitCode, late.interrupted, late.output], [130, true, '']);
      const other = await exec('call-other', `touch ${path.join(root, 'other')} && echo ran`);
      assert.deepEqual([other.exitCode, other.output], [0, 'ran\n']);
      assert.deepEqual([existsSync(path.join(root, 'early')), existsSync(path.join(root, 'other'))], [false, true]);
    } finally {
      shutdown.abort();
      await envs.closeAll();
    }
  });
});

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const tenant = `intr-docker-${randomBytes(4).toString('hex')}`;
let proxy: Awaited<ReturnType<typeof heldCreateDockerProxy>> | undefined;

if (unavailable) {
  describe('interrupts at every stage: docker', { skip: unavailable }, () => {});
} else {
  runInterruptStages(
    'docker',
    async () => {
      proxy = await heldCreateDockerProxy();
      return DockerBackend.start({
        image: SANDBOX_IMAGE,
        stateRoot: await newRoot('docker'),
        persistent: false,
        // Small: every case's task keeps its sandbox until the file ends, within the host's memory admission.
        memoryMiB: 1024,
        sweepIntervalMs: 0,
        socketPath: proxy.socketPath,
        logger: silentLogger(),
      });
    },
    {
      backend: 'docker',
      tenant,
      timeScale: 2,
      replacement: {
        async lose(env) {
          if (!(env instanceof DockerEnvironment)) throw new Error(`not a docker environment: ${env.description}`);
          await docker.getContainer(env.containerName).kill();
        },
        holdReplacement: () => proxy!.holdCreates(),
      },
    },
  );
}

after(async () => {
  if (!unavailable) await cleanupDocker(docker, tenant, roots);
  await proxy?.close();
  await Promise.all(roots.map((root) => rm(root, { recursive: true, force: true })));
});
