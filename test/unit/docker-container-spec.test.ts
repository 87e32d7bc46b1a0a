/** The docker backend's pure builders: create options (hardening), labels, names, env, volumes. */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { BerthError } from '../../services/common/errors.js';
import {
  AGENT_ENTRYPOINT_SCRIPT,
  LABEL,
  buildContainerCreateOptions,
  buildSandboxEnv,
  parseVolumeSpec,
  poolLabels,
  taskLabels,
  type ContainerSpecInput,
  type ExecutorLabels,
} from '../../services/executor/backends/docker/container-spec.js';
import { TaskNames } from '../../services/executor/backends/docker/task-names.js';

const names = new TaskNames(randomBytes(32));
const tenantCgroupParent = (tenant: string, driver: string | undefined) => names.cgroupParent(tenant, driver);

const executor: ExecutorLabels = {
  [LABEL.executor]: 'ex-abc',
  [LABEL.executorPid]: '42',
  [LABEL.executorStart]: '1234',
  [LABEL.executorPidNs]: 'boot/pid:[1]',
  [LABEL.stateRoot]: '/var/lib/berth',
};

function input(overrides: Partial<ContainerSpecInput> = {}): ContainerSpecInput {
  return {
    name: 'berth-task',
    image: 'berth-sandbox:latest',
    hostDir: '/var/lib/berth/docker/tasks/abc',
    labels: { a: 'b' },
    env: { HOME: '/home/sandbox', FOO: 'bar' },
    memoryMiB: 512,
    cpus: 1.5,
    pidsLimit: 256,
    network: 'none',
    readOnlyRoot: false,
    runtime: '',
    binds: [],
    workspaceDir: '/workspace',
    homeDir: '/home/sandbox',
    identity: { uid: 1_900_000_123, gid: 1_900_000_123 },
    ...overrides,
  };
}

