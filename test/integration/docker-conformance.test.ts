/** The shared backend conformance suite on the docker backend, against the real engine. */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import type { BackendEnvironment } from '../../services/executor/backend.js';
import { DockerBackend } from '../../services/executor/backends/docker/docker-backend.js';
import { DockerEnvironment } from '../../services/executor/backends/docker/docker-environment.js';
import { AgentChannel } from '../../services/executor/backends/shared/agent/agent-channel.js';
import { runBackendConformance } from '../../services/conformance/backend-conformance.js';
import { SANDBOX_IMAGE, cleanupDocker, containerState, dockerUnavailableReason } from '../support/docker-fixtures.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const tenant = `docker-conformance-${randomBytes(4).toString('hex')}`;
let stateRoot: string | undefined;

if (unavailable) {
  describe('backend conformance: docker', { skip: unavailable }, () => {});
} else {
  runBackendConformance(
    'docker',
    async () => {
      stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-docker-conformance-'));
      return DockerBackend.start({
        image: SANDBOX_IMAGE,
        stateRoot,
        persistent: false,
        sweepIntervalMs: 0,
        logger: silentLogger(),
      });
    },
    {
      sharedHost: false,
      tenant,
      timeScale: 2,
      // The agent (PID 1) keeps its background processes and dials in again; the channel binds them anew.
      dropAgentStream: async (env: BackendEnvironment) => {
        if (!(env instanceof DockerEnvironment)) throw new Error(`not a docker environment: ${env.description}`);
        const channel = env.container.channel;
        if (!(channel instanceof AgentChannel)) throw new Error(`no exec agent in ${env.description}`);
        channel.dropStream();
      },
      backgroundAfterDrop: 'survives',
      executeCode: true,
      environmentExists: async (env: BackendEnvironment) => {
        if (!(env instanceof DockerEnvironment)) throw new Error(`not a docker environment: ${env.description}`);
        return (await containerState(docker, env.containerName)) !== undefined;
      },
    },
  );

  after(async () => {
    await cleanupDocker(docker, tenant, stateRoot ? [stateRoot] : []);
    if (stateRoot) await rm(stateRoot, { recursive: true, force: true });
  });
}
