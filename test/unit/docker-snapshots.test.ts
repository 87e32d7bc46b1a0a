/** docker snapshots: what each setting allows, the labels that carry a snapshot, and gVisor's probe (against a test double of the Engine API). */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { PassThrough } from 'node:stream';
import type Dockerode from 'dockerode';
import { FailedPreconditionError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { dockerLifecycle } from '../../services/executor/backends/docker/docker-lifecycle.js';
import {
  DockerSnapshots,
  GVISOR_OVERLAY_REFUSAL,
  SNAPSHOT_LABEL,
  snapshotFromLabels,
  snapshotLabels,
  sweepSnapshotLeftovers,
} from '../../services/executor/backends/docker/docker-snapshots.js';

const made = {
  id: 'snap_0123456789abcdef01234567',
  tenant: 'acme',
  sourceTaskId: 'base',
  label: 'deps "installed"\nline two',
  createdAtMs: 1_764_000_000_000,
  shell: { cwd: '/workspace/app dir', script: "declare -x A='b c'\nf () \n{ \n    echo $'\\x01'\n}\n" },
};

describe('docker snapshot labels', () => {
  test('carry a snapshot there and back, shell state and label byte for byte', () => {
    const labels = snapshotLabels(made, 'owner-hash');
    assert.deepEqual(snapshotFromLabels(labels, 'acme', 'owner-hash', 1234), { ...made, sizeBytes: 1234, includesProcesses: false });
  });

  test("blank the source container's task, tenant, host directory and uid, so forks inherit none of them", () => {
    const labels = snapshotLabels(made, 'owner-hash');
    for (const key of [LABEL.task, LABEL.tenant, LABEL.hostDir, LABEL.uid]) assert.equal(labels[key], '', key);
    assert.ok(!Object.values(labels).includes('acme'), 'the tenant id is never written, only its keyed hash');
  });

  test("are another owner's, or not a finished snapshot: nothing", () => {
    const labels = snapshotLabels(made, 'owner-hash');
    assert.equal(snapshotFromLabels(labels, 'acme', 'other-hash', 0), undefined);
    assert.equal(snapshotFromLabels({ ...labels, [SNAPSHOT_LABEL.id]: '../etc' }, 'acme', 'owner-hash', 0), undefined);
    assert.equal(snapshotFromLabels({ ...labels, [SNAPSHOT_LABEL.createdMs]: 'soon' }, 'acme', 'owner-hash', 0), undefined);
    assert.equal(snapshotFromLabels({ [SNAPSHOT_LABEL.part]: made.id }, 'acme', 'owner-hash', 0), undefined);
  });
});

describe('docker lifecycle capabilities', () => {
  const base = { runtime: '', persistent: true, readOnlyRoot: false, role: 'task' } as const;

  test('snapshots of files and shell state, never processes, by default and without volumes', () => {
    for (const input of [base, { ...base, persistent: false }, { ...base, readOnlyRoot: true }]) {
      const caps = dockerLifecycle(input);
      assert.deepEqual([caps.snapshot, caps.processes], [true, false], JSON.stringify(input));
      assert.match(caps.notes?.join(' ') ?? '', /not running processes/);
    }
  });

  test('under gVisor: snapshots on, and the notes say what runsc needs for them', () => {
    const gvisor = dockerLifecycle({ ...base, runtime: 'runsc' });
    assert.deepEqual([gvisor.snapshot, gvisor.processes, gvisor.suspend], [true, false, true]);
    assert.match(gvisor.notes?.join(' ') ?? '', /--overlay2=none/);
  });

  test('refused where docker commit cannot see the files: a read-only root without volumes, code containers', () => {
    const tmpfs = dockerLifecycle({ ...base, persistent: false, readOnlyRoot: true });
    assert.equal(tmpfs.snapshot, false);
    assert.match(tmpfs.notes?.[0] ?? '', /set terminal.container_persistent: true/);
    assert.equal(dockerLifecycle({ ...base, role: 'code' }).snapshot, false);
  });
});

describe('docker snapshots under gVisor: the commit-visibility probe', () => {
  /** A test double of the Engine API calls the probe makes: exec (always exit 0) and the container's changes. */
  function engine(changes: (file: string) => { Path: string }[]) {
    const calls = { execs: [] as string[][], commits: 0 };
    let probeFile = '';
    const container = {
      exec: async (options: { Cmd: string[] }) => {
        calls.execs.push(options.Cmd);
        if (options.Cmd[0] === '/bin/sh') probeFile = options.Cmd.at(-1) ?? '';
        const output = new PassThrough();
        setImmediate(() => output.end().resume());
        return { start: async () => output, inspect: async () => ({ ExitCode: 0 }) };
      },
      modem: { demuxStream: () => undefined },
      changes: async () => changes(probeFile),
      commit: async () => {
        calls.commits++;
        throw new Error('commit is not part of this test double');
      },
    };
    const docker = { getContainer: () => container } as unknown as Dockerode;
    const snapshots = new DockerSnapshots({
      docker,
      daemon: 'unix:///test-double.sock',
      logger: silentLogger(),
      ownerOf: () => 'owner-hash',
      baseImage: 'berth-sandbox:test',
      workspaceDir: '/workspace',
      homeDir: '/home/user',
      executorLabels: () => ({}),
      probeCommitVisibility: true,
    });
    return { calls, snapshots };
  }

  test('refuses, before committing anything, when Docker does not see a file written in the container', async () => {
    const { calls, snapshots } = engine(() => [{ Path: '/etc' }]);
    for (let i = 0; i < 2; i++) {
      await assert.rejects(snapshots.take('ctr', undefined, made), (err: unknown) => err instanceof FailedPreconditionError && err.message === GVISOR_OVERLAY_REFUSAL);
    }
    assert.equal(calls.commits, 0);
    const probes = calls.execs.filter((cmd) => cmd[0] === '/bin/sh');
    assert.equal(probes.length, 1, 'probed once per executor');
    const probe = probes[0]!.at(-1)!;
    assert.match(probe, /^\/\.berth-snapshot-probe-[0-9a-f]{12}$/);
    assert.ok(calls.execs.some((cmd) => cmd.join(' ') === `/bin/rm -f -- ${probe}`), 'the probe file is removed');
  });

  test('goes on to commit when Docker sees the probe file among the changes', async () => {
    const { calls, snapshots } = engine((file) => [{ Path: file }]);
    await assert.rejects(snapshots.take('ctr', undefined, made), /test double/);
    assert.equal(calls.commits, 1);
  });
});

describe('the orphan sweep of snapshot images (against a test double of the Engine API)', () => {
  const MINUTE = 60_000;
  const now = 1_800_000_000_000;
  /** Untagged snapshot images as `docker images --filter dangling=true` lists them; removing one is recorded. */
  function engine(images: { Id: string; Labels: Record<string, string> }[]) {
    const removed: string[] = [];
    const docker = {
      listImages: async () => images,
      getImage: (id: string) => ({ remove: async () => void removed.push(id) }),
    } as unknown as Dockerode;
    return { docker, removed };
  }
  const finished = (id: string, createdMs: number) => ({ Id: id, Labels: { ...snapshotLabels({ ...made, createdAtMs: createdMs }, 'owner-hash') } });
  const part = (id: string, partMs: number) => ({ Id: id, Labels: { [SNAPSHOT_LABEL.part]: made.id, [SNAPSHOT_LABEL.partMs]: String(partMs) } });

  test("leaves a finished image made moments ago: it may be another executor's commit, not yet tagged", async () => {
    const { docker, removed } = engine([finished('sha256:young', now - MINUTE), part('sha256:young-part', now - MINUTE)]);
    assert.deepEqual(await sweepSnapshotLeftovers(docker, silentLogger(), now), []);
    assert.deepEqual(removed, []);
  });

  test('removes untagged images of deleted snapshots and parts of snapshots cut off, once old', async () => {
    const { docker, removed } = engine([finished('sha256:deleted', now - 31 * MINUTE), part('sha256:cut-off', now - 31 * MINUTE)]);
    assert.deepEqual(await sweepSnapshotLeftovers(docker, silentLogger(), now), ['sha256:deleted', 'sha256:cut-off']);
    assert.deepEqual(removed, ['sha256:deleted', 'sha256:cut-off']);
  });
});
