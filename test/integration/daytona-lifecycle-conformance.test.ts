/**
 * The lifecycle cases of the conformance suite (snapshots, forks) on the
 * daytona backend, through the real SDK against the Daytona stand-in (a test
 * double on the local Docker engine: a snapshot is a `docker commit` of the
 * sandbox's container; no processes kept), and what a snapshot is on the
 * provider's side: a Daytona snapshot named by a keyed hash, recorded for its
 * tenant only, gone from Daytona when deleted or never recorded.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Daytona, DaytonaNotFoundError } from '@daytonaio/sdk';
import Dockerode from 'dockerode';
import { BerthError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import { sandboxName, type DaytonaBackend } from '../../services/executor/backends/daytona/daytona-backend.js';
import { DAYTONA_SNAPSHOT_NAME, PENDING_MAX_AGE_MS, daytonaSnapshotName } from '../../services/executor/backends/daytona/daytona-snapshots.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { runLifecycleConformance } from '../../services/conformance/lifecycle-conformance.js';
import { dockerUnavailableReason } from '../support/docker-fixtures.js';
import { startDaytonaStandIn, startStandInBackend, type RunningStandIn } from '../support/daytona-standin.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const tenant = `daytona-snap-${randomBytes(4).toString('hex')}`;
const secret = `secret-${randomBytes(8).toString('hex')}`;
let standIn: RunningStandIn | undefined;
let stateDir = '';

function startBackend(): Promise<DaytonaBackend> {
  return startStandInBackend(standIn!, { stateDir, nameSecret: secret });
}

if (unavailable) {
  describe('backend conformance: daytona lifecycle (stand-in)', { skip: unavailable }, () => {});
} else {
  before(async () => {
    standIn = await startDaytonaStandIn();
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'berth-daytona-lifecycle-'));
  });

  runLifecycleConformance('daytona', startBackend, { snapshots: true, tenant, timeScale: 2 });

  describe("daytona snapshots on the provider's side", () => {
    let backend: DaytonaBackend;
    let envs: TaskEnvironments;
    let client: Daytona;
    before(async () => {
      backend = await startBackend();
      envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
      client = new Daytona({ apiKey: standIn!.apiKey, apiUrl: standIn!.apiUrl, target: 'stand-in' });
    });
    after(async () => {
      await envs?.closeAll();
      await backend?.close();
      await client?.[Symbol.asyncDispose]();
    });

    it("names the Daytona snapshot by a keyed hash, records it for its tenant alone, and deletes it from Daytona", { timeout: 360_000 }, async () => {
      const key = { tenant: `${tenant}-own`, taskId: `own-${randomBytes(4).toString('hex')}` };
      await envs.exec(key, { command: 'echo mine > ~/mine', timeoutMs: 60_000 });
      const snap = await envs.lifecycle.snapshot(key, 'own');
      const name = daytonaSnapshotName(secret, key.tenant, snap.id);
      assert.match(name, DAYTONA_SNAPSHOT_NAME);
      assert.notEqual(name, daytonaSnapshotName('', key.tenant, snap.id), 'the name depends on the key');
      assert.ok(!name.includes(snap.id.slice(5)) && !name.includes(key.tenant), 'the name shows neither the id nor the tenant');
      assert.equal((await client.snapshot.get(name)).state, 'active');
      const images = await docker.listImages({ filters: { label: [standIn!.containerLabel] } });
      assert.ok(images.length > 0, "the stand-in's snapshot image carries its label, so stopping it removes the image");

      // Berth's record: the shell state, label and source with the Daytona name; nothing of it pending.
      const records = path.join(stateDir, 'tenant-snapshots');
      const record = JSON.parse(await readFile(path.join(records, `${snap.id}.json`), 'utf8')) as Record<string, unknown>;
      assert.equal(record.daytonaSnapshot, name);
      assert.deepEqual((record.snapshot as Record<string, unknown>).label, 'own');
      assert.deepEqual(await readdir(path.join(stateDir, 'pending-snapshots')), []);

      // Another tenant: the id is unknown, exactly as a never-made one.
      const other = { tenant: `${tenant}-other`, taskId: `other-${randomBytes(4).toString('hex')}` };
      const never = `snap_${randomBytes(12).toString('hex')}`;
      const refusal = async (id: string) =>
        envs.lifecycle.fork(other, id).then(
          () => assert.fail('forked'),
          (err: unknown) => {
            assert.ok(err instanceof BerthError);
            return `${err.code}: ${err.message.replace(id, 'ID')}`;
          },
        );
      assert.equal(await refusal(snap.id), await refusal(never));
      assert.equal(await envs.lifecycle.delete(other.tenant, snap.id), false);
      assert.equal((await envs.lifecycle.list(other.tenant)).length, 0);

      assert.equal(await envs.lifecycle.delete(key.tenant, snap.id), true);
      await assert.rejects(client.snapshot.get(name), DaytonaNotFoundError);
      assert.equal((await readdir(records)).includes(`${snap.id}.json`), false);
    });

    it('deletes from Daytona a snapshot that an executor died before recording, at a later listing', { timeout: 240_000 }, async () => {
      const key = { tenant: `${tenant}-crash`, taskId: `crash-${randomBytes(4).toString('hex')}` };
      await envs.exec(key, { command: 'true', timeoutMs: 60_000 });
      // As a dying executor leaves it: marked under way, made in Daytona, never recorded.
      const name = daytonaSnapshotName(secret, key.tenant, `snap_${randomBytes(12).toString('hex')}`);
      const pending = path.join(stateDir, 'pending-snapshots', name);
      await mkdir(path.dirname(pending), { recursive: true });
      await writeFile(pending, '');
      await (await client.get(sandboxName(key))).createSnapshot(name, 120);
      assert.equal((await client.snapshot.get(name)).state, 'active');

      await envs.lifecycle.list(key.tenant);
      assert.equal((await client.snapshot.get(name)).state, 'active', 'a snapshot under way for less than its limit is left alone');
      const old = new Date(Date.now() - PENDING_MAX_AGE_MS - 60_000);
      await utimes(pending, old, old);
      assert.deepEqual(await envs.lifecycle.list(key.tenant), []);
      await assert.rejects(client.snapshot.get(name), DaytonaNotFoundError);
      assert.equal((await readdir(path.dirname(pending))).includes(name), false);
    });
  });

  after(async () => {
    // SIGTERM: the stand-in removes every container and snapshot image it made, and exits 0.
    assert.equal(await standIn?.stop(), 0);
    if (standIn) assert.deepEqual(await docker.listImages({ all: true, filters: { label: [standIn.containerLabel] } }), []);
    await rm(stateDir, { recursive: true, force: true });
  });
}
