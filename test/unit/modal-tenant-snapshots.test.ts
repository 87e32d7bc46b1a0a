/**
 * The modal backend's record of tenants' snapshots: it survives a restart
 * (a new store on the same state root), lists only complete snapshots, keeps
 * tenants apart and reads ids and records as hostile input.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { TenantSnapshots } from '../../services/executor/backends/modal/tenant-snapshots.js';

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
});
