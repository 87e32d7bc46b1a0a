/**
 * A task's own uid on the docker backend, against the real engine: kept
 * across a replaced container and an executor started anew (the persistent
 * volumes stay the task's), taken over by a volume made before uids were
 * per task (everything in it given to the task, through private
 * directories, never through a symlink or into an operator's bind), never
 * shared between tasks of two executors on one engine, refused where the
 * host uses it; and the agent acting as the task's user (files, pipes, a
 * PTY, a private working directory behave as they do for the user).
 *
 * Every container and volume is labelled with this run's tenant and removed
 * in `after`.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { BerthError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { DockerBackend } from '../../services/executor/backends/docker/docker-backend.js';
import type { DockerBackendOptions } from '../../services/executor/backends/docker/docker-backend-options.js';
import { TaskNames } from '../../services/executor/backends/docker/task-names.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { SANDBOX_IMAGE, cleanupDocker, dockerUnavailableReason } from '../support/docker-fixtures.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const RUN = randomBytes(4).toString('hex');
const TENANT = `docker-uid-${RUN}`;
const stateRoots: string[] = [];
// Every executor here shares one name key (docker.name_key_file), so the tests know the names of a task's volumes before one starts.
const keyDir = await mkdtemp(path.join(os.tmpdir(), 'berth-docker-uid-key-'));
stateRoots.push(keyDir);
const nameKeyFile = path.join(keyDir, 'name-key');
const names = await TaskNames.load(nameKeyFile);
const open: { envs: TaskEnvironments; backend: DockerBackend }[] = [];
let taskNo = 0;
const newKey = (): TaskKey => ({ tenant: TENANT, taskId: `t${++taskNo}` });

async function start(options: Partial<DockerBackendOptions> = {}): Promise<{ envs: TaskEnvironments; backend: DockerBackend }> {
  const stateRoot = options.stateRoot ?? (await mkdtemp(path.join(os.tmpdir(), 'berth-docker-uid-')));
  if (!stateRoots.includes(stateRoot)) stateRoots.push(stateRoot);
  const backend = await DockerBackend.start({
    image: SANDBOX_IMAGE,
    stateRoot,
    persistent: true,
    memoryMiB: 1024,
    sweepIntervalMs: 0,
    nameKeyFile,
    logger: silentLogger(),
    ...options,
  });
  const envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
  open.push({ envs, backend });
  return { envs, backend };
}

async function stop(x: { envs: TaskEnvironments; backend: DockerBackend }): Promise<void> {
  await x.envs.closeAll();
  await x.backend.close();
}

const run = async (envs: TaskEnvironments, key: TaskKey, command: string, extra: { pty?: boolean } = {}) => {
  const r = await envs.exec(key, { command, timeoutMs: 60_000, maxOutputChars: 100_000, ...extra });
  return { ...r, output: r.output.replace(/\r\n/g, '\n') };
};
const uidOf = async (envs: TaskEnvironments, key: TaskKey) => (await run(envs, key, 'id -u')).output.trim();

/** Runs `script` as root in a throwaway container with the task's volumes mounted at /ws and /home. */
async function inVolumes(key: TaskKey, script: string): Promise<string> {
  const { workspace, home } = names.volumes(key);
  const c = await docker.createContainer({
    Image: SANDBOX_IMAGE,
    User: '0:0',
    Entrypoint: ['sh', '-c', script],
    Labels: { [LABEL.tenant]: TENANT },
    HostConfig: { NetworkMode: 'none', Mounts: [
      { Type: 'volume', Source: workspace, Target: '/ws' },
      { Type: 'volume', Source: home, Target: '/home' },
    ] },
  });
  try {
    await c.start();
    await c.wait();
    const logs = (await c.logs({ stdout: true, stderr: true, follow: false })) as Buffer;
    // Each record of the multiplexed log starts with an 8-byte header.
    let out = '';
    for (let i = 0; i + 8 <= logs.length; ) {
      const size = logs.readUInt32BE(i + 4);
      out += logs.subarray(i + 8, i + 8 + size).toString('utf8');
      i += 8 + size;
    }
    return out;
  } finally {
    await c.remove({ force: true });
  }
}

