/**
 * An interrupt is never lost on the backends reached from afar (cases in
 * test/support/interrupt-stages.ts): ssh against a real sshd in a
 * container, with its exec agent relaying execute_code's socket (the
 * relay's start is a stage); singularity through the apptainer test double,
 * once with the sandbox image, whose exec agent relays execute_code's
 * socket (the relay's start is a stage), and once with an image without
 * python3, so scripts run in a per-task code container on the real Docker
 * engine (the container's start is a stage). Neither backend replaces a
 * lost sandbox (an ssh task's directory, a singularity instance): they have
 * no replacement stage.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { CodeContainers } from '../../services/executor/backends/docker/code-containers.js';
import { SingularityBackend } from '../../services/executor/backends/singularity/singularity-backend.js';
import { SshBackend } from '../../services/executor/backends/ssh/ssh-backend.js';
import { startSshd, type StartedSshd } from '../../services/cli/bench/sshd-container.js';
import { doubleBackendOptions, doubleImageWithoutPython, doubleState, doubleUnavailableReason } from '../support/apptainer-double.js';
import { dockerUnavailableReason, SANDBOX_IMAGE } from '../support/docker-fixtures.js';
import { runInterruptStages } from '../support/interrupt-stages.js';

const cleanup: string[] = [];
let sshd: StartedSshd | undefined;

runInterruptStages(
  'ssh',
  async () => {
    sshd = await startSshd();
    const stateDir = await mkdtemp(path.join(os.tmpdir(), 'bi-ssh-'));
    cleanup.push(stateDir);
    return new SshBackend({
      host: sshd.host,
      port: sshd.port,
      user: sshd.user,
      privateKey: sshd.keys.privateKey,
      knownHostsPath: path.join(stateDir, 'known_hosts'),
      pollIntervalMs: 100,
    });
  },
  { backend: 'ssh', relay: true, timeScale: 2 },
);

const docker = new Dockerode();
const unavailable = doubleUnavailableReason() ?? (await dockerUnavailableReason(docker));
if (unavailable) {
  describe('interrupts at every stage: singularity', { skip: unavailable }, () => {});
} else {
  const stateRoot = await mkdtemp(path.join(os.tmpdir(), 'bi-sing-'));
  cleanup.push(stateRoot);
  runInterruptStages(
    'singularity (exec agent)',
    async () => {
      const double = await doubleState();
      cleanup.push(double.stateDir);
      return SingularityBackend.start(doubleBackendOptions(double));
    },
    { backend: 'singularity', relay: true, timeScale: 2 },
  );
  runInterruptStages(
    'singularity (code containers)',
    async () => {
      const double = await doubleState();
      cleanup.push(double.stateDir);
      const image = await doubleImageWithoutPython(double);
      return SingularityBackend.start(doubleBackendOptions(double, { image }));
    },
    {
      backend: 'singularity',
      timeScale: 2,
      codeContainers: async () => {
        const containers = await CodeContainers.start({
          setting: 'docker',
          backend: 'singularity',
          docker: { image: SANDBOX_IMAGE, stateRoot, memoryMiB: 512, sweepIntervalMs: 0, logger: silentLogger() },
          logger: silentLogger(),
        });
        if (!containers) throw new Error('code containers did not start');
        return containers;
      },
    },
  );
}

after(async () => {
  await sshd?.stop();
  await Promise.all(cleanup.map((dir) => rm(dir, { recursive: true, force: true })));
});