describe('buildContainerCreateOptions', () => {
  test('pins the hardening: root with four capabilities for the entrypoint and agent, no-new-privileges, limits, init', () => {
    const o = buildContainerCreateOptions(input());
    // The agent starts as root and runs every command as the task's uid (entrypoint arguments below).
    assert.equal(o.User, '0:0');
    const h = o.HostConfig!;
    assert.deepEqual(h.CapDrop, ['ALL']);
    assert.deepEqual(h.CapAdd, ['CHOWN', 'DAC_READ_SEARCH', 'SETGID', 'SETUID']);
    assert.deepEqual(h.SecurityOpt, ['no-new-privileges:true']);
    assert.ok(!h.SecurityOpt!.some((s) => s.startsWith('seccomp')), 'the default seccomp profile applies');
    assert.equal(h.Privileged, undefined);
    assert.equal(h.PidsLimit, 256);
    assert.equal(h.Memory, 512 * 1024 * 1024);
    assert.equal(h.MemorySwap, 512 * 1024 * 1024, 'no swap beyond the memory limit');
    assert.equal(h.NanoCpus, 1_500_000_000);
    assert.equal(h.NetworkMode, 'none');
    assert.equal(h.ReadonlyRootfs, false);
    assert.equal(h.Init, true);
    assert.equal(h.Runtime, undefined);
    assert.equal(h.AutoRemove, false);
  });

  test('tmpfs mounts with the spec sizes; /var/tmp noexec; /run/berth is a bind under the /run tmpfs', () => {
    const h = buildContainerCreateOptions(input()).HostConfig!;
    assert.match(h.Tmpfs!['/tmp']!, /size=512m/);
    assert.match(h.Tmpfs!['/tmp']!, /(^|,)exec(,|$)/);
    assert.match(h.Tmpfs!['/var/tmp']!, /size=256m/);
    assert.match(h.Tmpfs!['/var/tmp']!, /noexec/);
    assert.match(h.Tmpfs!['/run']!, /size=64m/);
    assert.deepEqual(h.Mounts, [
      { Type: 'bind', Source: '/var/lib/berth/docker/tasks/abc', Target: '/run/berth', ReadOnly: false },
    ]);
  });

  test('runs the agent entrypoint, isolated from the sandbox\'s Python, as the task\'s uid, with no token in the environment', () => {
    const o = buildContainerCreateOptions(input());
    assert.deepEqual(o.Entrypoint, [
      '/bin/sh',
      '-c',
      AGENT_ENTRYPOINT_SCRIPT,
      'berth-sandbox',
      '1900000123',
      '1900000123',
      '/workspace',
      '/home/sandbox',
    ]);
    assert.deepEqual(o.Cmd, []);
    assert.ok(!o.Env!.some((e) => e.startsWith('BERTH_AGENT_TOKEN=')), 'every process could read it from /proc/1/environ');
    assert.ok(o.Env!.includes('FOO=bar'));
    assert.equal(o.WorkingDir, '/workspace');
    assert.deepEqual(o.Labels, { a: 'b', [LABEL.uid]: '1900000123', [LABEL.memory]: '512' });
    assert.match(AGENT_ENTRYPOINT_SCRIPT, /python3 -I -S \/run\/berth\/berth_agent\.pyz --user "\$ids" \/run\/berth\/agent\.sock/);
    // The walk that gives the workspace and home to the task never follows a link or enters another mount.
    assert.match(AGENT_ENTRYPOINT_SCRIPT, /find "\$dir" -xdev -mindepth 1 "\$@" -exec chown -h "\$ids" \{\} \+ && chown -h "\$ids" "\$dir"/);
  });

  test('binds the task\'s account files read-only over /etc/passwd and /etc/group', () => {
    const h = buildContainerCreateOptions(input({ accountFiles: { passwd: '/s/abc/passwd', group: '/s/abc/group' } })).HostConfig!;
    assert.deepEqual(h.Mounts!.slice(1), [
      { Type: 'bind', Source: '/s/abc/passwd', Target: '/etc/passwd', ReadOnly: true },
      { Type: 'bind', Source: '/s/abc/group', Target: '/etc/group', ReadOnly: true },
    ]);
  });

  test('persistent tasks mount named volumes at the workspace and home', () => {
    const h = buildContainerCreateOptions(
      input({ persistentVolumes: { workspace: 'v-ws', home: 'v-home' }, volumeLabels: { [LABEL.task]: 't' } }),
    ).HostConfig!;
    const volumes = h.Mounts!.filter((m) => m.Type === 'volume').map((m) => [m.Source, m.Target, m.VolumeOptions?.Labels]);
    // The uid rides on the volumes: a later container of the task runs as their files' owner.
    assert.deepEqual(volumes, [
      ['v-ws', '/workspace', { [LABEL.task]: 't', [LABEL.uid]: '1900000123' }],
      ['v-home', '/home/sandbox', { [LABEL.task]: 't', [LABEL.uid]: '1900000123' }],
    ]);
  });

  test('a read-only root without persistence puts the workspace and home on tmpfs owned by the task\'s uid', () => {
    const h = buildContainerCreateOptions(input({ readOnlyRoot: true })).HostConfig!;
    assert.equal(h.ReadonlyRootfs, true);
    assert.match(h.Tmpfs!['/workspace']!, /uid=1900000123,gid=1900000123/);
    assert.match(h.Tmpfs!['/home/sandbox']!, /uid=1900000123,gid=1900000123/);
  });

  test('disk limits: the writable layer through StorageOpt, named volumes through the local driver\'s size option', () => {
    const plain = buildContainerCreateOptions(input({ persistentVolumes: { workspace: 'v-ws', home: 'v-home' } }));
    assert.equal(plain.HostConfig!.StorageOpt, undefined, 'no limit asked for: none passed');
    for (const m of plain.HostConfig!.Mounts!.filter((x) => x.Type === 'volume')) {
      assert.deepEqual(m.VolumeOptions?.DriverConfig, { Name: 'local', Options: {} });
    }
    const limited = buildContainerCreateOptions(
      input({ persistentVolumes: { workspace: 'v-ws', home: 'v-home' }, disk: { layerMiB: 2048, volumeMiB: 1024 } }),
    );
    assert.deepEqual(limited.HostConfig!.StorageOpt, { size: '2048m' });
    const volumes = limited.HostConfig!.Mounts!.filter((m) => m.Type === 'volume');
    assert.equal(volumes.length, 2);
    for (const m of volumes) assert.deepEqual(m.VolumeOptions?.DriverConfig, { Name: 'local', Options: { size: '1024m' } });
    const layerOnly = buildContainerCreateOptions(input({ disk: { layerMiB: 64 } })).HostConfig!;
    assert.deepEqual(layerOnly.StorageOpt, { size: '64m' });
  });

  test('gVisor, bridge networking and extra binds are passed through', () => {
    const h = buildContainerCreateOptions(input({ runtime: 'runsc', network: 'bridge', binds: ['/data:/data:ro'] }))
      .HostConfig!;
    assert.equal(h.Runtime, 'runsc');
    assert.equal(h.NetworkMode, 'bridge');
    assert.deepEqual(h.Binds, ['/data:/data:ro']);
  });
});

describe('tenant cgroup parents', () => {
  test('one parent per tenant, in the shape each cgroup driver takes; none where the daemon manages no cgroups', () => {
    const fs = tenantCgroupParent('acme', 'cgroupfs')!;
    assert.match(fs, /^\/berth\/t[0-9a-f]{16}$/);
    assert.equal(tenantCgroupParent('acme', 'cgroupfs'), fs, 'stable');
    assert.notEqual(tenantCgroupParent('globex', 'cgroupfs'), fs, 'per tenant');
    assert.match(tenantCgroupParent('acme', 'systemd')!, /^berth-t[0-9a-f]{16}\.slice$/);
    assert.equal(tenantCgroupParent('acme', 'none'), undefined);
    assert.equal(tenantCgroupParent('acme', undefined), undefined);
  });

  test('the create options carry the parent when one is given, and none otherwise', () => {
    assert.equal(buildContainerCreateOptions(input({ cgroupParent: '/berth/tabc' })).HostConfig!.CgroupParent, '/berth/tabc');
    assert.equal(buildContainerCreateOptions(input()).HostConfig!.CgroupParent, undefined);
  });
});

