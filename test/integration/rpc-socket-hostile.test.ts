/**
 * execute_code's RPC socket against a hostile script: garbage at a high
 * rate, large partial requests on many connections at once, more
 * connections than allowed. Each is cut off with an answer saying why, what
 * the server holds stays bounded, and a well-behaved request still works.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  MAX_BAD_REQUESTS_IN_A_ROW,
  MAX_CONNECTIONS,
  RpcSocketServer,
} from '../../services/executor/code-execution/rpc-socket-server.js';

const TOKEN = 'secret-token';
const MAX_LINE_BYTES = 1024 * 1024;

/** A client connection that collects what the server answers until it closes. */
class Client {
  readonly socket: net.Socket;
  received = '';
  readonly closed: Promise<void>;

  constructor(socketPath: string) {
    this.socket = net.connect(socketPath);
    this.socket.on('data', (chunk: Buffer) => (this.received += chunk.toString('utf8')));
    this.socket.on('error', () => undefined);
    this.closed = new Promise((resolve) => this.socket.once('close', () => resolve()));
  }

  async connected(): Promise<void> {
    if (!this.socket.connecting) return;
    await new Promise<void>((resolve, reject) => {
      this.socket.once('connect', () => resolve());
      this.socket.once('close', () => reject(new Error('closed before connecting')));
    });
  }

  /** Sends one valid request and returns its answer line. */
  async call(args: Record<string, unknown>): Promise<string> {
    const before = this.received.length;
    this.socket.write(`${JSON.stringify({ tool: 'echo', args, token: TOKEN })}\n`);
    while (!this.received.slice(before).includes('\n')) {
      if (this.socket.destroyed) throw new Error('closed without an answer');
      await new Promise((r) => setTimeout(r, 10));
    }
    return this.received.slice(before).split('\n')[0] ?? '';
  }
}

describe('execute_code RPC socket against a hostile script', () => {
  let dir: string;
  let server: RpcSocketServer;
  let socketPath: string;
  const clients: Client[] = [];
  const connect = () => {
    const client = new Client(socketPath);
    clients.push(client);
    return client;
  };

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'berth-rpc-hostile-'));
    socketPath = path.join(dir, 'rpc.sock');
    server = await RpcSocketServer.listen({
      path: socketPath,
      token: TOKEN,
      maxLineBytes: MAX_LINE_BYTES,
      onRequest: (request) => Promise.resolve(JSON.stringify({ echo: request.args.n ?? null })),
    });
  });

  after(async () => {
    for (const client of clients) client.socket.destroy();
    await server.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('closes a connection after 100 invalid requests in a row; a valid one still works', async () => {
    const bad = connect();
    await bad.connected();
    bad.socket.write('not json\n'.repeat(MAX_BAD_REQUESTS_IN_A_ROW + 50));
    await bad.closed;
    const answers = bad.received.trim().split('\n');
    assert.equal(answers.length, MAX_BAD_REQUESTS_IN_A_ROW);
    assert.match(answers.at(-1) ?? '', /^\{"error":"Invalid RPC request: 100 invalid requests in a row; closing this connection"\}$/);
    assert.match(answers[0] ?? '', /^\{"error":"Invalid RPC request: not valid JSON/);
    const good = connect();
    assert.equal(await good.call({ n: 1 }), '{"echo":1}');
    good.socket.end();
  });

  it('bounds unfinished requests across connections to twice the line cap', async () => {
    // Three connections each send 900 KiB of one unfinished request: the third goes over 2 MiB in all.
    const parts = [connect(), connect(), connect()];
    await Promise.all(parts.map((c) => c.connected()));
    const piece = Buffer.alloc(900 * 1024, 0x61);
    for (const c of parts.slice(0, 2)) c.socket.write(Buffer.concat([Buffer.from('{"tool":"echo","token":"secret-token","args":{"n":2,"pad":"'), piece]));
    // Let the first two arrive before the third.
    await new Promise((r) => setTimeout(r, 200));
    const third = parts[2]!;
    third.socket.write(piece);
    await third.closed;
    assert.equal(
      third.received,
      '{"error":"Invalid RPC request: requests waiting on the socket exceed 2097152 bytes in all; send large content in fewer calls at a time"}\n',
    );
    // The first two complete their requests and are answered.
    for (const c of parts.slice(0, 2)) c.socket.write('"}}\n');
    for (const c of parts.slice(0, 2)) {
      while (!c.received.includes('\n')) await new Promise((r) => setTimeout(r, 10));
      assert.equal(c.received, '{"echo":2}\n');
      c.socket.end();
    }
  });

  it(`refuses connections beyond ${MAX_CONNECTIONS} at once and serves again once they close`, async () => {
    const many = Array.from({ length: MAX_CONNECTIONS + 6 }, () => connect());
    const outcomes = await Promise.all(
      many.map((c) =>
        c.connected().then(
          () => c.call({ n: 3 }).then((answer) => answer, () => 'failed'),
          () => 'refused',
        ),
      ).map((p) => Promise.race([p, new Promise<string>((r) => setTimeout(() => r('refused'), 3000))])),
    );
    assert.equal(outcomes.filter((o) => o === '{"echo":3}').length, MAX_CONNECTIONS);
    for (const c of many) c.socket.destroy();
    await Promise.all(many.map((c) => c.closed));
    // The server's count drops as they close.
    await new Promise((r) => setTimeout(r, 100));
    const again = connect();
    assert.equal(await again.call({ n: 4 }), '{"echo":4}');
    again.socket.end();
  });

  it('stops answering for the run after 1,000 invalid requests in all', async () => {
    for (let i = 0; i < 20 && !server.isClosed; i++) {
      const bad = connect();
      try {
        await bad.connected();
      } catch {
        break;
      }
      bad.socket.write('{"tool":"echo","args":{},"token":"wrong"}\n'.repeat(MAX_BAD_REQUESTS_IN_A_ROW));
      await bad.closed;
    }
    assert.equal(server.badRequests, 1000);
    assert.equal(server.isClosed, true);
    const late = connect();
    await assert.rejects(late.connected(), /closed before connecting/);
  });
});
