/**
 * The executor's end of the exec agent's socket against a hostile peer: a
 * process the test controls (test/fixtures/hostile_agent.py) connects to the
 * real Unix socket in place of the agent and sends garbage, an oversized
 * length prefix, a truncated frame, a flood, nothing at all, or stops
 * reading. Beside it, another task's channel is served by the real exec agent
 * (dist/agent/berth_agent.pyz, run on this host) and must keep
 * working throughout.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { FailedPreconditionError } from '../../services/common/errors.js';
import { createLogger } from '../../services/common/logging.js';
import type { AgentChannel } from '../../services/executor/backends/shared/agent/agent-channel.js';
import type { AgentChannelOptions } from '../../services/executor/backends/shared/agent/agent-channel-options.js';
import { AgentListener } from '../../services/executor/backends/docker/agent-listener.js';
import {
  AGENT_PROTOCOL_VERSION,
  MAX_INBOUND_FRAME_BYTES,
  encodeFrame,
} from '../../services/executor/backends/shared/agent/agent-protocol.js';
import { SandboxLostError } from '../../services/executor/backends/shared/sandbox-channel.js';
import { findAgentScript } from '../../services/executor/backends/shared/agent/agent-script.js';
import { realPython } from '../support/python-bin.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, '..', '..', ...(here.includes(`${path.sep}dist${path.sep}`) ? ['..'] : []));
const HOSTILE = path.join(repoRoot, 'test', 'fixtures', 'hostile_agent.py');
const AGENT = findAgentScript();
const python = realPython();

/** Everything the listeners and channels log, for assertions about refusals. */
const logLines: string[] = [];
const logStream = new PassThrough();
logStream.on('data', (chunk: Buffer) => logLines.push(...chunk.toString('utf8').split('\n').filter(Boolean)));
const logger = createLogger('warn', logStream);

interface Task {
  readonly name: string;
  readonly dir: string;
  readonly token: string;
  readonly listener: AgentListener;
  readonly channel: AgentChannel;
  readonly peer: ChildProcess;
  /** What the peer printed on stdout. */
  readonly peerOut: () => string;
}

const tasks: Task[] = [];

after(async () => {
  for (const t of tasks) {
    t.channel.close();
    t.peer.kill('SIGKILL');
    await t.listener.close();
    await rm(t.dir, { recursive: true, force: true });
  }
});

async function startTask(name: string, argv: (socket: string, token: string) => string[], options: AgentChannelOptions = {}): Promise<Task> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-hostile-'));
  const socket = path.join(dir, 'agent.sock');
  const listener = await AgentListener.listen(socket, name, { uid: process.getuid!(), gid: process.getgid!() }, logger, options);
  const token = randomBytes(16).toString('hex');
  await writeFile(path.join(dir, 'agent-token'), token, { mode: 0o600 });
  const expected = listener.expect(token, 20_000);
  const peer = spawn(python, argv(socket, token), { stdio: ['ignore', 'pipe', 'inherit'], cwd: dir });
  let out = '';
  peer.stdout?.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
  const channel = await expected;
  const task: Task = { name, dir, token, listener, channel, peer, peerOut: () => out };
  tasks.push(task);
  return task;
}

/** A task served by the real exec agent. */
const agentTask = (name: string) => startTask(name, (socket) => [AGENT, socket]);

/** A task whose "agent" is the hostile peer in `mode`. */
const hostileTask = (name: string, mode: string, options: AgentChannelOptions = {}) =>
  startTask(name, (socket, token) => [HOSTILE, socket, token, String(AGENT_PROTOCOL_VERSION), mode], options);

/** Runs `script` through `channel` and returns its output. */
async function run(channel: AgentChannel, script: string, cwd = '/'): Promise<string> {
  let out = '';
  const proc = await channel.spawn({ script, cwd, onOutput: (chunk) => (out += chunk.toString('utf8')) });
  const exit = await proc.exited;
  assert.equal(exit.code, 0, out);
  return out;
}

