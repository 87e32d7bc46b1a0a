/**
 * The shared backend conformance suite on the daytona backend, through the
 * real SDK against the Daytona stand-in (a test double backed by the local
 * Docker engine, not the cloud).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe } from 'node:test';
import Dockerode from 'dockerode';
import { DaytonaEnvironment } from '../../services/executor/backends/daytona/daytona-environment.js';
import { AgentChannel } from '../../services/executor/backends/shared/agent/agent-channel.js';
import { runBackendConformance } from '../../services/conformance/backend-conformance.js';
import { dockerUnavailableReason } from '../support/docker-fixtures.js';
import { startDaytonaStandIn, startStandInBackend, type RunningStandIn } from '../support/daytona-standin.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
let standIn: RunningStandIn | undefined;

if (unavailable) {
  describe('backend conformance: daytona (stand-in)', { skip: unavailable }, () => {});
} else {
  before(async () => {
    standIn = await startDaytonaStandIn();
  });
  runBackendConformance(
    'daytona',
    () => startStandInBackend(standIn!),
    {
      sharedHost: false,
      tenant: `daytona-conformance-${randomBytes(4).toString('hex')}`,
      timeScale: 2,
      // A PTY has no end of file: the agent learns that its stream broke from the next start's bridge (SIGUSR1),
      // then lingers on its socket with its background processes, and the bridge carries the new stream to it.
      dropAgentStream: async (env) => {
        if (!(env instanceof DaytonaEnvironment)) throw new Error(`not a daytona environment: ${env.description}`);
        const channel = env.agentChannel;
        if (!(channel instanceof AgentChannel)) throw new Error(`no exec agent in ${env.description}`);
        channel.dropStream();
      },
      backgroundAfterDrop: 'survives',
      // Scripts run inside the sandbox through the agent's relay.
      executeCode: true,
    },
  );
  after(async () => {
    // SIGTERM: the stand-in removes every container it made, and exits 0.
    assert.equal(await standIn?.stop(), 0);
  });
}
