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
  // A policy of this run alone (an allowed documentation-range address no other test uses), so its network is new.
  const allow = `198.51.100.${randomInt(1, 255)}/32`;
  const install = () =>
    NetworkIsolation.install({
      docker,
      daemon: 'the Docker daemon',
      operator: { egress: 'public-only', egressAllow: [] },
      tenants: { acme: { egress: 'none', egress_allow: [allow] } },
      extraDns: [],
      logger: silentLogger(),
    });
  const executors: NetworkIsolation[] = [];
  after(async () => {
    for (const e of executors) await e.close();
  });

  it('both get the one network, whichever created it', async () => {
    executors.push(await install(), await install());
    const [first, second] = executors as [NetworkIsolation, NetworkIsolation];
    const results = await Promise.allSettled([first.networkFor('acme'), second.networkFor('acme')]);
    assert.deepEqual(
      results.map((r) => r.status),
      ['fulfilled', 'fulfilled'],
      JSON.stringify(results.map((r) => (r.status === 'rejected' ? String(r.reason) : r.value))),
    );
    const names = results.map((r) => (r as PromiseFulfilledResult<string>).value);
    assert.equal(names[0], names[1]);
    assert.match(names[0]!, /^berth-isolated-[0-9a-f]{10}$/);
    const found = await docker.listNetworks({ filters: { name: [names[0]!] } });
    assert.equal(found.filter((n) => n.Name === names[0]).length, 1, 'one network of that name');
  });
});
