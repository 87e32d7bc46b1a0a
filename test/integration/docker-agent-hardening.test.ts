/**
 * The exec agent's channel seen from a hostile command in a real container:
 * the agent's token is nowhere a command can look (environments, command
 * lines, /run/berth, the agent's memory), a command cannot even connect to
 * the agent's socket, nor move it aside, and an output flood through the
 * agent costs the executor bounded memory. Under an executor that is not
 * root (compose's uid 10001, the docker socket through its group), a
 * command can still rename, overwrite, plant or read nothing in
 * /run/berth, before and after a suspension, and the agent serves it.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chown, mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { AgentChannel } from '../../services/executor/backends/shared/agent/agent-channel.js';
import { DockerBackend } from '../../services/executor/backends/docker/docker-backend.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { SANDBOX_IMAGE, cleanupDocker, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { HOST_DIR_REFUSALS } from '../support/host-dir-attempts.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const TENANT = `docker-hardening-${randomBytes(4).toString('hex')}`;
let taskNo = 0;
const newKey = (): TaskKey => ({ tenant: TENANT, taskId: `t${++taskNo}` });

describe('exec agent hardening (real engine)', { skip: unavailable, timeout: 300_000 }, () => {
  let stateRoot: string;
  let backend: DockerBackend;
  let envs: TaskEnvironments;

  before(async () => {
    stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-docker-hardening-'));
    backend = await DockerBackend.start({ image: SANDBOX_IMAGE, stateRoot, persistent: false, sweepIntervalMs: 0, logger: silentLogger() });
    envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
  });

  after(async () => {
    await envs?.closeAll();
    await backend?.close();
    await cleanupDocker(docker, TENANT, [stateRoot]);
    await rm(stateRoot, { recursive: true, force: true });
  });

  const run = (key: TaskKey, command: string, stdin?: string) =>
    envs.exec(key, { command, timeoutMs: 60_000, maxOutputChars: 100_000, ...(stdin !== undefined ? { stdin } : {}) });

  /** The task's agent channel (started by a first command). */
  async function channelOf(key: TaskKey): Promise<AgentChannel> {
    await run(key, 'true');
    const channel = backend.environmentOf(key)?.container.channel;
    assert.ok(channel instanceof AgentChannel, 'the task runs through the exec agent');
    return channel;
  }

  /** The token the task's agent presented: what a command must not be able to find. */
  async function tokenOf(key: TaskKey): Promise<string> {
    const channel = await channelOf(key);
    assert.match(channel.hello.token, /^[0-9a-f]{32}$/);
    return channel.hello.token;
  }

  it('a command finds the token and the resume key in no environment, command line, file of /run/berth or the agent\'s memory', async () => {
    const key = newKey();
    const token = await tokenOf(key);
    const { resumeKey } = (await channelOf(key)).hello;
    assert.match(resumeKey, /^[0-9a-f]{32}$/);
    // The token reaches the probe on stdin and sits in a file outside /run/berth, so the probe's own command
    // lines never hold it.
    const r = await run(
      key,
      [
        'cat > /tmp/needle',
        'for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do grep -qaF -f /tmp/needle "$f" 2>/dev/null && echo "found in $f"; done',
        'grep -rlaF -f /tmp/needle /run/berth 2>/dev/null | sed "s/^/found in /"',
        // PID 1 is the container root's: its environment is closed to commands altogether.
        'cat /proc/1/environ > /dev/null 2>&1 && echo pid1-environ-readable || echo pid1-environ-unreadable',
        'ls -A /run/berth | tr "\\n" " "; echo',
        // The agent itself, not the entrypoint shell that started it.
        'agent=$(pgrep -f "^python3 -I -S /run/berth/berth_agent.pyz" | head -1); echo "agent=${agent:+yes}"',
        'cat /proc/$agent/environ > /dev/null 2>&1 && echo environ-readable || echo environ-unreadable',
        'head -c 1 /proc/$agent/mem > /dev/null 2>&1 && echo mem-readable || echo mem-unreadable',
        // PTRACE_ATTACH (16): refused (EPERM), the agent is another user (root) and not dumpable.
        'python3 -c "import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); r=l.ptrace(16,int(sys.argv[1]),0,0); print(\'ptrace\', r, ctypes.get_errno())" $agent',
        'rm -f /tmp/needle',
      ].join('\n'),
      // One needle a line: either found is a leak.
      `${token}\n${resumeKey}\n`,
    );
    assert.equal(r.exitCode, 0, r.output);
    const lines = r.output.trim().split('\n');
    assert.deepEqual(lines.filter((l) => l.startsWith('found in')), [], r.output);
    assert.equal(lines[0], 'pid1-environ-unreadable', 'PID 1 (the container root\'s) keeps its environment');
    assert.doesNotMatch(lines[1] ?? '', /agent-token/, 'the token file is gone');
    assert.deepEqual(lines.slice(2), ['agent=yes', 'environ-unreadable', 'mem-unreadable', 'ptrace -1 1']);
  });

  it('a command cannot connect to the agent\'s socket at all (the container root\'s, 0600), even with the token; the task keeps working', async () => {
    const key = newKey();
    const token = await tokenOf(key);
    // A hello that got through would be refused too (agent-channel-hostile.test.ts replays one at the executor).
    const r = await run(
      key,
      [
        'python3 - "$(cat)" <<\'EOF\'',
        'import json, socket, struct, sys',
        'head = json.dumps({"op": "hello", "id": 0, "token": sys.argv[1], "version": 2, "pid": 1, "python": "x"}).encode()',
        's = socket.socket(socket.AF_UNIX)',
        'try:',
        '    s.connect("/run/berth/agent.sock")',
        '    s.sendall(struct.pack(">II", 4 + len(head), len(head)) + head)',
        '    print("connected")',
        'except PermissionError:',
        '    print("denied")',
        'EOF',
        'stat -c "%U %a" /run/berth/agent.sock',
      ].join('\n'),
      token,
    );
    assert.equal(r.output, 'denied\nroot 600\n', r.output);
    assert.equal((await run(key, 'echo still mine')).output, 'still mine\n');
  });

  it('a protocol fault on the agent stream still replaces the container: background processes stop, with a notice', async () => {
    const key = newKey();
    const channel = await channelOf(key);
    const before = backend.environmentOf(key)?.container.id;
    const started = await envs.startBackground(key, { command: 'echo bg-up; sleep 300' });
    const poll = async () => JSON.parse(await envs.process(key, { action: 'poll', sessionId: started.sessionId })) as { status: string; exit_code?: number };
    // Bytes that are no frame: "GET " read as a length prefix is over the cap.
    channel.receiveForTest(Buffer.from('GET / HTTP/1.1\r\n\r\n'));
    assert.equal(channel.isLost, true);
    assert.equal(await channel.recover(), false, 'a faulted channel is never resumed');
    const r = await run(key, 'echo after');
    assert.equal(r.output, 'after\n');
    assert.ok(r.notices.some((n) => /a new container was started: background processes were stopped/.test(n)), JSON.stringify(r.notices));
    assert.notEqual(backend.environmentOf(key)?.container.id, before);
    for (let i = 0; i < 100 && (await poll()).status !== 'exited'; i++) await new Promise((res) => setTimeout(res, 50));
    assert.deepEqual(await poll().then((p) => [p.status, p.exit_code]), ['exited', -9]);
  });

  it('a command can neither move the executor\'s socket aside nor listen in /run/berth; a dropped stream is resumed', async () => {
    const key = newKey();
    const channel = await channelOf(key);
    const env = backend.environmentOf(key);
    assert.ok(env);
    const before = env.container.id;
    const attempts = await run(
      key,
      [
        'mv /run/berth/agent.sock /run/berth/moved.sock 2>/dev/null && echo moved || echo not-moved',
        'python3 -c \'import socket; socket.socket(socket.AF_UNIX).bind("/run/berth/x.sock")\' 2>/dev/null && echo bound || echo not-bound',
        'touch /run/berth/berth_agent.pyz /run/berth/json.py 2>/dev/null && echo planted || echo not-planted',
        'stat -c "%U %a" /run/berth',
      ].join('\n'),
    );
    assert.equal(attempts.output, 'not-moved\nnot-bound\nnot-planted\nroot 755\n');
    const started = await envs.startBackground(key, { command: 'echo bg-up; sleep 300' });
    channel.dropStream();
    // The agent dials the executor's own socket again: same container, the background process found again.
    const r = await run(key, 'echo after');
    assert.equal(r.output, 'after\n');
    assert.equal(backend.environmentOf(key)?.container.id, before);
    const poll = JSON.parse(await envs.process(key, { action: 'poll', sessionId: started.sessionId })) as { status: string };
    assert.equal(poll.status, 'running');
  });

  it('an output flood through the agent is capped and costs the executor bounded memory', async (t) => {
    const key = newKey();
    await run(key, 'true');
    const baseline = process.memoryUsage().rss;
    let peak = baseline;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
    // 96 MiB: six times the agent's output burst, so the pacing (4 MiB/s past 16 MiB) runs for about 20 s,
    // and far past every frame and queue cap of the channel.
    const r = await envs.exec(key, {
      command: 'head -c 100663296 /dev/zero | tr "\\0" x; echo; echo end-of-flood',
      timeoutMs: 120_000,
      maxOutputChars: 10_000,
    });
    clearInterval(sampler);
    assert.equal(r.exitCode, 0);
    assert.ok(r.output.length < 12_000, `output of ${r.output.length} characters`);
    assert.match(r.output, /OUTPUT TRUNCATED/);
    assert.match(r.output, /end-of-flood\n$/);
    const grew = peak - baseline;
    t.diagnostic(`512 MiB of output: peak rss +${(grew / 1024 / 1024).toFixed(1)} MiB`);
    // A quarter of the flood: an executor that kept the output, or read it faster than it freed it, passes this.
    assert.ok(grew < 128 * 1024 * 1024, `rss grew by ${(grew / 1024 / 1024).toFixed(1)} MiB`);
  });
});

