/** The suspend/resume conformance cases on the docker backend (runc, and gVisor where runsc is registered), against the real engine. */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { DockerBackend } from '../../services/executor/backends/docker/docker-backend.js';
import { runSuspendConformance } from '../../services/conformance/suspend-conformance.js';
import { SANDBOX_IMAGE, cleanupDocker, dockerUnavailableReason } from '../support/docker-fixtures.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const tenant = `docker-suspend-${randomBytes(4).toString('hex')}`;
const stateRoots: string[] = [];

async function start(runtime: string): Promise<DockerBackend> {
  const stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-docker-suspend-'));
  stateRoots.push(stateRoot);
  return DockerBackend.start({ image: SANDBOX_IMAGE, stateRoot, persistent: false, sweepIntervalMs: 0, logger: silentLogger(), runtime });
}

if (unavailable) {
  describe('suspend conformance: docker', { skip: unavailable }, () => {});
} else {
  runSuspendConformance('docker', () => start(''), { tenant, timeScale: 2 });
  const runtimes = ((await docker.info()) as { Runtimes?: Record<string, unknown> }).Runtimes ?? {};
  if ('runsc' in runtimes) runSuspendConformance('docker (gVisor)', () => start('runsc'), { tenant, timeScale: 3 });
  after(async () => {
    await cleanupDocker(docker, tenant, stateRoots);
    await Promise.all(stateRoots.map((root) => rm(root, { recursive: true, force: true })));
  });
}
