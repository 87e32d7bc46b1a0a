/**
 * Tenant B fills its sandbox past `terminal.container_disk` to take the
 * disk every tenant shares (docker backend, through `berth serve`, on
 * storage where Docker cannot cap it: overlay2 over ext4 with the default
 * `docker.disk_limit: auto`, as on the machines this suite runs on). Berth
 * measures B's task: once B holds more than the limit, its commands and
 * file writes are refused with RESOURCE_EXHAUSTED starting
 * `terminal.container_disk:` (the usage, the limit, what to do), and start
 * nothing; B can still read its files. Tenant A is served throughout: its
 * commands and writes go on before, while and after B is refused.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Dockerode from 'dockerode';
import { ClientError, Status } from 'nice-grpc';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { dockerUnavailableReason, removeLabelled, runTaskIds } from '../support/docker-fixtures.js';
import { TENANT_B, startTwoTenants, type TwoTenants } from '../support/two-tenants.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const LIMIT_MIB = 64;

describe('tenant B filling its sandbox past container_disk is refused; tenant A is served (docker backend)', { skip: unavailable, timeout: 300_000 }, () => {
  let t: TwoTenants;
  const ids = runTaskIds();
  const aTask = ids.task('disk-a');
  const bTask = ids.task('disk-b');
  const json = (text: string) => JSON.parse(text) as Record<string, unknown>;
  const terminal = async (client: TwoTenants['a'], command: string, taskId: string) => json(await t.call(client, 'terminal', { command, timeout: 60 }, taskId));
  /** B's refusal: RESOURCE_EXHAUSTED with the measure's message for B's own task. */
  const refused = (err: unknown): boolean => {
    assert.ok(err instanceof ClientError, String(err));
    assert.equal(Status[err.code], 'RESOURCE_EXHAUSTED');
    assert.match(
      err.details,
      new RegExp(`^terminal\\.container_disk: task ${TENANT_B}/${bTask} uses \\d+ MiB of disk \\(\\d+ MiB outside the volumes\\), past its limit of ${LIMIT_MIB} MiB, which Docker cannot enforce on this host's storage, so Berth refuses its commands and file writes \\(reading files still works\\)\\. End the task to free its container's disk, or raise terminal\\.container_disk\\.$`),
    );
    return true;
  };

  before(async () => {
    t = await startTwoTenants({ backend: 'docker', configLines: [`terminal: { container_disk: ${LIMIT_MIB}, container_memory: 256 }`] });
  });
  after(async () => {
    await t?.stop();
    for (const id of ids.ids) await removeLabelled(docker, LABEL.task, id);
  });

  test('B past the limit is refused its commands and writes, with the clear error; A writes and runs all along', async () => {
    assert.equal((await terminal(t.a, 'echo a-before > /workspace/a && cat /workspace/a', aTask)).output, 'a-before');
    // Nothing caps the write itself on this storage: B's command succeeds, and its next calls are refused.
    assert.equal((await terminal(t.b, 'echo b-data > /workspace/b.txt && fallocate -l 80M /workspace/big && echo wrote', bTask)).output, 'wrote');
    // The measure is kept for up to 5 s: B's calls go through until it is taken again, then every one is refused.
    let err: unknown;
    for (let i = 0; i < 100 && err === undefined; i++) {
      if (i > 0) await sleep(200);
      try {
        assert.equal((await terminal(t.b, 'echo b-still-runs', bTask)).output, 'b-still-runs');
      } catch (e) {
        err = e;
      }
      // A is served while B fills its disk.
      if (i % 10 === 0) assert.equal((await terminal(t.a, 'echo a-during', aTask)).output, 'a-during');
    }
    assert.ok(err !== undefined, 'B was never refused');
    assert.ok(refused(err));
    await assert.rejects(t.call(t.b, 'terminal', { command: 'touch /workspace/never' }, bTask), refused);
    await assert.rejects(t.call(t.b, 'write_file', { path: '/workspace/never', content: 'x' }, bTask), refused);
    await assert.rejects(t.call(t.b, 'terminal', { command: 'sleep 100', background: true }, bTask), refused);
    // B can still read what it has.
    assert.match(String(json(await t.call(t.b, 'read_file', { path: '/workspace/b.txt' }, bTask)).content), /^1\|b-data/);

    // A: commands, a file write of several MiB, and its own files, all as before.
    assert.equal(json(await t.call(t.a, 'write_file', { path: '/workspace/note', content: 'x'.repeat(1024) }, aTask)).bytes_written, 1024);
    assert.equal((await terminal(t.a, 'dd if=/dev/zero of=/workspace/f bs=1M count=8 status=none && cat /workspace/a && wc -c < /workspace/note', aTask)).output, 'a-before\n1024');

    // Ending B's task frees it: the same id starts anew, under the limit.
    assert.equal((await t.b.endTask({ taskId: bTask })).released, true);
    assert.equal((await terminal(t.b, 'ls /workspace | wc -l', bTask)).output, '0');
  });
});
