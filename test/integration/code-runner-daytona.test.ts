/**
 * The executor's execute_code runner on the daytona backend, through the
 * SDK against the Daytona stand-in (a test double backed by the local
 * Docker engine, not the cloud), started once for the file. The script runs
 * in the task's sandbox; its rpc.sock is made there by the exec agent and
 * relayed over the agent's one PTY stream. What is particular to that
 * stream: 1 MB either way (the PTY's input goes in ≤ 32 KiB messages) and a
 * flood that never reads; timeout and interrupt kill inside the sandbox;
 * the run dir is gone after.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import type { DaytonaBackend } from '../../services/executor/backends/daytona/daytona-backend.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { agentCodeRunnerCases } from '../support/code-runner-agent-cases.js';
import { dockerUnavailableReason } from '../support/docker-fixtures.js';
import { startDaytonaStandIn, startStandInBackend, type RunningStandIn } from '../support/daytona-standin.js';

const docker = new Dockerode();
const skip = await dockerUnavailableReason(docker);

describe('CodeRunner on the daytona backend (socket relayed over the agent PTY stream)', { skip, timeout: 600_000 }, () => {
  let standIn: RunningStandIn;
  let backend: DaytonaBackend;
  let environments: TaskEnvironments;

  before(async () => {
    standIn = await startDaytonaStandIn();
    backend = await startStandInBackend(standIn);
    environments = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
  });

  after(async () => {
    await environments?.closeAll();
    await backend?.close();
    assert.equal(await standIn?.stop(), 0);
    assert.deepEqual(await docker.listContainers({ all: true, filters: { label: [standIn.containerLabel] } }), []);
  });

  agentCodeRunnerCases({
    environments: () => environments,
    tenant: `code-${randomBytes(4).toString('hex')}`,
    ranIn: /^the task's daytona environment \(daytona sandbox berth-[0-9a-f]{32}\)$/,
    stream: 'the PTY stream',
  });
});
