/**
 * An output flood of tenant A costs the executor (which every tenant
 * shares) a bounded rate: the exec agent forwards a task's output at most at
 * 4 MiB/s after a 16 MiB burst, so the flooding process itself gets to write
 * no more than that, and tenant B is served meanwhile. The bound is checked
 * on the byte count the flooding script reports with its own elapsed time;
 * no duration is asserted.
 *
 * Docker backend (the agent runs there, as on ssh and singularity; the
 * local backend has no agent).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { dockerUnavailableReason, removeLabelled } from '../support/docker-fixtures.js';
import { startTwoTenants, type TwoTenants } from '../support/two-tenants.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);

const MiB = 1024 * 1024;
/** The agent's OUTPUT_BURST and OUTPUT_RATE (sandbox-image/agent/berth_agent/processes.py). */
const BURST_BYTES = 16 * MiB;
const RATE_BYTES_PER_S = 4 * MiB;
/** A pipe's buffer, the chunk in the agent's hands and the one being written. */
const SLACK_BYTES = 512 * 1024;

/** Writes 64 KiB blocks to stdout for `seconds`, then reports how much it wrote and in what time. */
const FLOOD = [
  'import os, sys, time',
  'block = b"x" * 65536',
  'n, t0 = 0, time.monotonic()',
  'while time.monotonic() - t0 < 3:',
  '    n += os.write(1, block)',
  'sys.stdout.flush()',
  'os.write(1, b"\\nwrote=%d elapsed=%.3f\\n" % (n, time.monotonic() - t0))',
].join('\n');

describe("tenant A's output flood is paced at the source (docker backend)", { skip: unavailable }, () => {
  let t: TwoTenants;
  const run = randomBytes(4).toString('hex');
  const aTask = `iso-flood-a-${run}`;
  const bTask = `iso-flood-b-${run}`;

  before(async () => {
    t = await startTwoTenants({ backend: 'docker' });
  });
  after(async () => {
    await t?.stop();
    for (const id of [aTask, bTask]) await removeLabelled(docker, LABEL.task, id);
  });

  test('the flooding process writes no more than the burst plus the rate over its time, and B is served meanwhile', async () => {
    await t.call(t.b, 'terminal', { command: 'true' }, bTask);
    const flood = t.call(t.a, 'terminal', { command: `python3 -c '${FLOOD}'`, timeout: 60 }, aTask);
    const served: string[] = [];
    let done = false;
    void flood.finally(() => (done = true)).catch(() => undefined);
    while (!done) {
      const r = JSON.parse(await t.call(t.b, 'terminal', { command: 'echo b-served' }, bTask)) as { output?: string };
      served.push(String(r.output));
    }
    const result = JSON.parse(await flood) as { output: string; exit_code: number };
    assert.equal(result.exit_code, 0, result.output.slice(-500));
    const m = /wrote=(\d+) elapsed=([\d.]+)/.exec(result.output);
    assert.ok(m, result.output.slice(-500));
    const wrote = Number(m[1]);
    const elapsedS = Number(m[2]);
    const bound = BURST_BYTES + RATE_BYTES_PER_S * elapsedS + SLACK_BYTES;
    assert.ok(wrote > BURST_BYTES / 2, `the flood wrote only ${wrote} bytes: the measurement saw no flood`);
    assert.ok(wrote <= bound, `the flood wrote ${wrote} bytes in ${elapsedS} s; paced at the source it can write at most ${Math.round(bound)}`);
    assert.ok(served.length > 0 && served.every((o) => o === 'b-served'), JSON.stringify(served.slice(0, 5)));
  });
});
