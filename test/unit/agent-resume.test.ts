/**
 * A dropped exec agent stream, at the channel: what survives it (background
 * processes, bound to the agent's next stream), what does not (foreground
 * work, anything after a protocol fault), and how the agent's answers about
 * it are checked. The agent here is a fake speaking frames over in-memory
 * streams; the real one is exercised by the docker and singularity
 * conformance suites and test/integration/agent-channel-hostile.test.ts.
 */
import assert from 'node:assert/strict';
import { Duplex, PassThrough } from 'node:stream';
import { describe, test } from 'node:test';
import { AgentChannel } from '../../services/executor/backends/shared/agent/agent-channel.js';
import { parseResumed } from '../../services/executor/backends/shared/agent/agent-resume.js';
import type { AgentStream } from '../../services/executor/backends/shared/agent/agent-stream.js';
import {
  AGENT_PROTOCOL_VERSION,
  FrameDecoder,
  encodeFrame,
  parseHello,
  type AgentHello,
  type Frame,
  type FrameHeader,
} from '../../services/executor/backends/shared/agent/agent-protocol.js';
import { SandboxLostError } from '../../services/executor/backends/shared/sandbox-channel.js';

const KEY = '0123456789abcdef0123456789abcdef';

function hello(fields: Partial<AgentHello> = {}): AgentHello {
  return {
    token: '',
    version: AGENT_PROTOCOL_VERSION,
    pid: 42,
    python: '3.11.0',
    transport: 'socket',
    capabilities: ['spawn', 'background', 'resume'],
    resumeKey: KEY,
    resumed: false,
    ...fields,
  };
}

/** The agent's end of an in-memory stream: frames the executor sent, and a way to answer. */
class FakeAgent {
  readonly executorSide: Duplex;
  readonly frames: Frame[] = [];
  readonly #agentSide: Duplex;
  readonly #waiters: { op: string; resolve: (f: Frame) => void }[] = [];

  constructor() {
    const toAgent = new PassThrough();
    const toExecutor = new PassThrough();
    this.executorSide = Duplex.from({ readable: toExecutor, writable: toAgent });
    this.#agentSide = Duplex.from({ readable: toAgent, writable: toExecutor });
    this.#agentSide.on('error', () => undefined);
    this.executorSide.on('error', () => undefined);
    const decoder = new FrameDecoder(64 * 1024 * 1024);
    this.#agentSide.on('data', (chunk: Buffer) => {
      for (const frame of decoder.push(chunk)) {
        this.frames.push(frame);
        const i = this.#waiters.findIndex((w) => w.op === frame.header.op);
        if (i >= 0) this.#waiters.splice(i, 1)[0]!.resolve(frame);
      }
    });
  }

  send(header: FrameHeader, body?: Buffer): void {
    this.#agentSide.write(encodeFrame(header, body));
  }

  /** The next frame of `op` the executor sends (or one it sent already). */
  next(op: string): Promise<Frame> {
    const seen = this.frames.find((f) => f.header.op === op && !this.#taken.has(f));
    if (seen) {
      this.#taken.add(seen);
      return Promise.resolve(seen);
    }
    return new Promise((resolve) =>
      this.#waiters.push({
        op,
        resolve: (f) => {
          this.#taken.add(f);
          resolve(f);
        },
      }),
    );
  }

  readonly #taken = new Set<Frame>();

  stream(h: AgentHello): AgentStream {
    return { stream: this.executorSide, decoder: new FrameDecoder(), hello: h, buffered: [] };
  }
}

/** Spawns through `channel` and lets `agent` say started; resolves with the process and its request id. */
async function spawned(channel: AgentChannel, agent: FakeAgent, background: boolean, out: Buffer[] = []) {
  const starting = channel.spawn({ script: 'x', cwd: '/', background, keepStdin: background, onOutput: (c) => out.push(c) });
  const request = await agent.next('spawn');
  assert.equal(request.header.background === true, background);
  agent.send({ op: 'started', id: request.header.id, pid: 100 + request.header.id });
  const proc = await starting;
  proc.exited.catch(() => undefined);
  return { proc, id: request.header.id };
}

