/**
 * The in-process client must behave like a gRPC client of the same service:
 * the same implementation is served over a real gRPC channel and called in
 * process, and every case compares the two.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  ClientError,
  createChannel,
  createClient,
  createServer,
  Metadata,
  ServerError,
  Status,
  type Channel,
  type Server,
} from 'nice-grpc';
import { BerthError, NotFoundError } from '../../services/common/errors.js';
import { errorBoundary, fromClientError } from '../../services/common/grpc-errors.js';
import { createInProcessClient } from '../../services/common/in-process-client.js';
import { silentLogger } from '../../services/common/logging.js';
import {
  ExecutorDefinition,
  type ExecutorClient,
  RunCodeClientMessage,
  type ExecutorServiceImplementation,
} from '../../services/gen/berth/v1/executor.js';

/** What the implementation saw, per path, for the cancellation cases. */
const seen = { cancelled: [] as string[], metadata: [] as string[] };

function waitForAbort(signal: AbortSignal, label: string): Promise<never> {
  return new Promise((_, reject) => {
    signal.addEventListener('abort', () => {
      seen.cancelled.push(label);
      reject(new Error('aborted'));
    });
  });
}

/** A test double of the executor: each method shows one behaviour a caller relies on. */
const partial: Partial<ExecutorServiceImplementation> = {
  // Partial messages both ways: the caller must see defaults filled in.
  statFile(request, context) {
    seen.metadata.push(String(context.metadata.get('x-test') ?? ''));
    if (request.path === '/missing') throw new NotFoundError('no such file: /missing');
    if (request.path === '/bug') throw new TypeError('a bug');
    if (request.path === '/hang') return waitForAbort(context.signal, `unary:${request.task?.taskId ?? ''}`);
    // Finishes normally although the call was cancelled: the caller must not see it.
    if (request.path === '/slow') return sleep(300).then(() => ({ absPath: 'too late' }));
    return Promise.resolve({ absPath: `${request.path}|${request.task?.tenant ?? 'no task'}|${request.task?.taskId === ''}` });
  },
  async *exec(request, context) {
    yield { event: { $case: 'output', value: { data: Buffer.from(`1:${request.command}`) } } };
    if (request.command === 'forever') {
      // Either the generator is ended at its yield or it runs on to the wait: the signal tells both.
      context.signal.addEventListener('abort', () => seen.cancelled.push('stream'));
      yield { event: { $case: 'output', value: { data: Buffer.from('2') } } };
      await new Promise((resolve) => context.signal.addEventListener('abort', resolve));
    }
    if (request.command === 'fail') throw new NotFoundError('task gone');
    if (request.command === 'slow') await sleep(300);
    yield { event: { $case: 'exit', value: { exitCode: 7 } } };
  },
  async *runCode(requests) {
    for await (const message of requests) {
      if (message.message?.$case === 'start') {
        yield { message: { $case: 'toolCall', value: { callId: 'c1', tool: 'read_file', argsJson: message.message.value.code } } };
      } else if (message.message?.$case === 'toolResult') {
        yield { message: { $case: 'result', value: { stdout: `got ${message.message.value.resultJson}` } } };
        return;
      }
    }
  },
};

const unimplemented = () => {
  throw new ServerError(Status.UNIMPLEMENTED, 'not in this test double');
};
const implementation = Object.fromEntries(
  Object.keys(ExecutorDefinition.methods).map((name) => [name, partial[name as keyof typeof partial] ?? unimplemented]),
) as unknown as ExecutorServiceImplementation;

