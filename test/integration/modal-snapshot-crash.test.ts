/**
 * An executor killed (SIGKILL) in the middle of a snapshot on the modal
 * backend, against the Modal stand-in: killed while the sandbox's
 * filesystem snapshot is being made (the stand-in has received the call).
 * A restarted executor on the same state directory lists nothing, and no
 * record of it, whole or temporary, is there.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { ModalBackend } from '../../services/executor/backends/modal/modal-backend.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { distModule, startDoomedExecutor } from '../support/doomed-executor.js';
import { startModalStandin, type StandinProcess } from '../support/modal-standin-process.js';

const unavailable = await dockerUnavailableReason(new Dockerode());
const TENANT = `snap-crash-modal-${randomBytes(4).toString('hex')}`;
/** What the stand-in logs (--verbose) when the sandbox's filesystem snapshot is asked for. */
const SNAPSHOT_CALL = /call \S*SnapshotFilesystem/;

describe('modal snapshots: an executor killed during a snapshot', { skip: unavailable }, () => {
  let standin: StandinProcess | undefined;
  const stateDirs: string[] = [];
  const saved = { ...process.env };

  after(async () => {
    for (const name of Object.keys(standin?.env ?? {})) {
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    }
    if (standin) assert.equal(await standin.stop(), 0, standin.stderr());
    for (const dir of stateDirs) await rm(dir, { recursive: true, force: true });
  });

  it('leaves no snapshot listed and no record of it', { timeout: 600_000 }, async () => {
    standin = await startModalStandin(['--verbose']);
    // The restarted executor, in this process, reaches the stand-in through the SDK's own settings.
    Object.assign(process.env, standin.env);
    const stateDir = await mkdtemp(path.join(os.tmpdir(), 'berth-snap-crash-modal-'));
    stateDirs.push(stateDir);
    const options = `{ image: ${JSON.stringify(SANDBOX_IMAGE)}, stateDir: ${JSON.stringify(stateDir)}, cpu: 1, memoryMiB: 512, logger: silentLogger() }`;
    const doomed = await startDoomedExecutor(
      stateDir,
      [
        `import { ModalBackend } from ${distModule('services/executor/backends/modal/modal-backend.js')};`,
        `import { TaskEnvironments } from ${distModule('services/executor/task-environment.js')};`,
        `import { silentLogger } from ${distModule('services/common/logging.js')};`,
        `const b = await ModalBackend.start(${options});`,
        'const envs = new TaskEnvironments({ backend: b, logger: silentLogger(), lifetimeSeconds: 0 });',
        `const key = { tenant: ${JSON.stringify(TENANT)}, taskId: 'doomed' };`,
        // 64 MiB of new files: the filesystem snapshot (a commit in the stand-in) takes long enough to be cut off.
        "const r = await envs.exec(key, { command: 'for i in $(seq 1 64); do head -c 1048576 /dev/urandom > /workspace/f$i || exit 1; done', timeoutMs: 120000 });",
        "if (r.exitCode !== 0) { console.log('WRITE FAILED ' + r.output); process.exit(1); }",
        "console.log('SNAPSHOTTING');",
        "await envs.lifecycle.snapshot(key, 'never finished');",
        "console.log('FINISHED');",
      ],
      standin.env,
    );
    for (let i = 0; i < 12_000 && !SNAPSHOT_CALL.test(standin.stderr()); i++) {
      assert.ok(!doomed.output().includes('FINISHED'), 'the snapshot finished before it could be interrupted');
      if (doomed.exited()) assert.fail(`the executor exited early: ${doomed.output()}`);
      await sleep(25);
    }
    assert.match(standin.stderr(), SNAPSHOT_CALL, 'the snapshot never reached the stand-in');
    await doomed.kill();
    assert.match(doomed.output(), /SNAPSHOTTING/);
    assert.ok(!doomed.output().includes('FINISHED'), 'the snapshot finished before it could be interrupted');

    const restarted = await ModalBackend.start({ image: SANDBOX_IMAGE, stateDir, cpu: 1, memoryMiB: 512, logger: silentLogger() });
    try {
      assert.deepEqual(await restarted.listSnapshots(TENANT), []);
      assert.deepEqual(await readdir(path.join(stateDir, 'tenant-snapshots')).catch(() => []), []);
    } finally {
      await restarted.close();
    }
  });
});
