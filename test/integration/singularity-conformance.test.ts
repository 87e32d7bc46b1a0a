/**
 * The shared backend conformance suite on the singularity backend, driven
 * through the apptainer test double (neither apptainer nor singularity can be
 * installed where these tests run).
 */
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { after } from 'node:test';
import { SingularityAgentEnvironment } from '../../services/executor/backends/singularity/singularity-agent-environment.js';
import { SingularityBackend } from '../../services/executor/backends/singularity/singularity-backend.js';
import { APPTAINER_DOUBLE, DOUBLE_IMAGE, doubleState, doubleUnavailableReason } from '../support/apptainer-double.js';
import { runBackendConformance } from '../../services/conformance/backend-conformance.js';

const skip = doubleUnavailableReason();
const cleanup: string[] = [];
let backend: SingularityBackend | undefined;

if (skip) {
  console.log(`# singularity conformance skipped: ${skip}`);
} else {
  runBackendConformance(
    'singularity',
    async () => {
      const double = await doubleState();
      cleanup.push(double.stateDir);
      const stateRoot = path.join(double.stateDir, 'berth');
      backend = await SingularityBackend.start({
        binary: APPTAINER_DOUBLE,
        image: DOUBLE_IMAGE,
        stateRoot,
        persistent: false,
        memoryMiB: 1024,
        cpus: 1,
        cliEnv: double.env,
      });
      return backend;
    },
    {
      sharedHost: false,
      timeScale: 2,
      // The agent keeps its background processes on its linger socket; the next start bridges to it.
      dropAgentStream: async (env) => {
        if (!(env instanceof SingularityAgentEnvironment)) throw new Error(`no exec agent in ${env.description}`);
        env.agentChannel.dropStream();
      },
      backgroundAfterDrop: 'survives',
      executeCode: true,
      environmentExists: async (env) => {
        const name = env.description.replace(/^singularity:/, '');
        return (await backend?.ownInstances())?.includes(name) ?? false;
      },
    },
  );
}

after(async () => {
  await Promise.all(cleanup.map((dir) => rm(dir, { recursive: true, force: true })));
});
