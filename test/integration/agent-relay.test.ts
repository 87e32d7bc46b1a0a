/**
 * The exec agent's socket relay over its stdio stream (berth_agent.pyz
 * started as a local child process): a Unix socket inside the sandbox
 * whose connections reach the executor as Duplex streams. What execute_code
 * relies on: the socket is 0600 in a 0700 directory, bytes pass both ways
 * intact and in order, a reader that does not read holds the writer back,
 * half-close works, and unlisten removes the socket and the run dir.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import type { AgentChannel } from '../../services/executor/backends/shared/agent/agent-channel.js';
import { startStdioAgent } from '../../services/executor/backends/shared/agent/stdio-agent.js';
import { findAgentScript } from '../../services/executor/backends/shared/agent/agent-script.js';
import { realPython } from '../support/python-bin.js';

const AGENT = findAgentScript();
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function connect(socketPath: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(socketPath, () => resolve(socket));
    socket.once('error', reject);
  });
}

function readAll(socket: net.Socket): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.once('end', () => resolve(Buffer.concat(chunks)));
    socket.once('error', reject);
  });
}

describe('exec agent socket relay', { timeout: 60_000 }, () => {
  let channel: AgentChannel;
  let dir: string;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'berth-relay-'));
    channel = await startStdioAgent({
      spawn: (argv) => spawn(argv[0]!, argv.slice(1), { stdio: 'pipe' }),
      python: realPython(),
      agentPath: AGENT,
      description: 'a local stdio agent',
      logger: silentLogger(),
    });
  });
  after(async () => {
    channel?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('announces the relay capability', () => {
    assert.ok(channel.hello.capabilities.includes('relay'), channel.hello.capabilities.join(','));
  });

  it('makes a private socket whose connections carry bytes both ways, with half-close', async () => {
    const runDir = path.join(dir, 'run-1');
    const socketPath = path.join(runDir, 'rpc.sock');
    // An upper-casing echo: answers after the client shut its side.
    const relay = await channel.listen(socketPath, (socket: Duplex) => {
      const chunks: Buffer[] = [];
      socket.on('data', (c: Buffer) => chunks.push(c));
      socket.on('end', () => socket.end(Buffer.concat(chunks).toString('utf8').toUpperCase()));
    });
    assert.equal((await stat(runDir)).mode & 0o777, 0o700);
    assert.equal((await stat(socketPath)).mode & 0o777, 0o600);
    const clients = await Promise.all([1, 2, 3].map(() => connect(socketPath)));
    const answers = clients.map((c) => readAll(c));
    clients.forEach((c, i) => c.end(`hello ${i}\n`));
    assert.deepEqual((await Promise.all(answers)).map((b) => b.toString()), ['HELLO 0\n', 'HELLO 1\n', 'HELLO 2\n']);
    await relay.close(runDir);
    await assert.rejects(stat(runDir), { code: 'ENOENT' });
  });

  it('holds a writer back while the reader is paused, and loses nothing', async () => {
    const runDir = path.join(dir, 'run-2');
    const socketPath = path.join(runDir, 'rpc.sock');
    let server: Duplex | undefined;
    const received: Buffer[] = [];
    const relay = await channel.listen(socketPath, (socket) => {
      server = socket;
      socket.pause();
      socket.on('end', () => socket.end('done'));
    });
    const payload = randomBytes(8 * 1024 * 1024);
    const client = await connect(socketPath);
    const answer = readAll(client);
    let flushed = false;
    client.end(payload, () => (flushed = true));
    await sleep(1000);
    // The relay forwards a window's worth, the kernel buffers some; 8 MiB cannot have gone through.
    assert.equal(flushed, false, 'the writer was not held back');
    assert.ok(server);
    server.on('data', (c: Buffer) => received.push(c));
    server.resume();
    assert.equal((await answer).toString(), 'done');
    assert.ok(Buffer.concat(received).equals(payload), 'the bytes arrived intact and in order');
    await relay.close(runDir);
  });

  it("holds the executor's writes back while the client does not read its answers", async () => {
    const runDir = path.join(dir, 'run-4');
    const socketPath = path.join(runDir, 'rpc.sock');
    let server: Duplex | undefined;
    const relay = await channel.listen(socketPath, (socket) => (server = socket));
    const client = await connect(socketPath);
    client.pause();
    for (let i = 0; !server; i++) {
      if (i > 100) assert.fail('no connection arrived');
      await sleep(20);
    }
    const answer = randomBytes(4 * 1024 * 1024);
    let written = false;
    server.write(answer, () => (written = true));
    await sleep(1000);
    assert.equal(written, false, 'the write completed while nobody read it');
    const received: Buffer[] = [];
    client.on('data', (c: Buffer) => received.push(c));
    client.resume();
    for (let i = 0; Buffer.concat(received).length < answer.length; i++) {
      if (i > 500) assert.fail('the answer did not arrive');
      await sleep(20);
    }
    assert.ok(Buffer.concat(received).equals(answer));
    for (let i = 0; !written; i++) {
      if (i > 100) assert.fail('the write never completed');
      await sleep(20);
    }
    client.destroy();
    await relay.close(runDir);
  });

  it('drops the connections and the socket when the executor closes it', async () => {
    const runDir = path.join(dir, 'run-3');
    const socketPath = path.join(runDir, 'rpc.sock');
    const relay = await channel.listen(socketPath, () => undefined);
    const client = await connect(socketPath);
    // Dropped either way: an accepted connection ends (EOF), one still in the listen backlog when the
    // socket closes is reset by the kernel. Neither may carry data.
    const ended = readAll(client).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ECONNRESET') return Buffer.alloc(0);
      throw err;
    });
    await relay.close();
    assert.equal((await ended).length, 0);
    await assert.rejects(stat(socketPath), { code: 'ENOENT' });
    await assert.rejects(connect(socketPath));
    await rm(runDir, { recursive: true, force: true });
  });

  it('refuses a path it cannot bind, with the reason', async () => {
    const longPath = path.join(dir, 'x'.repeat(120), 'rpc.sock');
    await assert.rejects(channel.listen(longPath, () => undefined), /cannot listen on .*rpc\.sock/);
  });
});