describe('agent hello: resume fields', () => {
  test('a resume key of 32 hex digits is kept, anything else is none; resumed only when true', () => {
    const parse = (fields: Record<string, unknown>) => parseHello({ header: { op: 'hello', id: 0, token: 't', ...fields }, body: Buffer.alloc(0) });
    assert.deepEqual([parse({ resume_key: KEY, resumed: true })?.resumeKey, parse({ resume_key: KEY, resumed: true })?.resumed], [KEY, true]);
    for (const bad of [KEY.toUpperCase(), `${KEY}0`, 'x'.repeat(32), 17, '']) assert.equal(parse({ resume_key: bad })?.resumeKey, '');
    assert.equal(parse({ resumed: 'yes' })?.resumed, false);
    assert.equal(parse({})?.resumed, false);
  });
});

describe('resumed answer', () => {
  const frame = (header: Record<string, unknown>): Frame => ({ header: { op: 'resumed', id: 9, ...header }, body: Buffer.alloc(0) });
  test('names a subset of what was asked', () => {
    assert.deepEqual(parseResumed(frame({ procs: [3] }), new Set([3, 5])), new Set([3]));
    assert.deepEqual(parseResumed(frame({ procs: [] }), new Set([3])), new Set());
  });
  test('an id not asked about, a non-number, a longer list or another op is malformed', () => {
    assert.equal(parseResumed(frame({ procs: [4] }), new Set([3])), undefined);
    assert.equal(parseResumed(frame({ procs: ['3'] }), new Set([3])), undefined);
    assert.equal(parseResumed(frame({ procs: [3, 3] }), new Set([3])), undefined);
    assert.equal(parseResumed(frame({ procs: 3 }), new Set([3])), undefined);
    assert.equal(parseResumed({ header: { op: 'ok', id: 9, procs: [] }, body: Buffer.alloc(0) }, new Set()), undefined);
  });
});

