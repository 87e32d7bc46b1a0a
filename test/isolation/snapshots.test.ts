/**
 * Snapshot ids belong to their tenant. Tenant B names tenant A's snapshot
 * in Fork and DeleteSnapshot, and A's task in Snapshot and Fork: each answer
 * must be, byte for byte (once the id asked about is replaced by `<ID>`),
 * the one B gets for an id that never existed; ListSnapshots shows B none of
 * A's. A's snapshot stays listed and forkable for A afterwards.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { dockerUnavailableReason, removeLabelled } from '../support/docker-fixtures.js';
import { removeSnapshotImages } from '../support/snapshot-fixtures.js';
import { answerOf, startTwoTenants, type TwoTenants } from '../support/two-tenants.js';

const docker = new Dockerode();
const dockerMissing = await dockerUnavailableReason(docker);
const hex = (bytes: number) => randomBytes(bytes).toString('hex');

describe("tenant B names tenant A's snapshots (docker backend)", { skip: dockerMissing }, () => {
  let t: TwoTenants;
  let stateRoot = '';
  const run = hex(4);
  const taskIds: string[] = [];
  const taskId = (name: string) => {
    const id = `iso-snap-${name}-${run}`;
    taskIds.push(id);
    return id;
  };
  const source = taskId('source');
  let snapshotId = '';
  const normalized = (answer: string, ...ids: string[]) => ids.reduce((text, id) => text.replaceAll(id, '<ID>'), answer);

  before(async () => {
    t = await startTwoTenants({ backend: 'docker' });
    stateRoot = t.serve.stateRoot;
    const setup = JSON.parse(await t.call(t.a, 'terminal', { command: 'echo alpha-only > /workspace/a.txt && export A_SECRET=alpha' }, source)) as { exit_code: number };
    assert.equal(setup.exit_code, 0);
    snapshotId = (await t.a.snapshot({ taskId: source, label: 'alpha label' })).snapshot?.snapshotId ?? '';
    assert.match(snapshotId, /^snap_[0-9a-f]{24}$/);
  });

  after(async () => {
    await t?.stop();
    for (const id of taskIds) await removeLabelled(docker, LABEL.task, id);
    await removeSnapshotImages(docker, [stateRoot]);
  });

  test("B's ListSnapshots shows none of A's", async () => {
    assert.deepEqual((await t.b.listSnapshots({})).snapshots, []);
  });

  test("Fork of A's snapshot answers B like a snapshot that never existed, and makes no task", async () => {
    const never = `snap_${hex(12)}`;
    const intoA = taskId('b-fork');
    const intoNever = taskId('b-fork-never');
    const theirs = await answerOf(() => t.b.fork({ snapshotId, sourceTaskId: '', taskId: intoA, label: '' }));
    const nothing = await answerOf(() => t.b.fork({ snapshotId: never, sourceTaskId: '', taskId: intoNever, label: '' }));
    assert.match(nothing, /^error 5 /);
    assert.equal(normalized(theirs, snapshotId, intoA), normalized(nothing, never, intoNever));
    const ls = JSON.parse(await t.call(t.b, 'terminal', { command: 'ls /workspace; echo "[$A_SECRET]"' }, intoA)) as { output: string };
    assert.equal(ls.output, '[]', 'B got a fresh task, not A\'s files');
  });

  test("DeleteSnapshot of A's snapshot answers B like one that never existed, and leaves it", async () => {
    const never = `snap_${hex(12)}`;
    const theirs = await answerOf(() => t.b.deleteSnapshot({ snapshotId }));
    const nothing = await answerOf(() => t.b.deleteSnapshot({ snapshotId: never }));
    assert.match(nothing, /^error 5 /);
    assert.equal(normalized(theirs, snapshotId), normalized(nothing, never));
    assert.deepEqual((await t.a.listSnapshots({})).snapshots.map((s) => s.snapshotId), [snapshotId]);
  });

  test("Snapshot and Fork of A's task id answer B like a task B never made", async () => {
    const never = taskId(`never-${hex(4)}`);
    const theirs = await answerOf(() => t.b.snapshot({ taskId: source, label: '' }));
    const nothing = await answerOf(() => t.b.snapshot({ taskId: never, label: '' }));
    assert.match(nothing, /^error 5 /);
    assert.equal(normalized(theirs, source), normalized(nothing, never));
    const into = taskId('b-fork-task');
    const forkTheirs = await answerOf(() => t.b.fork({ snapshotId: '', sourceTaskId: source, taskId: into, label: '' }));
    const forkNothing = await answerOf(() => t.b.fork({ snapshotId: '', sourceTaskId: never, taskId: into, label: '' }));
    assert.equal(normalized(forkTheirs, source), normalized(forkNothing, never));
  });

  test("A still forks its snapshot and gets its files and variables", async () => {
    const fork = taskId('a-fork');
    await t.a.fork({ snapshotId, sourceTaskId: '', taskId: fork, label: '' });
    const r = JSON.parse(await t.call(t.a, 'terminal', { command: 'cat /workspace/a.txt; echo "$A_SECRET"' }, fork)) as { output: string };
    assert.equal(r.output, 'alpha-only\nalpha');
    assert.equal((await t.a.deleteSnapshot({ snapshotId })).deleted, true);
  });
});
