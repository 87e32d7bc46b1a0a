/**
 * The suspend/resume conformance cases on the daytona backend, through the
 * real SDK against the Daytona stand-in (a test double backed by the local
 * Docker engine), and what a suspension leaves running: the sandbox's
 * container, as the engine itself reports it, is stopped.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Daytona } from '@daytonaio/sdk';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import type { DaytonaBackend} from '../../services/executor/backends/daytona/daytona-backend.js';
import { sandboxName } from '../../services/executor/backends/daytona/daytona-backend.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { runSuspendConformance } from '../../services/conformance/suspend-conformance.js';
import { dockerUnavailableReason } from '../support/docker-fixtures.js';
import { startDaytonaStandIn, startStandInBackend, type RunningStandIn } from '../support/daytona-standin.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const tenant = `daytona-suspend-${randomBytes(4).toString('hex')}`;
let standIn: RunningStandIn | undefined;

function startBackend(): Promise<DaytonaBackend> {
  return startStandInBackend(standIn!);
}

if (unavailable) {
  describe('suspend conformance: daytona (stand-in)', { skip: unavailable }, () => {});
} else {
  before(async () => {
    standIn = await startDaytonaStandIn();
  });

  runSuspendConformance('daytona', startBackend, { tenant, timeScale: 2 });

  describe('daytona suspension: the sandbox is stopped', () => {
    let backend: DaytonaBackend;
    let envs: TaskEnvironments;
    before(async () => {
      backend = await startBackend();
      envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
    });
    after(async () => {
      await envs?.closeAll();
      await backend?.close();
    });

    it("holds no running container while suspended, and the next call runs in the same sandbox's container again", { timeout: 180_000 }, async () => {
      const key = { tenant, taskId: `stopped-${randomBytes(4).toString('hex')}` };
      await envs.exec(key, { command: 'echo before > ~/mark', timeoutMs: 60_000 });
      const client = new Daytona({ apiKey: standIn!.apiKey, apiUrl: standIn!.apiUrl, target: 'stand-in' });
      const sandbox = await client.get(sandboxName(key)).finally(() => client[Symbol.asyncDispose]());
      const [container] = await docker.listContainers({ all: true, filters: { label: [standIn!.containerLabel], name: [sandbox.id.slice(0, 8)] } });
      assert.ok(container, `the stand-in's container of sandbox ${sandbox.id}`);
      const state = async () => (await docker.getContainer(container.Id).inspect()).State;
      assert.equal((await state()).Running, true);

      assert.equal((await envs.suspend(key)).suspended, true);
      const stopped = await state();
      assert.equal(stopped.Running, false, 'a suspended sandbox runs no process');

      const r = await envs.exec(key, { command: 'cat ~/mark', timeoutMs: 60_000 });
      assert.equal(r.output.trim(), 'before');
      const started = await state();
      assert.equal(started.Running, true);
      assert.notEqual(started.StartedAt, stopped.StartedAt, 'started again, not replaced');
    });
  });

  after(async () => {
    // SIGTERM: the stand-in removes every container it made, and exits 0.
    assert.equal(await standIn?.stop(), 0);
  });
}