describe('a dropped stream', () => {
  test('a background process is bound to the next stream: its output and exit arrive; a foreground one fails', async () => {
    const first = new FakeAgent();
    const second = new FakeAgent();
    const asked: AgentHello[] = [];
    const channel = new AgentChannel(first.executorSide, new FrameDecoder(), hello(), 'fake', undefined, {
      reattach: async (previous) => {
        asked.push(previous);
        return second.stream(hello({ resumed: true, token: KEY }));
      },
    });
    const out: Buffer[] = [];
    const bg = await spawned(channel, first, true, out);
    const fg = await spawned(channel, first, false);
    channel.dropStream();
    await assert.rejects(fg.proc.exited, SandboxLostError);
    assert.equal(channel.isLost, false);
    const resume = await second.next('resume');
    assert.deepEqual(resume.header.procs, [bg.id]);
    assert.equal(asked[0]?.pid, 42);
    second.send({ op: 'resumed', id: resume.header.id, procs: [bg.id] });
    assert.equal(await channel.recover(), true);
    second.send({ op: 'out', id: bg.id }, Buffer.from('after'));
    second.send({ op: 'exit', id: bg.id, code: null, signal: 15, counters: {} });
    assert.deepEqual(await bg.proc.exited, { code: null, signal: 15, counters: {} });
    assert.equal(Buffer.concat(out).toString(), 'after');
    // Requests go to the new stream.
    const pinging = channel.ping();
    const ping = await second.next('ping');
    second.send({ op: 'pong', id: ping.header.id });
    await pinging;
    channel.close();
  });

  test('a process the agent no longer has ends as lost; the others stay', async () => {
    const first = new FakeAgent();
    const second = new FakeAgent();
    const channel = new AgentChannel(first.executorSide, new FrameDecoder(), hello(), 'fake', undefined, {
      reattach: async () => second.stream(hello({ resumed: true })),
    });
    const kept = await spawned(channel, first, true);
    const gone = await spawned(channel, first, true);
    channel.dropStream();
    const resume = await second.next('resume');
    second.send({ op: 'resumed', id: resume.header.id, procs: [kept.id] });
    await assert.rejects(gone.proc.exited, SandboxLostError);
    assert.equal(await channel.recover(), true);
    channel.close();
  });

  test('an answer naming a process it was not asked about loses the channel', async () => {
    const first = new FakeAgent();
    const second = new FakeAgent();
    const channel = new AgentChannel(first.executorSide, new FrameDecoder(), hello(), 'fake', undefined, {
      reattach: async () => second.stream(hello({ resumed: true })),
    });
    const bg = await spawned(channel, first, true);
    channel.dropStream();
    const resume = await second.next('resume');
    second.send({ op: 'resumed', id: resume.header.id, procs: [bg.id, 999] });
    await assert.rejects(bg.proc.exited, /answered resume with a malformed frame/);
    assert.equal(await channel.recover(), false);
    assert.equal(channel.isLost, true);
  });

  test('an agent that comes back as another (pid, key, or not resumed) is told bye and the channel is lost', async () => {
    for (const other of [hello({ resumed: true, pid: 43 }), hello({ resumed: true, resumeKey: 'f'.repeat(32) }), hello()]) {
      const first = new FakeAgent();
      const second = new FakeAgent();
      const channel = new AgentChannel(first.executorSide, new FrameDecoder(), hello(), 'fake', undefined, {
        reattach: async () => second.stream(other),
      });
      const bg = await spawned(channel, first, true);
      channel.dropStream();
      await assert.rejects(bg.proc.exited, /could not be reached again: another agent answered/);
      assert.equal(channel.isLost, true);
      assert.equal((await second.next('bye')).header.op, 'bye');
    }
  });

  test('a protocol fault loses the channel for good: no reattach is tried', async () => {
    const first = new FakeAgent();
    let tried = 0;
    const channel = new AgentChannel(first.executorSide, new FrameDecoder(), hello(), 'fake', undefined, {
      reattach: async () => {
        tried++;
        throw new Error('not expected');
      },
    });
    const bg = await spawned(channel, first, true);
    first.send({ op: 'out', id: bg.id }, Buffer.alloc(2 * 1024 * 1024));
    await assert.rejects(bg.proc.exited, /malformed frame/);
    assert.equal(channel.isLost, true);
    assert.equal(tried, 0);
  });

  test('an agent without the resume capability (or a channel without a way back) is lost on a drop, as before', async () => {
    for (const [h, withReattach] of [[hello({ capabilities: ['spawn'] }), true], [hello(), false]] as const) {
      const first = new FakeAgent();
      const channel = new AgentChannel(first.executorSide, new FrameDecoder(), h, 'fake', undefined, {
        ...(withReattach ? { reattach: () => Promise.reject(new Error('not expected')) } : {}),
      });
      const bg = await spawned(channel, first, true);
      channel.dropStream();
      await assert.rejects(bg.proc.exited, SandboxLostError);
      assert.equal(channel.isLost, true);
    }
  });

  test('nobody coming back in time loses the channel, and background processes with it', async () => {
    const first = new FakeAgent();
    const channel = new AgentChannel(first.executorSide, new FrameDecoder(), hello(), 'fake', undefined, {
      reattach: (_previous, signal) =>
        new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true })),
      reattachTimeoutMs: 50,
    });
    const bg = await spawned(channel, first, true);
    channel.dropStream();
    // The channel learns of the drop from the stream's events.
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(channel.isReattaching, true);
    // The channel's timer does not hold the process open (the executor's servers do); this test's must.
    const hold = setTimeout(() => undefined, 10_000);
    try {
      await assert.rejects(channel.ping(), /not found again within 50 ms/);
      await assert.rejects(bg.proc.exited, SandboxLostError);
    } finally {
      clearTimeout(hold);
    }
  });

  test('close() tells the agent bye: it ends everything instead of waiting to be found again', async () => {
    const first = new FakeAgent();
    const channel = new AgentChannel(first.executorSide, new FrameDecoder(), hello(), 'fake', undefined, {
      reattach: () => Promise.reject(new Error('not expected')),
    });
    channel.close();
    assert.equal((await first.next('bye')).header.op, 'bye');
    assert.equal(channel.isLost, true);
  });
});
