/**
 * The shared backend conformance suite on the modal backend, through the
 * pinned `modal` SDK and the Modal stand-in (a test double of Modal's
 * control plane, backed by the local Docker engine), started once for this
 * file and reached through MODAL_SERVER_URL only.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { ModalBackend } from '../../services/executor/backends/modal/modal-backend.js';
import { ModalEnvironment } from '../../services/executor/backends/modal/modal-environment.js';
import { runBackendConformance } from '../../services/conformance/backend-conformance.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { startModalStandin, type StandinProcess } from '../support/modal-standin-process.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
let standin: StandinProcess | undefined;
let stateDir: string | undefined;

if (unavailable) {
  describe('backend conformance: modal', { skip: unavailable }, () => {});
} else {
  runBackendConformance(
    'modal',
    async () => {
      standin = await startModalStandin();
      Object.assign(process.env, standin.env);
      stateDir = await mkdtemp(path.join(os.tmpdir(), 'berth-modal-conformance-'));
      return ModalBackend.start({ image: SANDBOX_IMAGE, stateDir, persistent: false, cpu: 1, memoryMiB: 1024, logger: silentLogger() });
    },
    {
      sharedHost: false,
      timeScale: 2,
      // The exec's stdin is closed from the executor's side; the agent lingers on its socket and the next exec bridges to it.
      dropAgentStream: async (env) => {
        if (!(env instanceof ModalEnvironment)) throw new Error(`not a modal environment: ${env.description}`);
        env.agentChannel.dropStream();
      },
      backgroundAfterDrop: 'survives',
      // Scripts run inside the sandbox through the agent's relay.
      executeCode: true,
      environmentExists: async (env) => {
        const sandboxId = (env as unknown as { sandboxId?: string }).sandboxId;
        if (!sandboxId) throw new Error(`not a modal environment: ${env.description}`);
        const list = await docker.listContainers({ all: true, filters: { label: [`berth.standin.sandbox=${sandboxId}`] } });
        return list.length > 0;
      },
    },
  );

  after(async () => {
    await standin?.stop();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });
}
