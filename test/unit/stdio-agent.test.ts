/**
 * The pure pieces of starting the exec agent on a stdio stream: reading its
 * hello, the version refusal, telling "no python3" from other failures, and
 * the pipe pair the channel writes through.
 */
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { describe, test } from 'node:test';
import {
  AGENT_PROTOCOL_VERSION,
  encodeFrame,
  parseHello,
  versionMismatchMessage,
  type Frame,
} from '../../services/executor/backends/shared/agent/agent-protocol.js';
import { AgentUnavailableError, PipePair, exitFailure } from '../../services/executor/backends/shared/agent/stdio-agent.js';

const frame = (header: Record<string, unknown>, body = Buffer.alloc(0)): Frame => ({
  header: { op: 'hello', id: 0, ...header },
  body,
});

describe('parseHello', () => {
  test('reads transport and capabilities, and defaults them for older agents', () => {
    const hello = parseHello(frame({ token: '', version: 2, pid: 9, python: '3.8.10', transport: 'stdio', capabilities: ['pty', 7] }));
    assert.deepEqual(hello, {
      token: '',
      version: 2,
      pid: 9,
      python: '3.8.10',
      transport: 'stdio',
      capabilities: ['pty'],
      resumeKey: '',
      resumed: false,
    });
    const old = parseHello(frame({ token: 'abc', version: 2, pid: 1, python: '3.6.9' }));
    assert.equal(old?.transport, 'socket');
    assert.deepEqual(old?.capabilities, []);
    assert.equal(old?.resumeKey, '', 'an agent older than resume has no key: a dropped stream loses it, as before');
  });

  test('refuses what is not a hello', () => {
    assert.equal(parseHello(frame({ op: 'out', token: '' })), undefined);
    assert.equal(parseHello(frame({ version: 2 })), undefined, 'no token field');
    assert.equal(parseHello(frame({ token: '' }, Buffer.from('x'))), undefined, 'a hello has no body');
  });

  test('the version refusal names both versions', () => {
    assert.match(
      versionMismatchMessage(7, 'host a'),
      new RegExp(`host a speaks protocol version 7, this executor speaks version ${AGENT_PROTOCOL_VERSION}`),
    );
  });
});

describe('exitFailure', () => {
  test('exit 127 or a runtime\'s "not found" means no python3: fall back', () => {
    for (const [code, stderr] of [
      [127, 'bash: python3: command not found'],
      [126, ''],
      [1, 'OCI runtime exec failed: exec: "python3": executable file not found in $PATH'],
    ] as const) {
      const err = exitFailure(code, null, stderr, 'python3', 'host a');
      assert.equal(err.reason, 'no-python', `${code} ${stderr}`);
      assert.equal(err.canFallBack, true);
      assert.match(err.message, /host a has no usable python3/);
    }
  });

  test('exit 4 with the agent\'s own line means a Python too old: fall back', () => {
    const err = exitFailure(4, null, 'berth-agent: python 3.8 or newer required, this is 3.6\n', 'python3', 'host a');
    assert.equal(err.reason, 'python-too-old');
    assert.equal(err.canFallBack, true);
    assert.match(err.message, /3\.8 or newer required, this is 3\.6/);
  });

  test('any other exit is a fault to report, with the agent\'s stderr', () => {
    const err = exitFailure(1, null, 'Traceback: boom', 'python3', 'host a');
    assert.ok(err instanceof AgentUnavailableError);
    assert.equal(err.reason, 'agent-exited');
    assert.equal(err.canFallBack, false);
    assert.match(err.message, /exited with status 1 before its hello; its stderr: Traceback: boom/);
    assert.match(exitFailure(null, 'SIGKILL', '', 'python3', 'host a').message, /was killed by SIGKILL/);
  });
});

describe('PipePair', () => {
  test('carries bytes both ways and ends when the readable side ends', async () => {
    const fromAgent = new PassThrough();
    const toAgent = new PassThrough();
    const pair = new PipePair(fromAgent, toAgent);
    const got: Buffer[] = [];
    pair.on('data', (c: Buffer) => got.push(c));
    const ended = new Promise((resolve) => pair.once('end', resolve));
    fromAgent.write(encodeFrame({ op: 'pong', id: 1 }));
    fromAgent.end();
    await ended;
    assert.ok(Buffer.concat(got).equals(encodeFrame({ op: 'pong', id: 1 })));
    pair.write(Buffer.from('to the agent'));
    assert.equal((toAgent.read() as Buffer).toString(), 'to the agent');
  });

  test('counts what the agent has not taken as unsent, and destroying it closes both pipes', () => {
    const fromAgent = new PassThrough();
    const toAgent = new PassThrough({ highWaterMark: 16 });
    const pair = new PipePair(fromAgent, toAgent);
    // Nothing reads toAgent: its buffer fills, its write callback waits, and the backlog shows on the pair.
    for (let i = 0; i < 100; i++) pair.write(Buffer.alloc(1024));
    assert.ok(pair.writableLength > 64 * 1024, `backlog ${pair.writableLength}`);
    pair.destroy();
    assert.equal(fromAgent.destroyed, true);
    assert.equal(toAgent.destroyed, true);
  });
});
