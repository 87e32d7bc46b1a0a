/**
 * terminal.docker_extra_args: `docker run` flags translated to Engine API
 * create options; flags Berth owns or that undo the sandbox, and flags it
 * does not know, are refused rather than dropped.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidArgumentError } from '../../services/common/errors.js';
import { buildContainerCreateOptions, type ContainerSpecInput } from '../../services/executor/backends/docker/container-spec.js';
import { parseDockerExtraArgs, parseDockerSize } from '../../services/executor/backends/docker/docker-extra-args.js';

const refused = (args: string[], pattern: RegExp) =>
  assert.throws(
    () => parseDockerExtraArgs(args),
    (err: unknown) => err instanceof InvalidArgumentError && /^terminal\.docker_extra_args: /.test(err.message) && pattern.test(err.message),
  );

describe('parseDockerExtraArgs', () => {
  test('takes --flag=value and --flag value alike', () => {
    const { options, weakening } = parseDockerExtraArgs([
      '--shm-size=1g',
      '--ulimit',
      'nofile=1024:2048',
      '--ulimit=nproc=100',
      '-e',
      'A=1=2',
      '--env=B=',
      '--label',
      'team=ml',
      '--add-host=db.internal:10.0.0.5',
      '--dns',
      '10.0.0.53',
      '--dns-search=corp.example',
      '--dns-option=ndots:2',
      '--tmpfs',
      '/cache:size=64m,exec',
      '-v',
      '/srv/data:/data:ro',
    ]);
    assert.equal(options.shmSizeBytes, 1024 ** 3);
    assert.deepEqual(options.ulimits, [
      { Name: 'nofile', Soft: 1024, Hard: 2048 },
      { Name: 'nproc', Soft: 100, Hard: 100 },
    ]);
    assert.deepEqual(options.env, { A: '1=2', B: '' });
    assert.deepEqual(options.labels, { team: 'ml' });
    assert.deepEqual(options.extraHosts, ['db.internal:10.0.0.5']);
    assert.deepEqual([options.dns, options.dnsSearch, options.dnsOptions], [['10.0.0.53'], ['corp.example'], ['ndots:2']]);
    assert.deepEqual(options.tmpfs, { '/cache': 'size=64m,exec' });
    assert.deepEqual(options.binds, ['/srv/data:/data:ro']);
    assert.deepEqual(weakening, [], 'none of these weakens the sandbox');
  });

  test('names what weakens the sandbox: capabilities, devices, GPUs, security options', () => {
    const { options, weakening } = parseDockerExtraArgs([
      '--cap-add=cap_net_raw',
      '--device=/dev/fuse',
      '--device',
      '/dev/snd:/dev/audio:r',
      '--gpus',
      'all',
      '--security-opt=apparmor=unconfined',
      '--security-opt=no-new-privileges',
    ]);
    assert.deepEqual(options.capAdd, ['NET_RAW']);
    assert.deepEqual(options.devices, [
      { PathOnHost: '/dev/fuse', PathInContainer: '/dev/fuse', CgroupPermissions: 'rwm' },
      { PathOnHost: '/dev/snd', PathInContainer: '/dev/audio', CgroupPermissions: 'r' },
    ]);
    assert.deepEqual(options.gpus, { count: -1, deviceIds: [] });
    assert.equal(weakening.length, 5, weakening.join('\n'));
    assert.match(weakening.join('\n'), /NET_RAW/);
    assert.match(weakening.join('\n'), /apparmor=unconfined/);
    assert.doesNotMatch(weakening.join('\n'), /no-new-privileges/);
    assert.deepEqual(parseDockerExtraArgs(['--gpus=device=0,2']).options.gpus, { count: 0, deviceIds: ['0', '2'] });
    assert.deepEqual(parseDockerExtraArgs(['--gpus', '2']).options.gpus, { count: 2, deviceIds: [] });
  });

  test('refuses flags Berth owns or that undo the sandbox, saying what to use instead', () => {
    refused(['--privileged'], /--privileged is not accepted: a privileged container is no sandbox/);
    refused(['--memory=2g'], /use terminal\.container_memory/);
    refused(['-m', '2g'], /use terminal\.container_memory/);
    refused(['--network', 'host'], /use docker\.network/);
    refused(['--user=0'], /each task's own uid \(docker\.task_uids\)/);
    // The container's root needs these to run commands as the task's uid.
    refused(['--cap-drop=SETUID'], /--cap-drop SETUID is not accepted: the container's root needs it/);
    refused(['--cap-drop', 'cap_chown'], /--cap-drop CHOWN is not accepted/);
    refused(['--storage-opt', 'size=1g'], /use terminal\.container_disk/);
    refused(['--cap-add=ALL'], /one by one/);
    refused(['--security-opt', 'no-new-privileges:false'], /no-new-privileges stays on/);
    refused(['--label=berth.task=other'], /Berth's own/);
    refused(['--tmpfs=/run/berth'], /reserved for Berth/);
    refused(['-v', '/x:/run/berth/agent.sock'], /reserved for Berth/);
  });

  test('refuses what it does not know, and malformed values, instead of dropping them', () => {
    refused(['--oom-score-adj=500'], /--oom-score-adj is not supported\. Supported: --env, --label, --shm-size/);
    refused(['nofile=10'], /is not a flag/);
    refused(['--ulimit'], /--ulimit needs a value/);
    refused(['--ulimit=nofile'], /NAME=SOFT\[:HARD\]/);
    refused(['--ulimit=nofile=10:5'], /soft limit exceeds/);
    refused(['--shm-size=lots'], /not a size/);
    refused(['--add-host=nohost'], /HOST:IP/);
    refused(['-e', 'NOVALUE'], /KEY=VALUE/);
    refused(['--device=dev/fuse'], /\/HOST\[:\/CONTAINER\[:rwm\]\]/);
    refused(['--gpus=many'], /all, a count or device=ID/);
  });

  test('sizes use docker run\'s binary units', () => {
    assert.deepEqual(
      ['512', '64k', '64m', '1.5g', '2G', '128mb'].map((s) => parseDockerSize(s, '--shm-size')),
      [512, 64 * 1024, 64 * 1024 ** 2, 1.5 * 1024 ** 3, 2 * 1024 ** 3, 128 * 1024 ** 2],
    );
  });
});

describe('extra options in the create options', () => {
  const base: ContainerSpecInput = {
    name: 'berth-task',
    image: 'berth-sandbox:latest',
    hostDir: '/var/lib/berth/docker/tasks/abc',
    labels: { 'berth.task': 't1' },
    env: { HOME: '/home/sandbox', FOO: 'bar' },
    memoryMiB: 512,
    cpus: 1,
    pidsLimit: 256,
    network: 'none',
    readOnlyRoot: false,
    runtime: '',
    binds: ['/a:/a'],
    workspaceDir: '/workspace',
    homeDir: '/home/sandbox',
    identity: { uid: 1_900_000_001, gid: 1_900_000_001 },
  };

  test('are added on top of the hardening, which they cannot replace', () => {
    const { options: extra } = parseDockerExtraArgs([
      '--shm-size=256m',
      '--ulimit=nofile=1024:2048',
      '--cap-add=NET_RAW',
      '--cap-drop=AUDIT_WRITE',
      '--security-opt=apparmor=unconfined',
      '-e',
      'FOO=from-extra',
      '-e',
      'BERTH_AGENT_TOKEN=stolen',
      '--label=team=ml',
      '--tmpfs=/tmp:size=2g,exec',
      '-v',
      '/b:/b:ro',
      '--gpus=all',
    ]);
    const o = buildContainerCreateOptions({ ...base, extra });
    const h = o.HostConfig!;
    assert.deepEqual(h.CapDrop, ['ALL']);
    assert.deepEqual(h.CapAdd, ['CHOWN', 'DAC_READ_SEARCH', 'SETGID', 'SETUID', 'NET_RAW']);
    assert.deepEqual(h.SecurityOpt, ['no-new-privileges:true', 'apparmor=unconfined']);
    assert.equal(h.PidsLimit, 256);
    assert.equal(h.Memory, 512 * 1024 * 1024);
    assert.equal(h.ShmSize, 256 * 1024 ** 2);
    assert.deepEqual(h.Ulimits, [{ Name: 'nofile', Soft: 1024, Hard: 2048 }]);
    assert.equal(h.Tmpfs!['/tmp'], 'size=2g,exec');
    assert.match(h.Tmpfs!['/run']!, /size=64m/);
    assert.deepEqual(h.Binds, ['/a:/a', '/b:/b:ro']);
    assert.deepEqual(h.DeviceRequests, [{ Driver: '', Count: -1, DeviceIDs: [], Capabilities: [['gpu']], Options: {} }]);
    assert.equal(o.User, '0:0', 'the agent\'s; commands run as the task\'s uid');
    assert.ok(o.Env!.includes('FOO=from-extra'));
    assert.ok(!o.Env!.some((e) => e.startsWith('BERTH_AGENT_TOKEN=')), 'the agent token never enters the environment');
    assert.deepEqual(o.Labels, { team: 'ml', 'berth.task': 't1', 'berth.uid': '1900000001', 'berth.memory': '512' });
  });
});
