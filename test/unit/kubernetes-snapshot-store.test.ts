/**
 * The kubernetes backend's snapshot store on disk, without a pod: only a
 * snapshot with both its archive and its metadata is listed, and what an
 * interrupted write left (a `.part-*` temporary file, an archive without its
 * metadata, metadata without its archive) is removed once old, by the sweep
 * a restarted executor runs and by a listing, never while young (another
 * executor's write may be under way on a shared state root). A complete
 * snapshot and a suspension's archive are kept.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import type { KubeApi } from '../../services/executor/backends/kubernetes/kube-api.js';
import { KubeSnapshots, LEFTOVER_MAX_AGE_MS } from '../../services/executor/backends/kubernetes/kube-snapshots.js';

const root = mkdtempSync(path.join(os.tmpdir(), 'berth-kubesnap-store-'));
after(() => rmSync(root, { recursive: true, force: true }));

const OWNER = 'ab12cd34';
const store = (dir: string) =>
  new KubeSnapshots({ api: {} as KubeApi, root: dir, ownerOf: (tenant) => (tenant === 'alice' ? OWNER : 'ffff0000'), maxBytes: 1024 });

function meta(id: string, createdAtMs: number): string {
  return JSON.stringify({ id, owner: OWNER, sourceTaskId: 't1', label: 'l', createdAtMs, cwd: '/workspace', script: '' });
}

function age(file: string): void {
  const old = (Date.now() - LEFTOVER_MAX_AGE_MS - 60_000) / 1000;
  utimesSync(file, old, old);
}

describe('kubernetes snapshot store: what an interrupted snapshot leaves', () => {
  const done = 'snap_' + 'a'.repeat(24);
  const tarOnly = 'snap_' + 'b'.repeat(24);
  const jsonOnly = 'snap_' + 'c'.repeat(24);
  const writing = 'snap_' + 'd'.repeat(24);

  it('lists only complete snapshots; a restarted store sweeps old leftovers of every tenant and of suspensions, not young ones', async () => {
    const dir = path.join(root, 'restart');
    const tenantDir = path.join(dir, OWNER);
    const suspended = path.join(dir, 'suspended');
    mkdirSync(tenantDir, { recursive: true });
    mkdirSync(suspended, { recursive: true });
    writeFileSync(path.join(tenantDir, `${done}.tar`), 'archive');
    writeFileSync(path.join(tenantDir, `${done}.json`), meta(done, 1));
    // Cut off between the two renames (archive only), after a delete's first step (metadata only), mid-write (parts).
    writeFileSync(path.join(tenantDir, `${tarOnly}.tar`), 'archive');
    writeFileSync(path.join(tenantDir, `${jsonOnly}.json`), meta(jsonOnly, 2));
    writeFileSync(path.join(tenantDir, `${writing}.tar.part-4242-1`), 'half an arch');
    writeFileSync(path.join(suspended, 'task1.tar'), 'kept for a resumption');
    writeFileSync(path.join(suspended, 'task2.tar.part-4242-1'), 'half');
    const young = `${writing}.json.part-4243-2`;
    writeFileSync(path.join(tenantDir, young), '{');
    for (const f of [`${done}.tar`, `${done}.json`, `${tarOnly}.tar`, `${jsonOnly}.json`, `${writing}.tar.part-4242-1`]) age(path.join(tenantDir, f));
    age(path.join(suspended, 'task1.tar'));
    age(path.join(suspended, 'task2.tar.part-4242-1'));

    const restarted = store(dir);
    assert.deepEqual((await restarted.list('alice')).map((s) => s.id), [done]);
    assert.deepEqual(await restarted.sweep(), [path.join('suspended', 'task2.tar.part-4242-1')], 'the listing swept the tenant\'s own already');
    assert.deepEqual(readdirSync(tenantDir).sort(), [`${done}.json`, `${done}.tar`, young].sort());
    assert.deepEqual(readdirSync(suspended), ['task1.tar']);
    assert.deepEqual(await restarted.sweep(Date.now() + LEFTOVER_MAX_AGE_MS + 60_000), [path.join(OWNER, young)]);
    assert.deepEqual((await restarted.list('alice')).map((s) => s.id), [done]);
    assert.deepEqual(await restarted.list('bob'), []);
  });

  it('the start-up sweep reaches a tenant that never lists', async () => {
    const dir = path.join(root, 'start');
    const tenantDir = path.join(dir, OWNER);
    mkdirSync(tenantDir, { recursive: true });
    writeFileSync(path.join(tenantDir, `${tarOnly}.tar`), 'archive');
    writeFileSync(path.join(tenantDir, `${writing}.tar.part-1-1`), 'half');
    age(path.join(tenantDir, `${tarOnly}.tar`));
    age(path.join(tenantDir, `${writing}.tar.part-1-1`));
    assert.deepEqual(await store(dir).sweep(), [path.join(OWNER, `${tarOnly}.tar`), path.join(OWNER, `${writing}.tar.part-1-1`)]);
    assert.deepEqual(readdirSync(tenantDir), []);
    assert.deepEqual(await store(path.join(root, 'never-made')).sweep(), []);
  });
});
