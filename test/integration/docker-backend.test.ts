/**
 * The docker backend against the real engine: hardening seen from inside
 * the container, shell state, kills of the in-container process tree,
 * lifecycle (release, lost containers, orphan sweep), warm pool, bad input,
 * contained abuse, the docker exec fallback and gVisor.
 *
 * Every container and volume is labelled with this run's tenant or state
 * root and removed in `after`.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import Dockerode from 'dockerode';
import { BerthError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import { ENVIRONMENT_RECREATED_NOTE, terminalToolRegistration } from '../../services/dispatcher/tools/terminal/terminal-tool.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { DockerBackend } from '../../services/executor/backends/docker/docker-backend.js';
import type { DockerBackendOptions } from '../../services/executor/backends/docker/docker-backend-options.js';
import type { DockerEnvironment } from '../../services/executor/backends/docker/docker-environment.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import {
  SANDBOX_IMAGE,
  cleanupDocker,
  containerState,
  countProcessesWithArg,
  dockerUnavailableReason,
  hasRuntime,
  slowStartDockerProxy,
} from '../support/docker-fixtures.js';
import { taskClientOf, toolContextOf } from '../support/tool-tasks.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const RUN = randomBytes(4).toString('hex');
const TENANT = `docker-it-${RUN}`;
const stateRoots: string[] = [];
const backends: DockerBackend[] = [];
let taskNo = 0;

const newKey = (): TaskKey => ({ tenant: TENANT, taskId: `t${++taskNo}` });

async function newBackend(options: Partial<DockerBackendOptions> = {}): Promise<DockerBackend> {
  const stateRoot = options.stateRoot ?? (await mkdtemp(path.join(os.tmpdir(), 'berth-docker-it-')));
  if (!stateRoots.includes(stateRoot)) stateRoots.push(stateRoot);
  const backend = await DockerBackend.start({
    image: SANDBOX_IMAGE,
    stateRoot,
    persistent: false,
    memoryMiB: 1024,
    sweepIntervalMs: 0,
    logger: silentLogger(),
    ...options,
  });
  backends.push(backend);
  return backend;
}

function newEnvs(backend: DockerBackend): TaskEnvironments {
  return new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
}

const sleepSeconds = () => 900_000 + Math.floor(Math.random() * 99_999);

describe('docker backend (real engine)', { skip: unavailable }, () => {
  let backend: DockerBackend;
  let envs: TaskEnvironments;

  before(async () => {
    backend = await newBackend();
    envs = newEnvs(backend);
  });

  after(async () => {
    await envs?.closeAll();
    await Promise.all(backends.map((b) => b.close().catch(() => undefined)));
    await cleanupDocker(docker, TENANT, stateRoots);
    await Promise.all(stateRoots.map((r) => rm(r, { recursive: true, force: true })));
    const left = await docker.listContainers({ all: true, filters: { label: [`${LABEL.tenant}=${TENANT}`] } });
    assert.equal(left.length, 0, 'containers left behind');
  });

  const run = (e: TaskEnvironments, key: TaskKey, command: string, extra: { timeoutMs?: number; pty?: boolean } = {}) =>
    e.exec(key, { command, timeoutMs: extra.timeoutMs ?? 30_000, ...(extra.pty ? { pty: true } : {}) });

  it("hardening is visible from inside: the task's own uid, no capabilities, no-new-privileges, seccomp, pids limit", async () => {
    const key = newKey();
    const r = await run(
      envs,
      key,
      [
        'id -u; id -g',
        'grep -E "^(CapPrm|CapEff|CapBnd|NoNewPrivs|Seccomp):" /proc/self/status',
        // The agent and PID 1: the container root's, the agent with only SETUID and SETGID left.
        'agent=$(pgrep -f "^python3 -I -S /run/berth/berth_agent.pyz" | head -1)',
        'echo "agent $(grep -E "^(Uid|CapPrm|CapEff):" /proc/$agent/status | cut -f2- | tr "\\t\\n" "  ")"',
        'echo "pid1 $(grep -E "^Uid:" /proc/1/status | cut -f2)"',
        'cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max',
        'cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes',
        'findmnt -rno TARGET,OPTIONS /tmp /var/tmp /run /run/berth 2>/dev/null || mount | grep -E " on /(tmp|var/tmp|run|run/berth) "',
        'test -S /run/berth/agent.sock && echo agent-socket-visible',
        'touch /etc/berth-probe 2>&1 | head -1 || true',
      ].join('; '),
    );
    assert.equal(r.exitCode, 0, r.output);
    const lines = r.output.split('\n');
    const uid = Number(lines[0]);
    assert.ok(uid >= 1_900_000_000 && uid <= 1_916_777_215, `uid ${uid} is one of docker.task_uids`);
    assert.equal(lines[1], lines[0], 'the gid is the uid');
    assert.match(r.output, /CapPrm:\s+0000000000000000/);
    assert.match(r.output, /CapEff:\s+0000000000000000/);
    // CHOWN (0), DAC_READ_SEARCH (2), SETGID (6), SETUID (7): the bounding set holds nothing else.
    assert.match(r.output, /CapBnd:\s+00000000000000c5/);
    // Real and saved uid 0, effective and file-system uid the task's between spawns; SETUID and SETGID permitted only.
    assert.match(r.output, new RegExp(`^agent 0 ${uid} 0 ${uid} 00000000000000c0 0000000000000000 $`, 'm'));
    assert.match(r.output, /^pid1 0$/m);
    assert.match(r.output, /NoNewPrivs:\s+1/);
    assert.match(r.output, /Seccomp:\s+2/);
    assert.match(r.output, /^256$/m);
    assert.match(r.output, new RegExp(`^${1024 * 1024 * 1024}$`, 'm'));
    assert.match(r.output, /\/var\/tmp[^\n]*noexec/);
    assert.match(r.output, /agent-socket-visible/);
    const env = backendEnvOf(backend, key);
    const info = await docker.getContainer(env.container.id).inspect();
    assert.equal(info.Config.Labels[LABEL.task], key.taskId);
    assert.equal(info.Config.Labels[LABEL.tenant], TENANT);
    assert.equal(info.Config.Labels[LABEL.executor], backend.identity.id);
    assert.equal(info.Config.Labels[LABEL.uid], String(uid));
    assert.ok(!Number.isNaN(Date.parse(info.Config.Labels[LABEL.created] ?? '')));
    // docker.network: isolated is the default (test/isolation/network.test.ts covers what it blocks).
    assert.match(info.HostConfig.NetworkMode ?? '', /^berth-isolated-[0-9a-f]{10}$/);
    assert.equal(env.container.channel.kind, 'agent');
  });

  it('terminal.container_pids sets the pids limit the engine applies', async () => {
    const limited = await newBackend({ pidsLimit: 77, network: 'none' });
    const limitedEnvs = newEnvs(limited);
    const key = newKey();
    try {
      const r = await run(limitedEnvs, key, 'cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max');
      assert.equal(r.output.trim(), '77');
      const info = await docker.getContainer(backendEnvOf(limited, key).container.id).inspect();
      assert.equal(info.HostConfig.PidsLimit, 77);
    } finally {
      await limitedEnvs.closeAll();
    }
  });

  it('keeps cwd, exports and functions through the shell-state runner', async () => {
    const key = newKey();
    await run(envs, key, 'mkdir -p /tmp/a\\ b && cd "/tmp/a b" && export FOO=bar && greet() { echo "hi $1"; }');
    const r = await run(envs, key, 'pwd; echo $FOO; greet you');
    assert.deepEqual([r.output, r.exitCode], ['/tmp/a b\nbar\nhi you\n', 0]);
    assert.equal(await envs.cwd(key), '/tmp/a b');
  });

  it('commands started in a pre-started shell look like bash -c: $0, file descriptors, session; one killed early is replaced', async () => {
    const key = newKey();
    await run(envs, key, 'true'); // the container, the snapshot, and a shell started ahead for the next command
    const env = backendEnvOf(backend, key);
    const probe = [
      'tr "\\0" " " < /proc/$$/cmdline; echo',
      'echo "0=$0"',
      // Into a file, not a pipe: while bash sets up a pipeline it holds the pipes' fds itself, and `ls`
      // (already running) may list them.
      'f=$(mktemp); ls /proc/$$/fd > "$f"; sort -n "$f" | tr "\\n" " "; echo; rm -f "$f"',
      'ps -o sid= -p $$ | tr -d " "; echo "pid=$$"',
    ].join('\n');
    const direct = async (script: string) => {
      const chunks: Buffer[] = [];
      const r = await env.exec({ script, timeoutMs: 30_000, onOutput: (c) => chunks.push(c) });
      return { exitCode: r.exitCode, output: Buffer.concat(chunks).toString() };
    };
    const pre = await direct(probe);
    assert.equal(pre.exitCode, 0, pre.output);
    const [cmdline, zero, fds, sid, pid] = pre.output.trim().split('\n');
    assert.match(cmdline ?? '', /^bash -c \. \/dev\/fd\/\d+ bash $/, 'the command ran in the pre-started shell');
    assert.equal(zero, '0=bash');
    assert.equal(fds, '0 1 2 ');
    assert.equal(`pid=${sid}`, pid, 'the shell leads its own session');
    // A command that kills the waiting shell: the next command still runs (in a shell started for it).
    const killer = await direct("for p in $(pgrep -f '^bash -c [.] /dev/fd/'); do [ \"$p\" = $$ ] || kill -9 \"$p\"; done; echo done");
    assert.equal(killer.output, 'done\n');
    const after = await direct('echo "$0 ok"');
    assert.deepEqual(after, { exitCode: 0, output: 'bash ok\n' });
    // Scripts too large for one pipe write take a shell of their own.
    const large = await direct(`: '${'x'.repeat(70_000)}'; echo large-ok`);
    assert.deepEqual(large, { exitCode: 0, output: 'large-ok\n' });
  });

  it('a timeout kills the whole process tree inside the container (124), even what ignores SIGTERM', async () => {
    const key = newKey();
    const a = sleepSeconds();
    const b = sleepSeconds();
    const r = await run(envs, key, `echo before; (trap '' TERM; sleep ${a}) & sleep ${b}; echo never`, { timeoutMs: 1500 });
    assert.equal(r.exitCode, 124);
    assert.equal(r.timedOut, true);
    assert.match(r.output, /before/);
    assert.doesNotMatch(r.output, /never/);
    for (const n of [a, b]) {
      const ps = await run(envs, key, countProcessesWithArg(String(n)));
      assert.equal(ps.output.trim(), 'count=0', `sleep ${n} survived the timeout`);
    }
    const all = await run(envs, key, 'ps -eo args');
    assert.doesNotMatch(all.output, new RegExp(`sleep (${a}|${b})`));
  });

  it('an interrupt kills the command in the container (130)', async () => {
    const key = newKey();
    await run(envs, key, 'true');
    const n = sleepSeconds();
    const pending = run(envs, key, `sleep ${n}`);
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(envs.interrupt(key), 1);
    const r = await pending;
    assert.equal(r.exitCode, 130);
    const ps = await run(envs, key, countProcessesWithArg(String(n)));
    assert.equal(ps.output.trim(), 'count=0');
  });

  it('runs background processes: stdin, output, kill with -15', async () => {
    const key = newKey();
    // A stdin pipe on request; without one (and without a PTY) stdin is at end of input.
    const { sessionId } = await envs.startBackground(key, { command: 'while read -r l; do echo "got $l"; done', pipeStdin: true });
    await envs.process(key, { action: 'write', sessionId, data: 'one\n' });
    let seen = '';
    for (let i = 0; i < 100 && !seen.includes('got one'); i++) {
      seen = (JSON.parse(await envs.process(key, { action: 'poll', sessionId })) as { output_preview?: string }).output_preview ?? '';
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.match(seen, /got one/);
    const killed = JSON.parse(await envs.process(key, { action: 'kill', sessionId })) as { status?: string };
    assert.ok(killed.status);
    const waited = JSON.parse(await envs.process(key, { action: 'wait', sessionId, timeoutMs: 10_000 })) as { exit_code?: number };
    assert.equal(waited.exit_code, -15);
  });

  it('runs under a PTY', async () => {
    const key = newKey();
    const r = await run(envs, key, 'test -t 1 && echo is-a-tty; tput cols 2>/dev/null || stty size; exit 5', { pty: true });
    assert.equal(r.exitCode, 5);
    assert.match(r.output, /is-a-tty/);
  });

  it('file tools: spaces in paths, binary content and a 5 MB file', async () => {
    const key = newKey();
    const binary = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const big = randomBytes(5 * 1024 * 1024);
    const w = await envs.writeFile(key, '/workspace/dir with space/bin file.dat', binary);
    assert.equal(w.dirsCreated, true);
    assert.ok((await envs.readFile(key, '/workspace/dir with space/bin file.dat')).content.equals(binary));
    await envs.writeFile(key, 'big.bin', big);
    assert.ok((await envs.readFile(key, '/workspace/big.bin')).content.equals(big));
    const st = await envs.stat(key, '/workspace/big.bin');
    assert.deepEqual([st.exists, st.isDirectory, st.sizeBytes], [true, false, big.length]);
    const sum = await run(envs, key, 'sha256sum < /workspace/big.bin | cut -d" " -f1');
    const { createHash } = await import('node:crypto');
    assert.equal(sum.output.trim(), createHash('sha256').update(big).digest('hex'));
    await assert.rejects(envs.readFile(key, '/workspace/missing'), (err: unknown) => (err as BerthError).code === 'NOT_FOUND');
    await assert.rejects(envs.readFile(key, '/workspace'), (err: unknown) => (err as BerthError).code === 'INVALID_ARGUMENT');
  });

  it('release (EndTask) removes the container and its host directory', async () => {
    const key = newKey();
    await run(envs, key, 'true');
    const env = backendEnvOf(backend, key);
    const name = backend.containerNameOf(key);
    assert.equal(await containerState(docker, name), 'running');
    assert.equal(await envs.release(key), true);
    assert.equal(await containerState(docker, name), undefined);
    assert.equal(existsSync(env.rpcDir.hostPath), false);
  });

  it('a container removed mid-task is recreated, with a notice, keeping the shell state', async () => {
    const key = newKey();
    await run(envs, key, 'export KEPT=yes; cd /tmp');
    const env = backendEnvOf(backend, key);
    await docker.getContainer(env.container.id).remove({ force: true });
    const r = await run(envs, key, 'echo "$KEPT"; pwd');
    assert.equal(r.exitCode, 0, r.output);
    assert.equal(r.output, 'yes\n/tmp\n');
    assert.ok(r.notices.some((n) => /was removed.*new container was started/.test(n)), JSON.stringify(r.notices));
    assert.equal(r.environmentRecreated, true);
    assert.equal(await containerState(docker, backend.containerNameOf(key)), 'running');
    const again = await run(envs, key, 'true');
    assert.deepEqual(again.notices, []);
    assert.equal(again.environmentRecreated, undefined);
  });

  it("the terminal's next result after a removed container carries environment_recreated and the note", async () => {
    const key = newKey();
    const context = toolContextOf(key, taskClientOf(envs, key));
    const terminal = terminalToolRegistration();
    const call = async (command: string) => JSON.parse(await terminal.handler({ command }, context)) as Record<string, unknown>;
    assert.deepEqual(await call('cd /tmp && echo before'), { output: 'before', exit_code: 0, error: null, cwd: '/tmp' });
    await docker.getContainer(backendEnvOf(backend, key).container.id).remove({ force: true });
    const result = await call('pwd');
    assert.deepEqual(Object.keys(result), ['output', 'exit_code', 'error', 'environment_recreated']);
    assert.equal(result.environment_recreated, ENVIRONMENT_RECREATED_NOTE);
    assert.match(String(result.output), /^\/tmp\n\[Note: The task's container was removed.*a new container was started/);
    assert.deepEqual(await call('true'), { output: '', exit_code: 0, error: null });
  });

  it('a container removed while a command runs: the command ends, the next call works', async () => {
    const key = newKey();
    await run(envs, key, 'true');
    const env = backendEnvOf(backend, key);
    const pending = run(envs, key, 'sleep 60');
    await new Promise((r) => setTimeout(r, 500));
    await docker.getContainer(env.container.id).remove({ force: true });
    const r = await pending;
    assert.equal(r.exitCode, 137);
    assert.ok(r.notices.some((n) => /while the command ran/.test(n)), JSON.stringify(r.notices));
    assert.equal(r.environmentRecreated, true);
    assert.equal((await run(envs, key, 'echo ok')).output, 'ok\n');
  });

  it('a fork bomb hits the pids limit, is killed on timeout and reported; other tasks keep working', async () => {
    const key = newKey();
    const other = newKey();
    await run(envs, other, 'true');
    // Long enough for the bomb to reach the limit even on a loaded machine.
    const bomb = run(envs, key, 'bomb() { bomb | bomb; }; bomb', { timeoutMs: 10_000 });
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal((await run(envs, other, 'echo alive')).output, 'alive\n');
    const r = await bomb;
    assert.equal(r.exitCode, 124);
    assert.ok(r.notices.some((n) => /limit of 256 processes/.test(n)), JSON.stringify(r.notices));
    const after = await run(envs, key, 'echo recovered', { timeoutMs: 20_000 });
    assert.equal(after.output, 'recovered\n');
  });

  it('an output flood is capped and killed on timeout; the executor keeps serving', async () => {
    const key = newKey();
    const r = await envs.exec(key, { command: 'yes flood', timeoutMs: 2000, maxOutputChars: 10_000 });
    assert.equal(r.exitCode, 124);
    assert.ok(r.output.length < 12_000);
    assert.match(r.output, /OUTPUT TRUNCATED/);
    assert.equal((await run(envs, key, 'echo fine')).output, 'fine\n');
  });

  it('a memory hog is OOM-killed inside the container and reported', async () => {
    const small = await newBackend({ memoryMiB: 128 });
    const e = newEnvs(small);
    const key = newKey();
    try {
      const r = await run(e, key, 'python3 -c "b = bytearray(512 * 1024 * 1024); print(len(b))"; echo "status $?"');
      assert.match(r.output, /status 137/);
      assert.ok(r.notices.some((n) => /out-of-memory killer.*128 MiB/.test(n)), JSON.stringify(r.notices));
      assert.equal((await run(e, key, 'echo still-here')).output, 'still-here\n');
    } finally {
      await e.closeAll();
    }
  });

  it('persistent mode keeps /workspace and home in named volumes across a container restart', async () => {
    const persistent = await newBackend({ persistent: true });
    const e = newEnvs(persistent);
    const key = newKey();
    try {
      await run(e, key, 'echo data > /workspace/keep.txt; echo rc > ~/.berthrc; echo gone > /etc/../tmp/lost.txt');
      const env = backendEnvOf(persistent, key);
      await docker.getContainer(env.container.id).remove({ force: true });
      const r = await run(e, key, 'cat /workspace/keep.txt ~/.berthrc; cat /tmp/lost.txt 2>&1 | head -c 40');
      assert.match(r.output, /^data\nrc\n.*No such file/s);
      assert.ok(r.notices.some((n) => /files in \/workspace and \/home\/sandbox were kept/.test(n)));
      const { Volumes } = await docker.listVolumes({ filters: { label: [`${LABEL.task}=${key.taskId}`] } });
      assert.equal((Volumes ?? []).filter((v) => v.Labels?.[LABEL.tenant] === TENANT).length, 2);
    } finally {
      await e.closeAll();
    }
  });

  it('read-only root: the image is not writable, /workspace, home and /tmp are', async () => {
    const ro = await newBackend({ readOnlyRoot: true, network: 'none' });
    const e = newEnvs(ro);
    const key = newKey();
    try {
      const r = await run(
        e,
        key,
        'touch /usr/probe 2>/dev/null && echo root-writable || echo root-readonly; ' +
          'touch /workspace/w ~/h /tmp/t && echo writable; cat /sys/class/net/*/operstate 2>/dev/null | wc -l',
      );
      assert.match(r.output, /root-readonly\nwritable\n/);
      const env = backendEnvOf(ro, key);
      const info = await docker.getContainer(env.container.id).inspect();
      assert.equal(info.HostConfig.ReadonlyRootfs, true);
      assert.equal(info.HostConfig.NetworkMode, 'none');
    } finally {
      await e.closeAll();
    }
  });

  it('warm pool: a new task claims a started container, renamed and bound to it; the pool refills', async () => {
    const pooled = await newBackend({ warmPool: 1 });
    await pooled.pool!.whenFull();
    const e = newEnvs(pooled);
    const key = newKey();
    try {
      const started = performance.now();
      const r = await run(e, key, 'cat /run/berth/task.json');
      const firstCallMs = performance.now() - started;
      assert.equal(r.exitCode, 0);
      assert.deepEqual(
        { tenant: JSON.parse(r.output).tenant, task: JSON.parse(r.output).task },
        { tenant: TENANT, task: key.taskId },
      );
      const env = backendEnvOf(pooled, key);
      const info = await docker.getContainer(env.container.id).inspect();
      assert.equal(info.Name, `/${pooled.containerNameOf(key)}`);
      assert.equal(info.Config.Labels[LABEL.pool], '1');
      assert.equal(info.Config.Labels[LABEL.executor], pooled.identity.id);
      // The login shell ran while the container waited: the task starts from its snapshot, and state carries on.
      assert.equal(env.preparedSnapshot, '/run/berth/state/shell-snapshot.sh');
      assert.equal((await run(e, key, 'export FROM_POOL=1; cd /tmp')).exitCode, 0);
      assert.equal((await run(e, key, 'echo "$FROM_POOL $PWD $PATH"')).output, '1 /tmp /usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games\n');
      await pooled.pool!.whenFull();
      assert.equal(pooled.pool!.readyCount, 1);
      console.log(`warm pool first call: ${firstCallMs.toFixed(0)} ms`);
    } finally {
      await e.closeAll();
    }
  });

  it('adaptive warm pool: after a burst of new tasks it holds as many ready containers (up to its most), all claimable', async () => {
    const pooled = await newBackend({ warmPool: 1, warmPoolAdaptive: { max: 3, windowMs: 120_000, memoryMiB: 0 } });
    await pooled.pool!.whenFull();
    const e = newEnvs(pooled);
    try {
      const burst = [newKey(), newKey(), newKey()];
      await Promise.all(burst.map(async (key) => assert.equal((await run(e, key, 'true')).exitCode, 0)));
      assert.deepEqual(pooled.warmPoolStatus().target, 3);
      await pooled.pool!.whenFull();
      const ready = await docker.listContainers({ filters: { label: [`${LABEL.pool}=1`, `${LABEL.executor}=${pooled.identity.id}`] } });
      // The burst's own containers carry the pool label too when claimed: count the ones not bound to a task yet.
      const unclaimed = ready.filter((c) => c.Names.some((n) => n.startsWith('/berth-pool-')));
      assert.equal(unclaimed.length, 3);
      // The next burst of three is served from the pool.
      const next = [newKey(), newKey(), newKey()];
      await Promise.all(next.map(async (key) => assert.equal((await run(e, key, 'cat /run/berth/task.json')).exitCode, 0)));
      for (const key of next) {
        const info = await docker.getContainer(backendEnvOf(pooled, key).container.id).inspect();
        assert.equal(info.Config.Labels[LABEL.pool], '1', `${key.taskId} came from the pool`);
      }
    } finally {
      await e.closeAll();
    }
  });

  it('orphan sweep: after kill -9 of an executor, a restarted one removes its containers', async () => {
    const stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-docker-orphan-'));
    stateRoots.push(stateRoot);
    const script = path.join(stateRoot, 'doomed-executor.mjs');
    const modules = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../services');
    await writeFile(
      script,
      [
        `import { DockerBackend } from ${JSON.stringify(pathToFileURL(path.join(modules, 'executor/backends/docker/docker-backend.js')).href)};`,
        `import { silentLogger } from ${JSON.stringify(pathToFileURL(path.join(modules, 'common/logging.js')).href)};`,
        `const b = await DockerBackend.start({ image: ${JSON.stringify(SANDBOX_IMAGE)}, stateRoot: ${JSON.stringify(stateRoot)}, persistent: false, warmPool: 1, sweepIntervalMs: 0, logger: silentLogger() });`,
        `const env = await b.createEnvironment({ tenant: ${JSON.stringify(TENANT)}, taskId: 'doomed' });`,
        'await b.pool.whenFull();',
        "console.log('READY ' + env.containerName);",
        'setInterval(() => {}, 1000);',
      ].join('\n'),
    );
    const child = spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const name = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /READY (\S+)/.exec(out);
        if (m) resolve(m[1]!);
      });
      child.once('exit', (code) => reject(new Error(`doomed executor exited early (${code})`)));
    });
    const orphans = await docker.listContainers({ all: true, filters: { label: [`${LABEL.stateRoot}=${stateRoot}`] } });
    assert.equal(orphans.length, 2, 'one task container and one pool container');
    assert.equal(await containerState(docker, name), 'running');
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));

    const restarted = await newBackend({ stateRoot });
    const left = await docker.listContainers({ all: true, filters: { label: [`${LABEL.stateRoot}=${stateRoot}`] } });
    assert.deepEqual(
      left.filter((c) => c.Labels[LABEL.executor] !== restarted.identity.id).map((c) => c.Names),
      [],
      'containers of the killed executor survived the sweep',
    );
    // A live executor's containers are never swept by another.
    const keeper = await newBackend({ stateRoot });
    const e = newEnvs(keeper);
    const key = newKey();
    try {
      await run(e, key, 'true');
      const result = await restarted.sweep();
      assert.ok(!result.removed.includes(keeper.containerNameOf(key)));
      assert.equal(await containerState(docker, keeper.containerNameOf(key)), 'running');
    } finally {
      await e.closeAll();
    }
  });

  it('a container whose start fails is removed, not left in Created', async () => {
    const stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-docker-it-'));
    // A directory bound over a file of the image: create succeeds, start fails.
    const broken = await newBackend({ stateRoot, volumes: [`${stateRoot}:/usr/bin/env`] });
    const key = newKey();
    await assert.rejects(broken.createEnvironment(key), (err: unknown) => err instanceof BerthError);
    assert.equal(await containerState(docker, broken.containerNameOf(key)), undefined);
    const left = await docker.listContainers({ all: true, filters: { label: [`${LABEL.stateRoot}=${stateRoot}`] } });
    assert.deepEqual(left.map((c) => c.State), []);
  });

  it('a missing image fails with its name and how to build it', async () => {
    const bad = await newBackend({ image: `berth-no-such-image-${RUN}:latest` });
    await assert.rejects(bad.createEnvironment(newKey()), (err: unknown) => {
      assert.ok(err instanceof BerthError);
      assert.equal(err.code, 'FAILED_PRECONDITION');
      assert.match(err.message, new RegExp(`berth-no-such-image-${RUN}:latest`));
      assert.match(err.message, /make image/);
      return true;
    });
  });

  it('docker_extra_args: the flags it takes are visible from inside; the hardening stays; unknown flags stop the start', async () => {
    const hostDir = await mkdtemp(path.join(os.tmpdir(), 'berth-extra-bind-'));
    stateRoots.push(hostDir);
    await writeFile(path.join(hostDir, 'marker'), 'from the host\n', { mode: 0o644 });
    await chmod(hostDir, 0o755);
    const extra = await newBackend({
      extraArgs: [
        '--shm-size=96m',
        '--ulimit',
        'nofile=1000:2000',
        '--add-host=db.berth.test:10.1.2.3',
        '-e',
        'EXTRA_VAR=hello',
        '--label=team=ml',
        '--tmpfs=/cache:size=16m,exec',
        '-v',
        `${hostDir}:/data:ro`,
      ],
    });
    assert.equal(extra.capabilities.hostFilesystem, true, 'a bind from docker_extra_args is host access: approvals apply');
    const e = newEnvs(extra);
    const key = newKey();
    const r = await run(
      e,
      key,
      [
        "df -k /dev/shm /cache | awk 'NR>1 {print $2}'",
        'ulimit -n; ulimit -Hn',
        'getent hosts db.berth.test',
        'echo "$EXTRA_VAR"',
        'cat /data/marker',
        'id -u; grep CapEff /proc/self/status',
      ].join('; '),
    );
    const lines = r.output.trim().split('\n');
    assert.deepEqual(lines.slice(0, 4), ['98304', '16384', '1000', '2000'], r.output);
    assert.match(lines[4]!, /^10\.1\.2\.3\s+db\.berth\.test/);
    assert.deepEqual(lines.slice(5, 7), ['hello', 'from the host']);
    assert.match(lines[7]!, /^19\d{8}$/, "the task's own uid");
    assert.equal(lines[8], 'CapEff:\t0000000000000000');
    const info = await docker.getContainer(extra.containerNameOf(key)).inspect();
    assert.equal(info.Config.Labels.team, 'ml');
    assert.equal(info.Config.Labels[LABEL.task], key.taskId);
    assert.deepEqual(info.HostConfig.SecurityOpt, ['no-new-privileges:true']);
    await e.closeAll();

    await assert.rejects(newBackend({ extraArgs: ['--oom-kill-disable'] }), (err: unknown) => {
      assert.ok(err instanceof BerthError);
      assert.equal(err.code, 'INVALID_ARGUMENT');
      assert.match(err.message, /terminal\.docker_extra_args: --oom-kill-disable is not supported/);
      return true;
    });
    await assert.rejects(newBackend({ extraArgs: ['--privileged'] }), /--privileged is not accepted/);
  });

  it('a daemon that answers the start request late: the agent that dialled in meanwhile is still taken', async () => {
    // Under load dockerd may answer POST /start after the container's agent has connected and said hello.
    const proxy = await slowStartDockerProxy(1500);
    try {
      const slow = await newBackend({ socketPath: proxy.socketPath });
      const slowEnvs = newEnvs(slow);
      const key = newKey();
      assert.equal((await run(slowEnvs, key, 'echo agent-ok')).output, 'agent-ok\n');
      assert.equal(backendEnvOf(slow, key).container.channel.kind, 'agent', 'the exec agent, not the docker exec fallback');
      await slowEnvs.closeAll();
    } finally {
      await proxy.close();
    }
  });

  it('a dead Docker daemon gives UNAVAILABLE naming the socket; the backend still starts', async () => {
    const socketPath = path.join(os.tmpdir(), `berth-no-docker-${RUN}.sock`);
    const dead = await newBackend({ socketPath });
    await assert.rejects(dead.createEnvironment(newKey()), (err: unknown) => {
      assert.ok(err instanceof BerthError);
      assert.equal(err.code, 'UNAVAILABLE');
      assert.match(err.message, new RegExp(socketPath.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
      return true;
    });
  });

  it('images without python3 fall back to docker exec, with kills inside the container', async () => {
    const plain = await newBackend({ image: 'debian:bookworm-slim' });
    const e = newEnvs(plain);
    const key = newKey();
    try {
      const r = await run(e, key, 'cd /tmp && export X=1; echo out; echo err >&2; exit 3');
      assert.deepEqual([r.output, r.exitCode], ['out\nerr\n', 3]);
      assert.equal(backendEnvOf(plain, key).container.channel.kind, 'docker-exec');
      assert.equal((await run(e, key, 'echo "$X $(pwd)"')).output, '1 /tmp\n');
      const n = sleepSeconds();
      const t = await run(e, key, `sleep ${n} & sleep ${n + 1}`, { timeoutMs: 1500 });
      assert.equal(t.exitCode, 124);
      const ps = await run(e, key, countProcessesWithArg(String(n)));
      assert.equal(ps.output.trim(), 'count=0');
      await e.writeFile(key, '/tmp/with space.bin', Buffer.from([0, 1, 255]));
      assert.deepEqual([...(await e.readFile(key, '/tmp/with space.bin')).content], [0, 1, 255]);
      await assert.rejects(e.readFile(key, '/tmp/none'), (err: unknown) => (err as BerthError).code === 'NOT_FOUND');
      // The fallback's file helpers refuse what is not a regular file, and files over the cap, at once.
      const invalid = (pattern: RegExp) => (err: unknown) =>
        (err as BerthError).code === 'INVALID_ARGUMENT' && pattern.test((err as Error).message);
      await assert.rejects(e.readFile(key, '/dev/zero'), invalid(/\/dev\/zero is not a regular file \(it is a character device\)/));
      await run(e, key, 'mkfifo /tmp/pipe; truncate -s 20G /tmp/sparse');
      await assert.rejects(e.readFile(key, '/tmp/pipe'), invalid(/pipe is not a regular file \(it is a FIFO\)/));
      await assert.rejects(e.writeFile(key, '/tmp/pipe', 'x'), invalid(/pipe is not a regular file \(it is a FIFO\)/));
      await assert.rejects(e.readFile(key, '/tmp/sparse'), invalid(/File too large to read: \/tmp\/sparse is 21,474,836,480 bytes/));
    } finally {
      await e.closeAll();
    }
  });

  it('gVisor (runtime runsc): the agent connects and commands run under the gVisor kernel', async (t) => {
    if (!(await hasRuntime(docker, 'runsc'))) {
      t.skip('runsc is not registered with this Docker daemon (scripts/ensure-docker.sh registers it where Debian ships it)');
      return;
    }
    const gvisor = await newBackend({ runtime: 'runsc' });
    const e = newEnvs(gvisor);
    const key = newKey();
    try {
      const r = await run(e, key, 'dmesg 2>/dev/null | head -1; uname -r; id -u; cd /tmp; export G=1');
      assert.equal(r.exitCode, 0, r.output);
      assert.match(r.output, /gVisor/);
      assert.equal(backendEnvOf(gvisor, key).container.channel.kind, 'agent');
      assert.equal((await run(e, key, 'echo $G; pwd')).output, '1\n/tmp\n');
      const n = sleepSeconds();
      const killed = await run(e, key, `sleep ${n}`, { timeoutMs: 1000 });
      assert.equal(killed.exitCode, 124);
      assert.equal((await run(e, key, countProcessesWithArg(String(n)))).output.trim(), 'count=0');
    } finally {
      await e.closeAll();
    }
  });
});

/** The DockerEnvironment the backend made for `key`. */
function backendEnvOf(backend: DockerBackend, key: TaskKey): DockerEnvironment {
  const env = backend.environmentOf(key);
  assert.ok(env, `no environment for ${key.taskId}`);
  return env;
}
