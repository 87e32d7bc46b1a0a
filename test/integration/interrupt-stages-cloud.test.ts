/**
 * An interrupt is never lost on the cloud sandbox backends (cases in
 * test/support/interrupt-stages.ts), through their pinned SDKs against the
 * Modal and Daytona stand-ins (test doubles of their control planes, backed
 * by the local Docker engine), one of each for the file. Scripts run inside
 * the sandbox through the exec agent's relay, whose start is a stage. Each
 * stand-in reaches the engine through a socket that holds container
 * creation while a case asks it to, so the replacement of a sandbox the
 * case terminated (Modal) or deleted (Daytona) through the SDK waits there.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe } from 'node:test';
import { Daytona } from '@daytonaio/sdk';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { sandboxName } from '../../services/executor/backends/daytona/daytona-backend.js';
import { ModalBackend } from '../../services/executor/backends/modal/modal-backend.js';
import { ModalEnvironment } from '../../services/executor/backends/modal/modal-environment.js';
import { startDaytonaStandIn, startStandInBackend, type RunningStandIn } from '../support/daytona-standin.js';
import { dockerUnavailableReason, heldCreateDockerProxy, SANDBOX_IMAGE } from '../support/docker-fixtures.js';
import { runInterruptStages } from '../support/interrupt-stages.js';
import { startModalStandin, type StandinProcess } from '../support/modal-standin-process.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
let modal: StandinProcess | undefined;
let daytona: RunningStandIn | undefined;
let stateDir: string | undefined;
type HeldDocker = Awaited<ReturnType<typeof heldCreateDockerProxy>>;
let modalDocker: HeldDocker | undefined;
let daytonaDocker: HeldDocker | undefined;
const dockerHost = (held: HeldDocker) => ({ DOCKER_HOST: `unix://${held.socketPath}` });

if (unavailable) {
  describe('interrupts at every stage: modal and daytona', { skip: unavailable }, () => {});
} else {
  runInterruptStages(
    'modal (stand-in)',
    async () => {
      modalDocker = await heldCreateDockerProxy();
      modal = await startModalStandin([], dockerHost(modalDocker));
      Object.assign(process.env, modal.env);
      stateDir = await mkdtemp(path.join(os.tmpdir(), 'bi-modal-'));
      return ModalBackend.start({ image: SANDBOX_IMAGE, stateDir, persistent: false, cpu: 1, memoryMiB: 1024, logger: silentLogger() });
    },
    {
      backend: 'modal',
      relay: true,
      timeScale: 2,
      replacement: {
        // Terminated through the SDK, as its owner would from Modal's dashboard or CLI.
        async lose(env) {
          if (!(env instanceof ModalEnvironment)) throw new Error(`not a modal environment: ${env.description}`);
          // Imported once the stand-in's settings are in the environment (the SDK reads them), as the backend does.
          const { ModalClient } = await import('modal');
          const quiet = () => undefined;
          const client = new ModalClient({ logger: { debug: quiet, info: quiet, warn: quiet, error: quiet } });
          try {
            await (await client.sandboxes.fromId(env.sandboxId)).terminate();
          } finally {
            client.close();
          }
        },
        holdReplacement: () => modalDocker!.holdCreates(),
      },
    },
  );

  before(async () => {
    daytonaDocker = await heldCreateDockerProxy();
    daytona = await startDaytonaStandIn(dockerHost(daytonaDocker));
  });
  runInterruptStages(
    'daytona (stand-in)',
    async () =>
      startStandInBackend(daytona!),
    {
      backend: 'daytona',
      relay: true,
      timeScale: 2,
      replacement: {
        // Deleted through the SDK, as its owner would from Daytona's dashboard or CLI.
        async lose(_env, task) {
          const client = new Daytona({ apiKey: daytona!.apiKey, apiUrl: daytona!.apiUrl, target: 'stand-in' });
          try {
            await (await client.get(sandboxName(task))).delete(60, true);
          } finally {
            await client[Symbol.asyncDispose]();
          }
        },
        holdReplacement: () => daytonaDocker!.holdCreates(),
      },
    },
  );

  after(async () => {
    await modal?.stop();
    // SIGTERM: the stand-in removes every container it made, and exits 0.
    assert.equal(await daytona?.stop(), 0);
    await modalDocker?.close();
    await daytonaDocker?.close();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });
}