describe('in-process client', () => {
  let server: Server;
  let channel: Channel;
  let clients: Array<[string, ExecutorClient]>;

  before(async () => {
    server = createServer().use(errorBoundary(silentLogger()));
    server.add(ExecutorDefinition, implementation);
    const port = await server.listen('127.0.0.1:0');
    channel = createChannel(`127.0.0.1:${port}`);
    clients = [
      ['grpc', createClient(ExecutorDefinition, channel)],
      [
        'in-process',
        createInProcessClient(ExecutorDefinition, implementation, {
          middleware: errorBoundary(silentLogger()),
        }),
      ],
    ];
  });

  after(async () => {
    channel.close();
    await server.shutdown();
  });

  async function both<T>(fn: (client: ExecutorClient) => Promise<T>): Promise<T> {
    const results: Array<{ value?: T; error?: unknown }> = [];
    for (const [, client] of clients) {
      try {
        results.push({ value: await fn(client) });
      } catch (error) {
        results.push({ error });
      }
    }
    const [grpc, local] = results as [{ value?: T; error?: unknown }, { value?: T; error?: unknown }];
    assert.deepEqual(describeOutcome(local), describeOutcome(grpc));
    if (grpc.error !== undefined) throw grpc.error;
    return grpc.value as T;
  }

  function describeOutcome(outcome: { value?: unknown; error?: unknown }): unknown {
    const { error } = outcome;
    if (error === undefined) return { value: outcome.value };
    if (error instanceof ClientError) return { status: error.code, details: error.details };
    return { error: error instanceof Error ? error.name : String(error) };
  }

  it('fills in defaults both ways, as decoding does', async () => {
    const response = await both((c) => c.statFile({ path: '/etc' }));
    assert.deepEqual(response, { absPath: '/etc|no task|false', exists: false, isDirectory: false, sizeBytes: 0 });
  });

  it('gives domain errors the status a remote caller gets, and back', async () => {
    await assert.rejects(both((c) => c.statFile({ path: '/missing' })), (err: unknown) => {
      assert.ok(err instanceof ClientError);
      assert.equal(err.code, Status.NOT_FOUND);
      const domain = fromClientError(err);
      assert.ok(domain instanceof BerthError);
      assert.deepEqual([domain.code, domain.message], ['NOT_FOUND', 'no such file: /missing']);
      return true;
    });
    await assert.rejects(both((c) => c.statFile({ path: '/bug' })), (err: unknown) => {
      assert.ok(err instanceof ClientError);
      assert.equal(err.code, Status.INTERNAL);
      return true;
    });
  });

  it('passes metadata', async () => {
    seen.metadata.length = 0;
    await both((c) => c.statFile({ path: '/etc' }, { metadata: Metadata({ 'x-test': 'hello' }) }));
    assert.deepEqual(seen.metadata, ['hello', 'hello']);
  });

  it('streams responses and ends with the error a stream ended with', async () => {
    const collect = async (c: ExecutorClient, command: string) => {
      const events: unknown[] = [];
      for await (const event of c.exec({ command })) events.push(event);
      return events;
    };
    const events = await both((c) => collect(c, 'ok'));
    assert.equal(events.length, 2);
    await assert.rejects(both((c) => collect(c, 'fail')), (err: unknown) => err instanceof ClientError && err.code === Status.NOT_FOUND);
  });

  it('cancels the call in the implementation when the caller aborts, or stops reading', async () => {
    seen.cancelled.length = 0;
    await assert.rejects(
      both(async (c) => {
        const controller = new AbortController();
        const call = c.statFile({ path: '/hang', task: { tenant: 't', taskId: 'x' } }, { signal: controller.signal });
        await sleep(50);
        controller.abort();
        return call;
      }),
      (err: unknown) => err instanceof Error && err.name === 'AbortError',
    );
    await both(async (c) => {
      for await (const event of c.exec({ command: 'forever' })) {
        if (event.event?.$case === 'output' && event.event.value.data.toString() === '2') break;
      }
      return 'stopped reading';
    });
    for (let i = 0; i < 100 && seen.cancelled.length < 4; i++) await sleep(10);
    assert.deepEqual(seen.cancelled.sort(), ['stream', 'stream', 'unary:x', 'unary:x']);
  });

  it('fails a cancelled call at once, whatever the implementation returns afterwards', async () => {
    const cancelAfter = async <T>(ms: number, fn: (signal: AbortSignal) => Promise<T>) => {
      const controller = new AbortController();
      const call = fn(controller.signal);
      await sleep(ms);
      controller.abort();
      return call;
    };
    const isAbort = (err: unknown) => err instanceof Error && err.name === 'AbortError';
    await assert.rejects(both((c) => cancelAfter(50, (signal) => c.statFile({ path: '/slow' }, { signal }))), isAbort);
    await assert.rejects(
      both((c) =>
        cancelAfter(50, async (signal) => {
          const events: unknown[] = [];
          for await (const event of c.exec({ command: 'slow' }, { signal })) events.push(event);
          return events;
        }),
      ),
      isAbort,
    );
  });

  it('carries a bidirectional stream', async () => {
    const transcript = await both(async (c) => {
      const replies: string[] = [];
      const outgoing = [RunCodeClientMessage.fromPartial({ message: { $case: 'start', value: { code: 'print(1)' } } })];
      let wake: (() => void) | undefined;
      async function* requests() {
        while (outgoing.length > 0 || wake === undefined) {
          const next = outgoing.shift();
          if (next) yield next;
          else await new Promise<void>((resolve) => (wake = resolve));
        }
      }
      for await (const message of c.runCode(requests())) {
        replies.push(JSON.stringify(message.message));
        if (message.message?.$case === 'toolCall') {
          outgoing.push({ message: { $case: 'toolResult', value: { callId: 'c1', resultJson: '{"ok":1}' } } });
          wake?.();
        }
      }
      return replies;
    });
    assert.equal(transcript.length, 2);
    assert.match(transcript[1] ?? '', /got \{\\"ok\\":1\}/);
  });
});
