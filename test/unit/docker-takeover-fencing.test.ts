/**
 * Fencing on the docker backend, as the old owner sees it: an executor judged
 * gone (stopped past docker.executor_stale_ms) whose task another executor
 * took over runs again. Its container was removed by the new owner; the
 * task's host directory (the same path, by the task's name) is now the new
 * owner's. The environment here is the real DockerEnvironment over a
 * container double; whether another executor holds the name is what Docker
 * would say (test/e2e/failover-docker.test.ts does it with two real executors).
 */
import { afterEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../../services/common/logging.js';
import type { ContainerFactory } from '../../services/executor/backends/docker/container-factory.js';
import { DockerEnvironment } from '../../services/executor/backends/docker/docker-environment.js';
import type { SandboxContainer } from '../../services/executor/backends/docker/sandbox-container.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** The old owner's environment: its container gone (removed by the new owner), its channel lost. */
function oldOwner(heldByAnother: () => Promise<boolean>) {
  const hostDir = mkdtempSync(join(tmpdir(), 'berth-unit-fencing-'));
  dirs.push(hostDir);
  writeFileSync(join(hostDir, 'new-owner-state'), 'cwd=/workspace/sub\n');
  const started: string[] = [];
  const container = {
    name: 'berth-acme-t1',
    id: 'old-container',
    hostDir,
    channel: { isLost: true, recover: () => Promise.resolve(false) },
    fate: () => Promise.resolve({ exists: false, running: false }),
    remove: () => Promise.resolve(),
  } as unknown as SandboxContainer;
  const factory = {
    start: (spec: { name: string }) => {
      started.push(spec.name);
      return Promise.reject(new Error('a container was started'));
    },
  } as unknown as ContainerFactory;
  const env = new DockerEnvironment(container, {
    key: { tenant: 'acme', taskId: 't1' },
    containerName: 'berth-acme-t1',
    factory,
    labels: () => ({}),
    initialCwd: '/workspace',
    homeDir: '/home/sandbox',
    killGraceMs: 100,
    memoryMiB: 512,
    pidsLimit: 256,
    logger: silentLogger(),
    ownsHostDir: true,
    onDisposed: () => undefined,
    onRemoveFailed: () => undefined,
    heldByAnother,
  });
  return { env, hostDir, started };
}

describe('docker: an old owner continued after a takeover', () => {
  test("its next operation is UNAVAILABLE naming the takeover; it starts no container and leaves the new owner's host directory", async () => {
    const { env, hostDir, started } = oldOwner(() => Promise.resolve(true));
    await assert.rejects(
      env.stat('/workspace'),
      (err: Error & { code?: string }) =>
        err.code === 'UNAVAILABLE' && /was taken over by another executor while this one counted as gone/.test(err.message),
    );
    assert.deepEqual(started, [], 'no second container for the task');
    await env.dispose();
    assert.equal(readFileSync(join(hostDir, 'new-owner-state'), 'utf8'), 'cwd=/workspace/sub\n', 'its release left the host directory alone');
  });

  test('when Docker cannot say who holds the name, the release still leaves the host directory', async () => {
    const { env, hostDir } = oldOwner(() => Promise.reject(new Error('daemon unreachable')));
    await env.dispose();
    assert.ok(existsSync(join(hostDir, 'new-owner-state')));
  });

  test('with no other holder, the release removes the host directory it owns', async () => {
    const { env, hostDir } = oldOwner(() => Promise.resolve(false));
    await env.dispose();
    assert.equal(existsSync(hostDir), false);
  });
});