/** The other task still runs commands and moves files. */
async function assertServing(task: Task): Promise<void> {
  assert.equal(await run(task.channel, 'echo still serving'), 'still serving\n');
  const file = path.join(task.dir, 'check.txt');
  await task.channel.writeFile(file, Buffer.from('ok'));
  assert.equal((await task.channel.readFile(file)).toString(), 'ok');
}

function exitedOf(child: ChildProcess): Promise<void> {
  return child.exitCode !== null ? Promise.resolve() : new Promise((resolve) => child.once('exit', () => resolve()));
}

describe('exec agent channel against a hostile peer', { timeout: 120_000 }, () => {
  let healthy: Task;

  it('the real agent serves the neighbouring task, with file content in chunks', async () => {
    healthy = await agentTask('task-B');
    await assertServing(healthy);
    // 3 MiB + 1: twelve 256 KiB chunks and a last byte, both ways.
    const big = randomBytes(3 * 1024 * 1024 + 1);
    const file = path.join(healthy.dir, 'big.bin');
    await healthy.channel.writeFile(file, big);
    assert.ok((await healthy.channel.readFile(file)).equals(big));
  });

  it('garbage bytes close only that channel, naming its environment', async () => {
    const a = await hostileTask('task-A-garbage', 'garbage');
    // "GET " read as a length prefix is over a gigabyte: refused from its first 8 bytes.
    await assert.rejects(a.channel.ping(), /the exec agent of task-A-garbage sent a malformed frame: frame of 1195725856 bytes is over the 1048576-byte cap/);
    assert.equal(a.channel.isLost, true);
    await assert.rejects(a.channel.readFile('/etc/hostname'), /task-A-garbage/);
    await exitedOf(a.peer);
    assert.equal(a.peerOut(), 'done\n', 'the executor closed the connection');
    await assertServing(healthy);
  });

  it('an oversized length prefix is refused before its body arrives', async () => {
    const a = await hostileTask('task-A-oversized', 'oversized');
    await assert.rejects(a.channel.ping(), /the exec agent of task-A-oversized sent a malformed frame: frame of 209715200 bytes is over the 1048576-byte cap/);
    await exitedOf(a.peer);
    assert.equal(a.peerOut(), 'done\n');
    await assertServing(healthy);
  });

  it('a truncated frame, then close, fails that task\'s calls', async () => {
    const a = await hostileTask('task-A-truncated', 'truncated');
    await assert.rejects(a.channel.ping(), /the exec agent of task-A-truncated disconnected/);
    await assertServing(healthy);
  });

  it('a peer that never answers is cut off at the request deadline', async () => {
    const a = await hostileTask('task-A-silent', 'silent', { requestTimeoutMs: 500 });
    await assert.rejects(
      a.channel.readFile('/etc/hostname'),
      /the exec agent of task-A-silent did not answer a read request within 500 ms; its connection was closed/,
    );
    await exitedOf(a.peer);
    await assertServing(healthy);
  });

  it('a peer that stops answering is found out by the liveness check long before a generous answer deadline', async () => {
    const a = await hostileTask('task-A-mute', 'silent', {
      requestTimeoutMs: 600_000,
      livenessProbeAfterMs: 200,
      livenessTimeoutMs: 500,
      reattachTimeoutMs: 500,
    });
    await assert.rejects(
      a.channel.spawn({ script: 'true', cwd: '/', onOutput: () => undefined }),
      /the exec agent of task-A-mute stopped answering \(nothing heard for \d+ ms, not even a reply to a liveness check within 500 ms\); its stream was dropped/,
    );
    // Looked for again as after a dropped stream; a peer that never says a resumed hello is not found, and the channel is lost.
    assert.equal(await a.channel.recover(), false);
    assert.equal(a.channel.isLost, true);
    await assertServing(healthy);
  });

  it('a stopped real agent: the next spawn fails with the liveness error instead of waiting for its start', async () => {
    const a = await startTask('task-A-stopped', (socket) => [AGENT, socket], {
      livenessProbeAfterMs: 200,
      livenessTimeoutMs: 500,
      reattachTimeoutMs: 500,
    });
    assert.equal(await run(a.channel, 'echo before'), 'before\n');
    a.peer.kill('SIGSTOP');
    await assert.rejects(a.channel.spawn({ script: 'echo after', cwd: '/', onOutput: () => undefined }), /task-A-stopped stopped answering/);
    assert.equal(await a.channel.recover(), false, 'a stopped agent does not dial in again');
    // A live agent that is only quiet (a long command) is never taken for a stopped one.
    const b = await startTask('task-B-quiet', (socket) => [AGENT, socket], { livenessProbeAfterMs: 50, livenessTimeoutMs: 100 });
    assert.equal(await run(b.channel, 'sleep 1; echo quiet'), 'quiet\n');
    assert.equal(b.channel.isLost, false);
    await assertServing(healthy);
  });

  it('a slow drip of one frame is cut off at the same deadline', async () => {
    const a = await hostileTask('task-A-drip', 'drip', { requestTimeoutMs: 1000 });
    await assert.rejects(a.channel.ping(), /the exec agent of task-A-drip did not answer a ping request within 1000 ms/);
    await assertServing(healthy);
  });

  it('a peer that stops reading is cut off once 16 MiB wait for it', async () => {
    const a = await hostileTask('task-A-stall', 'stall');
    // 128 spawns each carrying 1 MiB of stdin that the peer never reads: 128 MiB asked to be sent.
    const stdin = Buffer.alloc(1024 * 1024, 1);
    const before = process.memoryUsage().external;
    const spawns = Array.from({ length: 128 }, () => a.channel.spawn({ script: 'cat', cwd: '/', stdin, onOutput: () => undefined }));
    const grewBytes = process.memoryUsage().external - before;
    for (const attempt of spawns) {
      await assert.rejects(attempt, /the exec agent of task-A-stall stopped reading what the executor sends \(\d+ bytes unread\); its connection was closed/);
    }
    // Queued: the 16 MiB cap plus one frame, each with a copy not yet collected: under 64 MiB, not 256 MiB.
    assert.ok(grewBytes < 64 * 1024 * 1024, `external memory grew by ${grewBytes} bytes`);
    await assertServing(healthy);
  });

  it('a flood of valid output costs the executor bounded memory while the other task keeps working', async (t) => {
    const a = await hostileTask('task-A-flood', 'flood');
    const floodBytes = 768 * 1024 * 1024;
    let received = 0;
    let reached!: () => void;
    const enough = new Promise<void>((resolve) => (reached = resolve));
    const baseline = process.memoryUsage().rss;
    let peakRss = baseline;
    const sampler = setInterval(() => (peakRss = Math.max(peakRss, process.memoryUsage().rss)), 20);
    // The consumer keeps a count only, as the executor's output buffers keep a bounded head and tail.
    await a.channel.spawn({
      script: 'flood',
      cwd: '/',
      onOutput: (chunk) => {
        received += chunk.length;
        if (received >= floodBytes) reached();
      },
    });
    let neighbourCalls = 0;
    let flooding = true;
    const neighbour = (async () => {
      while (flooding) {
        await assertServing(healthy);
        neighbourCalls++;
      }
    })();
    await enough;
    flooding = false;
    await neighbour;
    clearInterval(sampler);
    a.channel.close();
    await exitedOf(a.peer);
    assert.ok(neighbourCalls >= 1, 'the neighbouring task was served during the flood');
    // 768 MiB went through; what stays is one frame in the decoder (at most 1 MiB plus a 64 KiB read) and
    // garbage the collector has not reclaimed yet. 128 MiB is a sixth of the flood: a channel that kept
    // what it received, or read faster than it freed, would pass it within the first quarter of the flood.
    const grew = peakRss - baseline;
    t.diagnostic(`flood of ${received} bytes: peak rss +${(grew / 1024 / 1024).toFixed(1)} MiB; neighbour served ${neighbourCalls} times`);
    assert.ok(grew < 128 * 1024 * 1024, `rss grew by ${(grew / 1024 / 1024).toFixed(1)} MiB during a ${floodBytes / 1024 / 1024} MiB flood`);
    assert.ok(MAX_INBOUND_FRAME_BYTES <= 1024 * 1024);
  });

  it('before the agent: at most 4 connections wait for a hello, and a first frame over 4 KiB is refused', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-hostile-'));
    const listener = await AgentListener.listen(path.join(dir, 'agent.sock'), 'task-C', { uid: process.getuid!(), gid: process.getgid!() }, logger);
    const waiting = listener.expect('c'.repeat(32), 20_000);
    waiting.catch(() => undefined);
    const open = (payload?: Buffer) =>
      new Promise<net.Socket>((resolve) => {
        const socket = net.connect(listener.socketPath, () => {
          if (payload) socket.write(payload);
          resolve(socket);
        });
        socket.on('error', () => undefined);
      });
    const closed = (socket: net.Socket) =>
      socket.destroyed ? Promise.resolve() : new Promise<void>((resolve) => socket.once('close', () => resolve()));
    try {
      const quiet = await Promise.all(Array.from({ length: 4 }, () => open()));
      const fifth = await open();
      await closed(fifth);
      assert.equal(listener.refusedConnections, 1, 'the fifth connection waiting to say hello was refused');
      for (const socket of quiet) socket.destroy();
      await Promise.all(quiet.map(closed));
      // Once the executor has seen them go, they no longer count as waiting.
      while (listener.waitingConnections > 0) await new Promise((r) => setTimeout(r, 10));
      // A length prefix that promises a 1 MiB hello: refused once 4 KiB of it arrived.
      const prefix = Buffer.alloc(8);
      prefix.writeUInt32BE(1024 * 1024, 0);
      prefix.writeUInt32BE(100, 4);
      const long = await open(Buffer.concat([prefix, Buffer.alloc(8 * 1024, 0x20)]));
      await closed(long);
      assert.equal(listener.refusedConnections, 2);
      const logged = () => logLines.some((line) => line.includes('first frame too long for a hello') && line.includes('task-C'));
      // The logger hands lines to its stream asynchronously.
      for (let i = 0; i < 100 && !logged(); i++) await new Promise((r) => setTimeout(r, 20));
      assert.ok(logged(), logLines.join('\n'));
    } finally {
      await listener.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('an agent of another protocol version is refused at once, naming both versions', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-hostile-'));
    const listener = await AgentListener.listen(path.join(dir, 'agent.sock'), 'task-V', { uid: process.getuid!(), gid: process.getgid!() }, logger);
    try {
      const token = randomBytes(16).toString('hex');
      const expected = listener.expect(token, 60_000);
      const socket = net.connect(listener.socketPath);
      socket.on('error', () => undefined);
      socket.on('connect', () => socket.write(encodeFrame({ op: 'hello', id: 0, token, version: 1, pid: 1, python: 'x' })));
      await assert.rejects(expected, (err: Error) => {
        assert.ok(err instanceof FailedPreconditionError, String(err));
        assert.match(err.message, new RegExp(`task-V speaks protocol version 1, this executor speaks version ${AGENT_PROTOCOL_VERSION}`));
        return true;
      });
      socket.destroy();
    } finally {
      await listener.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a replayed hello and other connections after the agent are refused unread, and logged', async () => {
    const refusedBefore = healthy.listener.refusedConnections;
    const replay = (payload: Buffer) =>
      new Promise<{ received: number }>((resolve, reject) => {
        const socket = net.connect(healthy.listener.socketPath);
        let received = 0;
        socket.on('connect', () => socket.write(payload));
        socket.on('data', (chunk: Buffer) => (received += chunk.length));
        socket.on('error', () => undefined);
        socket.on('close', () => resolve({ received }));
        setTimeout(() => reject(new Error('the executor kept a refused connection open')), 10_000).unref();
      });
    const hello = encodeFrame({ op: 'hello', id: 0, token: healthy.token, version: AGENT_PROTOCOL_VERSION, pid: 1, python: 'x' });
    assert.deepEqual(await replay(hello), { received: 0 });
    assert.deepEqual(await replay(Buffer.from('GET / HTTP/1.1\r\n\r\n')), { received: 0 });
    assert.equal(healthy.listener.refusedConnections, refusedBefore + 2);
    assert.ok(
      logLines.some((line) => line.includes('this container start has its agent already') && line.includes('task-B')),
      logLines.join('\n'),
    );
    await assertServing(healthy);
  });

  it('a dropped stream: the real agent dials in again and its background process carries on; a foreground one ends', async () => {
    const t = await agentTask('task-R');
    const id = randomBytes(4).toString('hex');
    const marker = `berth-resume-${id}`;
    // Bracketed so that the pattern does not match the command line of the shell that runs pgrep.
    const count = async (pattern: string) => run(t.channel, `pgrep -f '${pattern}' | wc -l`);
    let out = '';
    const bg = await t.channel.spawn({
      script: `echo up; read line; echo "got $line"; exec -a ${marker} sleep 300`,
      cwd: '/',
      keepStdin: true,
      background: true,
      onOutput: (chunk) => (out += chunk.toString('utf8')),
    });
    const fg = await t.channel.spawn({ script: `exec -a ${marker}-fg sleep 300`, cwd: '/', onOutput: () => undefined });
    while (!out.includes('up')) await new Promise((r) => setTimeout(r, 20));
    t.channel.dropStream();
    await assert.rejects(fg.exited, SandboxLostError);
    assert.equal(await t.channel.recover(), true);
    assert.equal(t.channel.isLost, false);
    await bg.write('after the drop\n');
    while (!out.includes('got after the drop')) await new Promise((r) => setTimeout(r, 20));
    assert.equal(await count(`^[b]erth-resume-${id} 300`), '1\n');
    // The foreground command's caller got an error: the agent ended it (SIGTERM, SIGKILL a second later).
    for (let i = 0; i < 200 && (await count(`^[b]erth-resume-${id}-fg`)) !== '0\n'; i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(await count(`^[b]erth-resume-${id}-fg`), '0\n');
    await bg.kill(1000);
    assert.equal((await bg.exited).signal, 15);
    await assertServing(healthy);
  });

  it('after a protocol fault no resumed hello is taken, whatever key it presents', async () => {
    const a = await hostileTask('task-F', 'fault-then-resume');
    await assert.rejects(a.channel.ping(), /task-F sent a malformed frame/);
    await exitedOf(a.peer);
    assert.equal(a.peerOut(), 'refused\n');
    assert.equal(await a.channel.recover(), false);
    await assertServing(healthy);
  });

  it('after a dropped stream only the resume key the agent gave is taken, once', async () => {
    const a = await hostileTask('task-D', 'drop-then-resume');
    const refusedBefore = a.listener.refusedConnections;
    await assert.rejects(a.channel.ping(), /task-D disconnected/);
    assert.equal(await a.channel.recover(), true);
    await a.channel.ping();
    assert.match(a.peerOut(), /^wrong key refused\nresume asked \[\]\n/);
    assert.ok(a.listener.refusedConnections > refusedBefore, 'the wrong key was refused and counted');
    // A live channel again: a further resumed hello is refused like any second hello.
    const replay = net.connect(a.listener.socketPath);
    replay.on('error', () => undefined);
    const hello = encodeFrame({ op: 'hello', id: 0, token: '5'.repeat(32), version: AGENT_PROTOCOL_VERSION, pid: 1, python: 'x', resumed: true });
    replay.on('connect', () => replay.write(hello));
    await new Promise<void>((resolve) => replay.once('close', () => resolve()));
    await a.channel.ping();
    a.channel.close();
    await exitedOf(a.peer);
    assert.match(a.peerOut(), /done\n$/);
  });
});