describe('names and labels', () => {
  const key = { tenant: 'acme', taskId: 'task/1 with spaces' };

  test('container and volume names are stable, docker-safe and per task', () => {
    const name = names.container(key);
    assert.match(name, /^berth-[0-9a-f]{24}$/);
    assert.equal(names.container(key), name);
    assert.notEqual(names.container({ tenant: 'other', taskId: key.taskId }), name);
    const v = names.volumes(key);
    assert.equal(v.workspace, `${name}-workspace`);
    assert.equal(v.home, `${name}-home`);
  });

  test('no name can be computed from the tenant and task ids: another key gives other names, and the unkeyed hash is not one', () => {
    const other = new TaskNames(randomBytes(32));
    assert.notEqual(other.container(key), names.container(key));
    assert.notEqual(other.volumes(key).workspace, names.volumes(key).workspace);
    assert.notEqual(other.cgroupParent('acme', 'cgroupfs'), names.cgroupParent('acme', 'cgroupfs'));
    const unkeyed = createHash('sha256').update(`${key.tenant}/${key.taskId}`).digest('hex');
    assert.ok(!names.container(key).includes(unkeyed.slice(0, 24)));
    assert.ok(!names.cgroupParent('acme', 'cgroupfs')!.includes(createHash('sha256').update('acme').digest('hex').slice(0, 16)));
  });

  test('task containers carry task, tenant, executor and created labels', () => {
    const labels = taskLabels(key, executor, '/h', new Date('2026-01-02T03:04:05Z'));
    assert.equal(labels[LABEL.task], 'task/1 with spaces');
    assert.equal(labels[LABEL.tenant], 'acme');
    assert.equal(labels[LABEL.executor], 'ex-abc');
    assert.equal(labels[LABEL.created], '2026-01-02T03:04:05.000Z');
    assert.equal(labels[LABEL.hostDir], '/h');
    assert.equal(labels[LABEL.pool], undefined);
  });

  test('code containers have their own name per task and the same labels plus berth.role=code', () => {
    const name = names.container(key, 'code');
    assert.equal(name, names.container(key).replace(/^berth-/, 'berth-code-'));
    const now = new Date(0);
    const labels = taskLabels(key, executor, '/h', now, 'code');
    assert.deepEqual(labels, { ...taskLabels(key, executor, '/h', now), [LABEL.role]: 'code' });
    assert.equal(taskLabels(key, executor, '/h', now)[LABEL.role], undefined);
  });

  test('pool containers carry berth.pool and the executor, never a task', () => {
    const labels = poolLabels(executor, '/h', new Date(0));
    assert.equal(labels[LABEL.pool], '1');
    assert.equal(labels[LABEL.executor], 'ex-abc');
    assert.equal(labels[LABEL.task], undefined);
    assert.equal(labels[LABEL.tenant], undefined);
  });
});

describe('buildSandboxEnv', () => {
  test('forwards only listed names, never secret-looking ones unless passed through', () => {
    const { env, refused } = buildSandboxEnv({
      dockerEnv: { LANG: 'C.UTF-8' },
      forwardEnv: ['TZ', 'OPENAI_API_KEY', 'GITHUB_TOKEN', 'MISSING'],
      baseEnv: { TZ: 'UTC', OPENAI_API_KEY: 'sk-x', GITHUB_TOKEN: 'gh', PATH: '/host/bin', AWS_SECRET_ACCESS_KEY: 's' },
      envPassthrough: ['GITHUB_TOKEN'],
      homeDir: '/home/sandbox',
    });
    assert.deepEqual(env, { HOME: '/home/sandbox', TZ: 'UTC', GITHUB_TOKEN: 'gh', LANG: 'C.UTF-8' });
    assert.deepEqual(refused, ['OPENAI_API_KEY']);
  });
});

describe('parseVolumeSpec', () => {
  test('accepts host:container[:mode] and refuses /run/berth, relative targets and bad modes', () => {
    assert.equal(parseVolumeSpec('/data:/data:ro'), '/data:/data:ro');
    assert.equal(parseVolumeSpec('/a b:/c'), '/a b:/c');
    for (const bad of ['/data', '/x:/run/berth', '/x:/run/berth/sub', '/x:relative', '/x:/y:rx', ':/y']) {
      assert.throws(() => parseVolumeSpec(bad), (err: unknown) => err instanceof BerthError && err.code === 'INVALID_ARGUMENT', bad);
    }
  });
});
