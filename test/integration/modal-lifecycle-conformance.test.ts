/**
 * The lifecycle cases of the conformance suite (snapshots, forks; suspend
 * and resume) on the modal backend against the Modal stand-in (filesystem
 * snapshots as images; no processes kept).
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { ModalBackend } from '../../services/executor/backends/modal/modal-backend.js';
import { runLifecycleConformance } from '../../services/conformance/lifecycle-conformance.js';
import { runSuspendConformance } from '../../services/conformance/suspend-conformance.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { startModalStandin } from '../support/modal-standin-process.js';

const unavailable = await dockerUnavailableReason(new Dockerode());
const tenant = `modallife-${randomBytes(4).toString('hex')}`;

if (unavailable) {
  describe('backend conformance: modal lifecycle', { skip: unavailable }, () => {});
} else {
  const saved = { ...process.env };
  const standin = await startModalStandin();
  Object.assign(process.env, standin.env);
  const stateDir = await mkdtemp(path.join(os.tmpdir(), 'berth-modal-lifecycle-'));
  const backends: ModalBackend[] = [];
  const start = async () => {
    const backend = await ModalBackend.start({ image: SANDBOX_IMAGE, stateDir, cpu: 1, memoryMiB: 512, logger: silentLogger() });
    backends.push(backend);
    return backend;
  };
  runLifecycleConformance('modal', start, { snapshots: true, tenant, timeScale: 3 });
  runSuspendConformance('modal', start, { tenant: `${tenant}-suspend`, timeScale: 3 });
  after(async () => {
    await Promise.all(backends.map((b) => b.close().catch(() => undefined)));
    for (const name of ['MODAL_SERVER_URL', 'MODAL_TOKEN_ID', 'MODAL_TOKEN_SECRET']) {
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    }
    await standin.stop();
    await rm(stateDir, { recursive: true, force: true });
  });
}
