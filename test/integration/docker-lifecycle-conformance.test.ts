/**
 * The lifecycle cases of the conformance suite (snapshots, forks) on the
 * docker backend against the real engine, with persistent volumes (the
 * default: snapshots copy them) and without (the container's own layer),
 * and under gVisor where runsc is registered (scripts/ensure-docker.sh
 * registers it where Debian ships it).
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { DockerBackend } from '../../services/executor/backends/docker/docker-backend.js';
import { runLifecycleConformance } from '../../services/conformance/lifecycle-conformance.js';
import { SANDBOX_IMAGE, cleanupDocker, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { removeSnapshotImages } from '../support/snapshot-fixtures.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const tenant = `docker-lifecycle-${randomBytes(4).toString('hex')}`;
const stateRoots: string[] = [];

if (unavailable) {
  describe('backend conformance: docker lifecycle', { skip: unavailable }, () => {});
} else {
  const runtimes = ((await docker.info()) as { Runtimes?: Record<string, unknown> }).Runtimes ?? {};
  const variants = [
    { name: 'docker', persistent: true, runtime: '', suffix: '', timeScale: 2 },
    { name: 'docker-layer', persistent: false, runtime: '', suffix: '-layer', timeScale: 2 },
    ...('runsc' in runtimes ? [{ name: 'docker-gvisor', persistent: true, runtime: 'runsc', suffix: '-gvisor', timeScale: 3 }] : []),
  ];
  for (const v of variants) {
    runLifecycleConformance(
      v.name,
      async () => {
        const stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-docker-lifecycle-'));
        stateRoots.push(stateRoot);
        // 1 GiB containers: the suite keeps a dozen alive at once, more than docker.memory_overcommit admits at 5 GiB on a small host.
        return DockerBackend.start({
          image: SANDBOX_IMAGE,
          stateRoot,
          persistent: v.persistent,
          runtime: v.runtime,
          memoryMiB: 1024,
          sweepIntervalMs: 0,
          logger: silentLogger(),
        });
      },
      { snapshots: true, tenant: `${tenant}${v.suffix}`, timeScale: v.timeScale },
    );
  }

  after(async () => {
    for (const v of variants) for (const t of [`${tenant}${v.suffix}`, `${tenant}${v.suffix}-other`]) await cleanupDocker(docker, t, stateRoots);
    await removeSnapshotImages(docker, stateRoots);
    for (const root of stateRoots) await rm(root, { recursive: true, force: true });
  });
}
