/**
 * A backend operation's steps become spans of the traced backend's tracer
 * (children of the operation's span), and stay plain calls outside a traced
 * operation.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { SpanOptions, SpanScope, Tracing } from '../../services/common/tracing/tracing.js';
import type { Backend, BackendEnvironment } from '../../services/executor/backend.js';
import { outsideStageSpans, stageSpan } from '../../services/common/tracing/stage-spans.js';
import { traceBackend } from '../../services/executor/traced-backend.js';

/** A tracer that records each span's name, with the names of the spans open around it. */
function recordingTracing(): { tracing: Tracing; spans: string[] } {
  const spans: string[] = [];
  const open: string[] = [];
  const tracing = {
    span<T>(name: string, _options: SpanOptions, fn: (scope: SpanScope) => Promise<T>): Promise<T> {
      spans.push([...open, name].join(' > '));
      open.push(name);
      return fn({ setAttributes: () => undefined }).finally(() => open.pop());
    },
  } as unknown as Tracing;
  return { tracing, spans };
}

/** A backend whose createEnvironment takes two steps. */
function twoStepBackend(): Backend {
  return {
    capabilities: { name: 'docker' },
    createEnvironment: async () => {
      await stageSpan('uid_pick', async () => undefined);
      await stageSpan('container_start', async () => undefined);
      return {} as BackendEnvironment;
    },
    close: async () => undefined,
  } as unknown as Backend;
}

describe('stage spans', () => {
  test("a traced create_environment's steps are spans inside it, named after the backend", async () => {
    const { tracing, spans } = recordingTracing();
    await traceBackend(twoStepBackend(), tracing).createEnvironment({ tenant: 't', taskId: 'a' });
    assert.deepEqual(spans, [
      'docker create_environment',
      'docker create_environment > docker uid_pick',
      'docker create_environment > docker container_start',
    ]);
  });

  test('without tracing the steps run as they are', async () => {
    const { spans } = recordingTracing();
    assert.equal(await stageSpan('uid_pick', async () => 42), 42);
    await twoStepBackend().createEnvironment({ tenant: 't', taskId: 'a' });
    assert.deepEqual(spans, []);
  });

  test('work an operation leaves behind (a refill after a claim) makes no spans in its trace', async () => {
    const { tracing, spans } = recordingTracing();
    let later: Promise<void> | undefined;
    const backend = {
      ...twoStepBackend(),
      createEnvironment: async () => {
        later = outsideStageSpans(() => new Promise<void>((resolve) => setTimeout(() => void stageSpan('container_start', async () => resolve()), 1)));
        return {} as BackendEnvironment;
      },
    } as unknown as Backend;
    await traceBackend(backend, tracing).createEnvironment({ tenant: 't', taskId: 'a' });
    await later;
    assert.deepEqual(spans, ['docker create_environment']);
  });
});
