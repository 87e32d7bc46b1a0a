import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { silentLogger } from '../../services/common/logging.js';
import { ExecutorDiscovery, hostPort, type AddressResolver } from '../../services/dispatcher/executors/executor-membership.js';
import { ExecutorRouter, type ExecutorEndpoint } from '../../services/dispatcher/executors/executor-router.js';
import type { ExecutorClient } from '../../services/gen/berth/v1/executor.js';

/** A test double for DNS: answers what the test sets, or fails with an errno code. */
function scriptedDns(): { resolve: AddressResolver; answer: Map<string, string[] | string> } {
  const answer = new Map<string, string[] | string>();
  return {
    answer,
    resolve: async (name) => {
      const a = answer.get(name) ?? 'ENOTFOUND';
      if (typeof a === 'string') throw Object.assign(new Error(`${a} ${name}`), { code: a });
      return a;
    },
  };
}

describe('executor discovery', () => {
  test('every address of the name becomes a member; changes come as added and removed', async () => {
    const dns = scriptedDns();
    const found = new ExecutorDiscovery([{ dns: 'executor', port: 7701, backend: 'docker' }], { resolve: dns.resolve, logger: silentLogger() });
    dns.answer.set('executor', ['10.0.0.2', '10.0.0.3', '10.0.0.4']);
    const first = await found.refresh();
    assert.deepEqual(first.added.map((m) => m.address).sort(), ['10.0.0.2:7701', '10.0.0.3:7701', '10.0.0.4:7701']);
    assert.deepEqual(first.removed, []);
    assert.ok(first.added.every((m) => m.backend === 'docker'));

    dns.answer.set('executor', ['10.0.0.3', '10.0.0.4', '10.0.0.5']);
    const second = await found.refresh();
    assert.deepEqual(second.added.map((m) => m.address), ['10.0.0.5:7701']);
    assert.deepEqual(second.removed, ['10.0.0.2:7701']);
    assert.equal(found.members.length, 3);

    const same = await found.refresh();
    assert.deepEqual(same, { added: [], removed: [] });
  });

  test('a resolver failure keeps the last members; a name that does not exist empties its source', async () => {
    const dns = scriptedDns();
    const found = new ExecutorDiscovery([{ dns: 'executor', port: 7701, backend: 'docker' }], { resolve: dns.resolve, logger: silentLogger() });
    dns.answer.set('executor', ['10.0.0.2', '10.0.0.3']);
    await found.refresh();
    dns.answer.set('executor', 'ETIMEOUT');
    assert.deepEqual(await found.refresh(), { added: [], removed: [] });
    assert.equal(found.members.length, 2);
    dns.answer.set('executor', 'ENOTFOUND');
    const gone = await found.refresh();
    assert.deepEqual([...gone.removed].sort(), ['10.0.0.2:7701', '10.0.0.3:7701']);
    assert.equal(found.members.length, 0);
  });

  test('several sources with their own backend and port; IPv6 addresses are bracketed', async () => {
    const dns = scriptedDns();
    const found = new ExecutorDiscovery(
      [
        { dns: 'docker-exec', port: 7701, backend: 'docker' },
        { dns: 'ssh-exec', port: 7801, backend: 'ssh' },
      ],
      { resolve: dns.resolve, logger: silentLogger() },
    );
    dns.answer.set('docker-exec', ['10.0.0.2', 'fd00::2']);
    dns.answer.set('ssh-exec', ['10.0.1.2']);
    const { added } = await found.refresh();
    assert.deepEqual(
      added.map((m) => `${m.backend} ${m.address}`).sort(),
      ['docker 10.0.0.2:7701', 'docker [fd00::2]:7701', 'ssh 10.0.1.2:7801'],
    );
    assert.equal(hostPort('::1', 1), '[::1]:1');
  });
});

describe('placement over a changing membership', () => {
  /** A test double for an executor: answers TaskUsage with the tasks the test says it holds. */
  function member(id: string, holds: Set<string>, calls: string[]): ExecutorEndpoint {
    const client = {
      taskUsage: async () => {
        calls.push(id);
        return {
          tasks: [...holds].map((k) => {
            const [tenant, taskId] = k.split('/') as [string, string];
            return { task: { tenant, taskId } };
          }),
        };
      },
    } as unknown as ExecutorClient;
    return { id, backend: 'docker', client, healthy: true };
  }
  const policy = () => ({ backend: 'docker' as const });

  test('a task keeps the executor that holds it when a new member wins its rendezvous choice', async () => {
    const calls: string[] = [];
    const held = new Map<string, Set<string>>([['a:1', new Set()], ['b:1', new Set()]]);
    let members = ['a:1', 'b:1'].map((id) => member(id, held.get(id)!, calls));
    const router = new ExecutorRouter(() => members, policy);
    const tasks = Array.from({ length: 40 }, (_, i) => `t${i}`);
    // Each task's environment is created where the rendezvous choice put it.
    for (const t of tasks) held.get((await router.place('default', t, undefined)).executorId)!.add(`default/${t}`);

    held.set('c:1', new Set());
    members = [...members, member('c:1', held.get('c:1')!, calls)];
    router.forgetHolders();
    const moved = tasks.filter((t) => router.route('default', t).executorId === 'c:1');
    assert.ok(moved.length > 0, 'the new member wins some tasks');
    for (const t of moved) {
      const p = await router.place('default', t, undefined);
      assert.ok(held.get(p.executorId)!.has(`default/${t}`), `${t} stays with its holder, not ${p.executorId}`);
      assert.equal(p.fresh, false);
      assert.equal(p.lost, undefined);
    }
    // A task nobody holds is new: it goes to the rendezvous choice.
    const fresh = await router.place('default', 'brand-new', undefined);
    assert.equal(fresh.executorId, router.route('default', 'brand-new').executorId);
    assert.equal(fresh.fresh, true);
  });

  test('a known placement whose executor left or drains is reported lost with the reason', async () => {
    const calls: string[] = [];
    const a = member('a:1', new Set(), calls);
    const b = member('b:1', new Set(), calls);
    let members = [a, b];
    const router = new ExecutorRouter(() => members, policy);
    const onA = Array.from({ length: 40 }, (_, i) => `t${i}`).find((t) => router.route('default', t).executorId === 'a:1')!;
    assert.equal((await router.place('default', onA, 'a:1')).lost, undefined);

    router.markDraining('a:1');
    assert.deepEqual((await router.place('default', onA, 'a:1')).lost, { executorId: 'a:1', reason: 'draining' });
    a.draining = false;
    assert.deepEqual((await router.place('default', onA, 'a:1')).lost, { executorId: 'a:1', reason: 'unreachable' });
    members = [b];
    const p = await router.place('default', onA, 'a:1');
    assert.deepEqual(p.lost, { executorId: 'a:1', reason: 'removed' });
    assert.equal(p.executorId, 'b:1');
    assert.deepEqual(calls, [], 'a known placement needs no lookup');
  });
});
