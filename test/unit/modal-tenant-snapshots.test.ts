/**
 * The modal backend's record of tenants' snapshots: it survives a restart
 * (a new store on the same state root), lists only complete snapshots, keeps
 * tenants apart and reads ids and records as hostile input; a temporary
 * record a killed executor left goes once it is old, never a young one
 * (another executor's write may be under way on a shared state root).
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { LEFTOVER_MAX_AGE_MS, TenantSnapshots } from '../../services/executor/backends/modal/tenant-snapshots.js';

const root = mkdtempSync(path.join(os.tmpdir(), 'berth-modallife-'));
after(() => rmSync(root, { recursive: true, force: true }));

function record(id: string, tenant: string, createdAtMs: number) {
  return {
    imageId: `im-${id.slice(5, 15)}`,
    snapshot: {
      id, tenant, sourceTaskId: 't1', label: 'l', createdAtMs, sizeBytes: 0, includesProcesses: false,
      shell: { cwd: '/work', script: 'export A=1\n' },
    },
  };
}

describe('modal tenant snapshots', () => {
  const a = 'snap_' + 'a'.repeat(24);
  const b = 'snap_' + 'b'.repeat(24);

  it('lists a tenant\'s snapshots after a restart, never another tenant\'s', async () => {
    const dir = path.join(root, 'restart');
    await new TenantSnapshots(dir).put(record(a, 'alice', 2));
    await new TenantSnapshots(dir).put(record(b, 'bob', 1));
    const again = new TenantSnapshots(dir);
    assert.deepEqual((await again.list('alice')).map((r) => r.snapshot.id), [a]);
    assert.equal((await again.get('alice', a))?.snapshot.shell.script, 'export A=1\n');
    assert.equal(await again.get('alice', b), undefined);
    assert.equal(await again.delete('alice', b), undefined);
    assert.deepEqual((await again.list('bob')).map((r) => r.snapshot.id), [b]);
  });

  it('deletes once, and lists nothing half written or malformed', async () => {
    const dir = path.join(root, 'hostile');
    const store = new TenantSnapshots(dir);
    await store.put(record(a, 'alice', 1));
    mkdirSync(path.join(dir, 'tenant-snapshots'), { recursive: true });
    writeFileSync(path.join(dir, 'tenant-snapshots', `.${b}.1.tmp`), JSON.stringify(record(b, 'alice', 2)));
    writeFileSync(path.join(dir, 'tenant-snapshots', `${b}.json`), '{"imageId": "im-x", "snapshot": {');
    writeFileSync(path.join(dir, 'tenant-snapshots', '..json'), JSON.stringify(record(a, 'alice', 3)));
    assert.deepEqual((await store.list('alice')).map((r) => r.snapshot.id), [a]);
    assert.equal(await store.get('alice', '../etc/passwd'), undefined);
    await assert.rejects(store.put(record('snap_../x', 'alice', 1)));
    assert.equal((await store.delete('alice', a))?.imageId, record(a, 'alice', 1).imageId);
    assert.equal(await store.delete('alice', a), undefined);
    assert.deepEqual(await store.list('alice'), []);
  });

  it('removes a temporary record a killed executor left once it is old, and keeps a young one', async () => {
    const dir = path.join(root, 'leftovers');
    const store = new TenantSnapshots(dir);
    await store.put(record(a, 'alice', 1));
    const files = path.join(dir, 'tenant-snapshots');
    writeFileSync(path.join(files, `.${b}.4242.tmp`), '{"imageId": "im-');
    const young = `.${'snap_' + 'c'.repeat(24)}.4243.tmp`;
    writeFileSync(path.join(files, young), '{');
    const old = (Date.now() - LEFTOVER_MAX_AGE_MS - 60_000) / 1000;
    utimesSync(path.join(files, `.${b}.4242.tmp`), old, old);
    // A restarted executor's store: the old one goes, the young one may be another executor's write under way.
    assert.deepEqual(await new TenantSnapshots(dir).sweep(), [`.${b}.4242.tmp`]);
    assert.deepEqual(readdirSync(files).sort(), [young, `${a}.json`].sort());
    assert.deepEqual((await store.list('alice')).map((r) => r.snapshot.id), [a]);
    assert.deepEqual(await store.sweep(Date.now() + LEFTOVER_MAX_AGE_MS + 60_000), [young]);
    assert.deepEqual(readdirSync(files), [`${a}.json`]);
  });
});