describe("a task's own uid (real engine)", { skip: unavailable, timeout: 600_000 }, () => {
  after(async () => {
    for (const x of open) await stop(x).catch(() => undefined);
    await cleanupDocker(docker, TENANT, stateRoots);
    for (const root of stateRoots) await rm(root, { recursive: true, force: true });
  });

  it('stays the same across a replaced container and an executor started anew; the files stay the task\'s', async () => {
    const first = await start();
    const key = newKey();
    const uid = await uidOf(first.envs, key);
    assert.match(uid, /^19\d{8}$/);
    assert.equal((await run(first.envs, key, 'echo kept > /workspace/f; mkdir -p ~/.cache; echo home > ~/.cache/h')).exitCode, 0);
    const { workspace, home } = names.volumes(key);
    for (const name of [workspace, home]) {
      assert.equal((await docker.getVolume(name).inspect()).Labels?.[LABEL.uid], uid, `${name} records the uid`);
    }
    // The container goes away under the task: the next call gets a new one, same uid.
    await docker.getContainer(names.container(key)).remove({ force: true });
    const again = await run(first.envs, key, 'id -u; cat /workspace/f; echo more >> /workspace/f && echo writable');
    assert.deepEqual(again.output.trim().split('\n'), [uid, 'kept', 'writable']);
    assert.ok(again.notices.some((n) => /a new container was started/.test(n)), JSON.stringify(again.notices));
    // Another executor process (same state root, as after a restart) finds the uid on the volumes.
    await stop(first);
    const second = await start({ stateRoot: stateRoots.at(-1)! });
    const later = await run(second.envs, key, 'id -u; stat -c %u /workspace /workspace/f ~ ~/.cache/h | sort -u; echo x >> ~/.cache/h && echo writable');
    assert.deepEqual(later.output.trim().split('\n'), [uid, uid, 'writable']);
  });

  it('a volume from before (files of uid 1000, a private directory, a symlink out, an operator\'s bind inside) becomes the task\'s', async () => {
    const bindDir = await mkdtemp(path.join(os.tmpdir(), 'berth-uid-bind-'));
    stateRoots.push(bindDir);
    await writeFile(path.join(bindDir, 'host-file'), 'host\n');
    await chmod(bindDir, 0o755);
    const key = newKey();
    const { workspace, home } = names.volumes(key);
    for (const name of [workspace, home]) await docker.createVolume({ Name: name, Labels: { [LABEL.tenant]: TENANT, [LABEL.task]: key.taskId } });
    await inVolumes(
      key,
      'mkdir -p /ws/private/deeper /ws/data && echo secret > /ws/private/deeper/key && echo profile > /home/.profile && ' +
        'ln -s /etc/shadow /ws/shadow-link && chown -R 1000:1000 /ws /home && chmod 700 /ws/private /ws/private/deeper',
    );
    const { envs } = await start({ volumes: [`${bindDir}:/workspace/data`] });
    const uid = await uidOf(envs, key);
    const r = await run(
      envs,
      key,
      'cat /workspace/private/deeper/key ~/.profile; find /workspace ~ -path /workspace/data -prune -o ! -uid $(id -u) -print; ' +
        'stat -c %U /etc/shadow; stat -c %u /workspace/data/host-file',
    );
    assert.equal(r.exitCode, 0, r.output);
    // Everything in the volumes is the task's now, links included; /etc/shadow and the file in the operator's bind are not.
    assert.deepEqual(r.output.trim().split('\n'), ['secret', 'profile', 'root', '0']);
    assert.equal((await stat(path.join(bindDir, 'host-file'))).uid, 0, "the operator's bind is never given away");
    assert.equal((await inVolumes(key, 'stat -c %u /ws/shadow-link /ws/private/deeper/key | sort -u')).trim(), uid);
  });

  it('two executors on one engine never give one uid to two tasks; a full range is refused naming the key', async () => {
    // A range of two: the second executor must find the first's uid taken by its container's label.
    const range = '5000-5001';
    const a = await start({ taskUids: range, persistent: false });
    const b = await start({ taskUids: range, persistent: false });
    const uids = [await uidOf(a.envs, newKey()), await uidOf(b.envs, newKey())];
    assert.deepEqual(uids.sort(), ['5000', '5001']);
    await assert.rejects(b.envs.exec(newKey(), { command: 'true', timeoutMs: 60_000 }), (err: unknown) => {
      assert.ok(err instanceof BerthError);
      assert.equal(err.code, 'RESOURCE_EXHAUSTED');
      assert.match(err.message, /no free uid for a new task in docker\.task_uids \(5000-5001\)/);
      return true;
    });
  });

  it('a range that holds a host account, or the executor itself, stops the executor at start', async () => {
    const nobody = (await readFile('/etc/passwd', 'utf8')).split('\n').find((l) => l.startsWith('nobody:'))?.split(':')[2];
    assert.ok(nobody, 'this host has a nobody account');
    await assert.rejects(start({ taskUids: `${nobody}-${nobody}` }), (err: unknown) => {
      assert.ok(err instanceof BerthError);
      assert.equal(err.code, 'FAILED_PRECONDITION');
      assert.match(err.message, new RegExp(`docker\\.task_uids \\(${nobody}-${nobody}\\) holds ids this host uses: /etc/passwd: nobody \\(${nobody}\\)`));
      return true;
    });
  });

  it('the agent acts as the task\'s user: its files, pipes and PTY are the task\'s, a private working directory works', async () => {
    const { envs } = await start({ persistent: false });
    const key = newKey();
    const uid = await uidOf(envs, key);
    await envs.writeFile(key, '/workspace/written.txt', 'by the file tool\n');
    const r = await run(
      envs,
      key,
      [
        'stat -c "%u %a" /workspace/written.txt',
        'echo piped | cat /dev/stdin',
        'echo direct > /dev/stdout',
        'mkdir -p /workspace/mine && chmod 700 /workspace/mine && cd /workspace/mine',
      ].join('; '),
    );
    assert.deepEqual(r.output.trim().split('\n'), [`${uid} 644`, 'piped', 'direct']);
    // The next command starts in the private directory the last one left it in.
    assert.equal((await run(envs, key, 'pwd')).output.trim(), '/workspace/mine');
    const tty = await run(envs, key, 'stat -c %u "$(tty)"; id -u', { pty: true });
    assert.deepEqual(tty.output.trim().split('\n'), [uid, uid]);
  });
});
