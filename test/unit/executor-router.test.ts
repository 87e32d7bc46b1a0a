import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ExecutorRouter, rendezvousPick, type ExecutorEndpoint } from '../../services/dispatcher/executors/executor-router.js';
import type { ExecutorClient } from '../../services/gen/berth/v1/executor.js';

const fakeClient = {} as ExecutorClient;
function endpoints(ids: string[], backend: 'local' | 'docker' = 'docker'): ExecutorEndpoint[] {
  return ids.map((id) => ({ id, backend, client: fakeClient, healthy: true }));
}

describe('executor routing', () => {
  test('a task always lands on the same executor', () => {
    const eps = endpoints(['a:1', 'b:1', 'c:1']);
    const first = rendezvousPick(eps, 'default/t1');
    for (let i = 0; i < 10; i++) assert.equal(rendezvousPick(eps, 'default/t1'), first);
  });

  test('removing one executor moves only its tasks', () => {
    const eps = endpoints(['a:1', 'b:1', 'c:1', 'd:1']);
    const keys = Array.from({ length: 400 }, (_, i) => `default/task-${i}`);
    const before = new Map(keys.map((k) => [k, rendezvousPick(eps, k)!.id]));
    const without = eps.filter((e) => e.id !== 'b:1');
    let moved = 0;
    for (const k of keys) {
      const now = rendezvousPick(without, k)!.id;
      if (before.get(k) !== 'b:1') assert.equal(now, before.get(k), `${k} moved though its executor stayed`);
      else moved++;
    }
    assert.ok(moved > 50 && moved < 150, `about a quarter of tasks were on b: ${moved}`);
  });

  test('tasks of different tenants with the same id are hashed apart', () => {
    const eps = endpoints(Array.from({ length: 8 }, (_, i) => `e${i}:1`));
    const differ = Array.from({ length: 50 }, (_, i) => `t${i}`).some(
      (t) => rendezvousPick(eps, `acme/${t}`)!.id !== rendezvousPick(eps, `globex/${t}`)!.id,
    );
    assert.ok(differ);
  });

  test('unhealthy executors get no tasks while a healthy one exists; with none healthy tasks stay put', () => {
    const eps = endpoints(['a:1', 'b:1']);
    const router = new ExecutorRouter(eps, () => ({ backend: 'docker' }));
    const usual = new Map(Array.from({ length: 20 }, (_, i) => [`t${i}`, router.route('default', `t${i}`).executorId]));
    eps[0]!.healthy = false;
    for (let i = 0; i < 20; i++) assert.equal(router.route('default', `t${i}`).executorId, 'b:1');
    eps[1]!.healthy = false;
    for (const [task, executor] of usual) assert.equal(router.route('default', task).executorId, executor);
  });

  test('no executor for the backend names the command that starts one; a disallowed backend is PERMISSION_DENIED', () => {
    const router = new ExecutorRouter(endpoints(['a:1'], 'local'), (tenant) =>
      tenant === 'acme' ? { backend: 'docker' } : { backend: 'local', allowedBackends: ['docker'] },
    );
    assert.throws(() => router.route('acme', 't'), /berth executor --backend docker/);
    assert.throws(() => router.route('other', 't'), (e: Error & { code?: string }) => e.code === 'PERMISSION_DENIED');
  });
});