/** The uid compose runs executors as (deploy/compose.yaml). */
const EXECUTOR_UID = 10001;
const DOCKER_SOCKET = '/var/run/docker.sock';

describe('an executor that is not root (real engine)', {
  skip: unavailable ?? (process.getuid?.() === 0 ? undefined : 'starting an executor as uid 10001 takes root'),
  timeout: 300_000,
}, () => {
  const tenant = `docker-non-root-${randomBytes(4).toString('hex')}`;
  let stateRoot: string;

  before(async () => {
    // Not under the test run's TMPDIR, which is root's alone: the executor's uid must reach its state root.
    stateRoot = await mkdtemp('/tmp/berth-non-root-');
    await chown(stateRoot, EXECUTOR_UID, EXECUTOR_UID);
  });
  after(async () => {
    await cleanupDocker(docker, tenant, [stateRoot]);
    await rm(stateRoot, { recursive: true, force: true });
  });

  it('a command renames, overwrites, plants and reads nothing in /run/berth, before and after a suspension, and the agent serves it', async () => {
    const socketGid = (await stat(DOCKER_SOCKET)).gid;
    const script = path.resolve('dist/test/support/non-root-executor.js');
    const stdout = await new Promise<string>((resolve, reject) =>
      execFile(process.execPath, [script, stateRoot, tenant], { uid: EXECUTOR_UID, gid: socketGid, timeout: 240_000, env: { ...process.env, TMPDIR: stateRoot, HOME: stateRoot } }, (err, out, errOut) =>
        err ? reject(new Error(`${err.message}\n${errOut}`)) : resolve(out),
      ),
    );
    const seen = JSON.parse(stdout) as {
      uid: number;
      suspended: boolean;
      first: { attempts: string[]; modes: string[]; listing: string[]; agent: boolean };
      resumed: { attempts: string[]; modes: string[]; listing: string[]; agent: boolean };
    };
    assert.equal(seen.uid, EXECUTOR_UID);
    assert.equal(seen.suspended, true);
    for (const look of [seen.first, seen.resumed]) {
      assert.deepEqual(look.attempts, HOST_DIR_REFUSALS);
      // The executor's, never writable by the task's uid; the archive readable by the container's root alone (through
      // CAP_DAC_READ_SEARCH, until the agent has read it); the marker the one file the entrypoint may write.
      assert.deepEqual(look.modes, [
        `/run/berth 755 ${EXECUTOR_UID}`,
        `/run/berth/berth_agent.pyz 600 ${EXECUTOR_UID}`,
        `/run/berth/passwd 644 ${EXECUTOR_UID}`,
        `/run/berth/agent-unavailable 622 ${EXECUTOR_UID}`,
      ]);
      assert.ok(!look.listing.includes('agent-token'), `the token is gone before any command runs: ${look.listing.join(' ')}`);
      assert.equal(look.agent, true, 'commands run through the exec agent');
    }
  });
});
