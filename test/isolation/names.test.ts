/**
 * Tenant B looks for traces of tenant A's task in names (docker backend,
 * `docker.network: isolated`, both tenants on the same policy's network):
 *
 * - B computes the name A's container had before names were keyed
 *   (`berth-` + sha256("tenant/task")[:24]): no container, volume or host
 *   directory has it, and another executor key gives other names.
 * - B asks its resolver for A's real container name, A's hostname, every
 *   alias Docker gave A on the network, and A's address (PTR): nothing.
 *   B also queries Docker's embedded DNS (127.0.0.11) directly, without the
 *   resolver: no answer. A control container of the test on the same
 *   network, without Berth's closing, resolves A's name: the attempt would
 *   succeed if the DNS were open.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { DockerStreamDemuxer } from '../../services/executor/backends/docker/docker-stream-demuxer.js';
import { SANDBOX_IMAGE, dockerUnavailableReason, removeLabelled, runTaskIds, taskNamesIn } from '../support/docker-fixtures.js';
import { startTwoTenants, TENANT_A, TENANT_B, type TwoTenants } from '../support/two-tenants.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);

/** Python that sends one DNS A query for `name` to 127.0.0.11:53 and prints what came back. */
function rawQuery(name: string): string {
  const qname = name.split('.').map((l) => `bytes([${l.length}]) + b${JSON.stringify(l)}`).join(' + ');
  return [
    'import socket',
    's = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)',
    `q = b"\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00" + ${qname} + b"\\x00\\x00\\x01\\x00\\x01"`,
    'try:',
    '    s.sendto(q, ("127.0.0.11", 53)); data = s.recv(512); print("answer", (data[6] << 8) | data[7])',
    'except OSError as e:',
    '    print("no answer:", type(e).__name__)',
  ].join('\n');
}

describe("tenant B learns nothing of tenant A's task from names (docker backend)", { skip: unavailable, timeout: 300_000 }, () => {
  let t: TwoTenants;
  const ids = runTaskIds();
  const aTask = ids.task('names-a');
  const bTask = ids.task('names-b');
  let aName = '';
  let aInfo: Dockerode.ContainerInspectInfo;
  const json = (text: string) => JSON.parse(text) as Record<string, unknown>;
  const bTerminal = async (command: string) => json(await t.call(t.b, 'terminal', { command, timeout: 60 }, bTask));

  before(async () => {
    t = await startTwoTenants({ backend: 'docker', env: { TERMINAL_CONTAINER_PERSISTENT: 'true' } });
    const aFirst = json(await t.call(t.a, 'terminal', { command: 'true' }, aTask));
    assert.equal(aFirst.exit_code, 0, JSON.stringify(aFirst));
    const bFirst = await bTerminal('true');
    assert.equal(bFirst.exit_code, 0, JSON.stringify(bFirst));
    aName = (await taskNamesIn(t.serve.stateRoot)).container({ tenant: TENANT_A, taskId: aTask });
    aInfo = await docker.getContainer(aName).inspect();
    const bInfo = await docker.getContainer((await taskNamesIn(t.serve.stateRoot)).container({ tenant: TENANT_B, taskId: bTask })).inspect();
    assert.deepEqual(Object.keys(bInfo.NetworkSettings.Networks), Object.keys(aInfo.NetworkSettings.Networks), 'A and B share one network');
  });
  after(async () => {
    await t?.stop();
    for (const id of ids.ids) await removeLabelled(docker, LABEL.task, id);
  });

  test('the name derivable from the tenant and task ids names nothing of A', async () => {
    const guess = `berth-${createHash('sha256').update(`${TENANT_A}/${aTask}`).digest('hex').slice(0, 24)}`;
    assert.notEqual(aName, guess);
    await assert.rejects(docker.getContainer(guess).inspect(), /no such container/i);
    await assert.rejects(docker.getVolume(`${guess}-workspace`).inspect(), /no such volume/i);
    assert.equal(existsSync(path.join(t.serve.stateRoot, 'docker', 'tasks', guess.slice('berth-'.length))), false);
    assert.equal(aInfo.Mounts.find((m) => m.Destination === '/workspace')?.Name, `${aName}-workspace`);
    const r = await bTerminal(`getent hosts ${guess}; echo "rc=$?"`);
    assert.equal(r.output, 'rc=2');
  });

  test("B's resolver answers nothing for A's container name, hostname, aliases or address", async () => {
    const network = Object.values(aInfo.NetworkSettings.Networks)[0]!;
    const names = [...new Set([aName, aInfo.Config.Hostname, ...(network.Aliases ?? [])])];
    assert.ok(names.length >= 2, JSON.stringify(names));
    for (const name of [...names, network.IPAddress]) {
      const r = await bTerminal(`getent hosts ${name}; echo "rc=$?"`);
      assert.equal(r.output, 'rc=2', `${name}: ${String(r.output)}`);
    }
    // B's own name still resolves (from /etc/hosts), so the lookups above could answer.
    const own = await bTerminal('getent hosts "$(hostname)" | wc -l');
    assert.equal(own.output, '1');
  });

  test("B's direct query to Docker's embedded DNS gets no answer; a container without the closing gets A's address", async () => {
    const r = await bTerminal(`python3 -c '${rawQuery(aName)}'`);
    assert.match(String(r.output), /^no answer: /);
    const control = await docker.createContainer({
      Image: SANDBOX_IMAGE,
      User: '0:0',
      Entrypoint: ['sh', '-c', `getent hosts ${aName}`],
      Labels: { [LABEL.task]: aTask },
      HostConfig: { NetworkMode: Object.keys(aInfo.NetworkSettings.Networks)[0]! },
    });
    try {
      await control.start();
      await control.wait();
      const logs = (await control.logs({ stdout: true, stderr: true, follow: false })) as Buffer;
      const out = new DockerStreamDemuxer().push(logs).map((p) => p.data.toString('utf8')).join('');
      assert.match(out, new RegExp(`^${Object.values(aInfo.NetworkSettings.Networks)[0]!.IPAddress.replaceAll('.', '\\.')}\\s+${aName}`));
    } finally {
      await control.remove({ force: true });
    }
  });
});
