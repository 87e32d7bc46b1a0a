/**
 * Executors on one Docker host share a policy's network (its name comes from
 * the policy, not the executor). Two of them starting their first task of a
 * tenant at the same moment both create it; Docker refuses the second
 * create (409, or "networks have same bridge name"), and that executor must
 * take the network the other made rather than fail the task's call.
 * Needs root and iptables, like network.test.ts.
 */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { after, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { NetworkIsolation } from '../../services/executor/backends/docker/network-isolation.js';
import { dockerUnavailableReason } from '../support/docker-fixtures.js';
import { toolsRequired } from '../support/require-tools.js';

const docker = new Dockerode();

async function unavailableReason(): Promise<string | undefined> {
  const reason = (await dockerUnavailableReason(docker)) ?? (process.getuid?.() !== 0 ? 'network isolation needs root (iptables)' : undefined);
  if (reason && toolsRequired()) throw new Error(reason);
  return reason;
}

const unavailable = await unavailableReason();

describe('executors on one Docker host make a tenant network at the same moment', { skip: unavailable, timeout: 120_000 }, () => {
  // Policies of this run alone (allowed documentation-range addresses no other test uses), so their networks are new.
  // Three tenants race at once: the daemon's refusal comes in more than one form depending on timing.
  const tenants = ['acme', 'beta', 'gamma'] as const;
  const first = randomInt(1, 250);
  const policies = Object.fromEntries(tenants.map((t, i) => [t, { egress: 'none' as const, egress_allow: [`198.51.100.${first + i}/32`] }]));
  const install = () =>
    NetworkIsolation.install({
      docker,
      daemon: 'the Docker daemon',
      operator: { egress: 'public-only', egressAllow: [] },
      tenants: policies,
      extraDns: [],
      logger: silentLogger(),
    });
  const executors: NetworkIsolation[] = [];
  after(async () => {
    for (const e of executors) await e.close();
  });

  it('both get the one network, whichever created it', async () => {
    executors.push(await install(), await install());
    const [one, two] = executors as [NetworkIsolation, NetworkIsolation];
    const results = await Promise.allSettled(tenants.flatMap((t) => [one.networkFor(t), two.networkFor(t)]));
    assert.deepEqual(
      results.map((r) => r.status),
      results.map(() => 'fulfilled'),
      JSON.stringify(results.map((r) => (r.status === 'rejected' ? String(r.reason) : r.value))),
    );
    const names = results.map((r) => (r as PromiseFulfilledResult<string>).value);
    for (let i = 0; i < tenants.length; i++) {
      const [a, b] = [names[2 * i]!, names[2 * i + 1]!];
      assert.equal(a, b, `tenant ${tenants[i]}: both executors name one network`);
      assert.match(a, /^berth-isolated-[0-9a-f]{10}$/);
      const found = await docker.listNetworks({ filters: { name: [a] } });
      assert.equal(found.filter((n) => n.Name === a).length, 1, `one network named ${a}`);
    }
    assert.equal(new Set(names).size, tenants.length, 'each policy has a network of its own');
  });
});
