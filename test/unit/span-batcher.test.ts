/**
 * Ended spans wait in a bounded queue and leave in batches: a full queue
 * drops (and counts) rather than holding up a call, a full batch leaves
 * without waiting for the schedule, one export runs at a time, and the
 * OTEL_BSP_* variables set it all as OpenTelemetry's batch processor did.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { SpanBatcher, batchSettingsFromEnv, type BatchSettings } from '../../services/common/tracing/span-batcher.js';

/** An exporter whose exports stay open until the test answers them. */
function heldExporter() {
  const batches: number[][] = [];
  const pending: (() => void)[] = [];
  let arrived: (() => void) | undefined;
  return {
    batches,
    exportBatch: (batch: number[]) =>
      new Promise<void>((resolve) => {
        batches.push(batch);
        pending.push(resolve);
        arrived?.();
      }),
    /** Resolves once `n` exports have started. */
    async started(n: number): Promise<void> {
      while (batches.length < n) await new Promise<void>((resolve) => (arrived = resolve));
    },
    answerAll(): void {
      for (const resolve of pending.splice(0)) resolve();
    },
  };
}

const settings = (over: Partial<BatchSettings>): BatchSettings => ({
  scheduleDelayMs: 3_600_000,
  maxQueueSize: 2048,
  maxExportBatchSize: 512,
  exportTimeoutMs: 3_600_000,
  ...over,
});

describe('span batcher', () => {
  test('a full queue drops spans at once, counts them and reports the first; the rest leave in batches', async () => {
    const exporter = heldExporter();
    let reports = 0;
    const batcher = new SpanBatcher<number>({
      settings: settings({ maxQueueSize: 5, maxExportBatchSize: 2 }),
      exportBatch: exporter.exportBatch,
      onFirstDrop: () => (reports += 1),
    });
    // Synchronously, as calls end: nothing is exported before the event loop turns.
    for (let i = 0; i < 8; i++) batcher.add(i);
    assert.equal(batcher.dropped, 3);
    assert.equal(reports, 1);
    const flushed = batcher.flush();
    await exporter.started(1);
    exporter.answerAll();
    await exporter.started(2);
    exporter.answerAll();
    await exporter.started(3);
    exporter.answerAll();
    await flushed;
    assert.deepEqual(exporter.batches, [[0, 1], [2, 3], [4]]);
  });

  test('a full batch leaves without waiting for the schedule delay; one export at a time', async () => {
    const exporter = heldExporter();
    const batcher = new SpanBatcher<number>({ settings: settings({ maxExportBatchSize: 3 }), exportBatch: exporter.exportBatch, onFirstDrop: () => undefined });
    for (let i = 0; i < 3; i++) batcher.add(i);
    await exporter.started(1);
    for (let i = 3; i < 9; i++) batcher.add(i);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(exporter.batches.length, 1, 'the second batch waits for the first export');
    exporter.answerAll();
    await exporter.started(2);
    exporter.answerAll();
    await exporter.started(3);
    exporter.answerAll();
    assert.deepEqual(exporter.batches, [[0, 1, 2], [3, 4, 5], [6, 7, 8]]);
    await batcher.close();
  });

  test('an export that never answers is given up on after the export timeout; closed, the batcher takes no more', async () => {
    const batches: number[][] = [];
    const batcher = new SpanBatcher<number>({
      settings: settings({ exportTimeoutMs: 1, maxExportBatchSize: 1 }),
      exportBatch: (batch) => {
        batches.push(batch);
        return new Promise<void>(() => undefined);
      },
      onFirstDrop: () => undefined,
    });
    batcher.add(1);
    batcher.add(2);
    await batcher.close();
    batcher.add(3);
    await batcher.flush();
    assert.deepEqual(batches, [[1], [2]]);
  });

  test('OTEL_BSP_* set the schedule, queue, batch and timeout; bad values are reported and ignored', () => {
    const warnings: string[] = [];
    const warn = (m: string) => warnings.push(m);
    assert.deepEqual(batchSettingsFromEnv({}, warn), { scheduleDelayMs: 5000, maxQueueSize: 2048, maxExportBatchSize: 512, exportTimeoutMs: 30_000 });
    assert.deepEqual(
      batchSettingsFromEnv(
        { OTEL_BSP_SCHEDULE_DELAY: '50', OTEL_BSP_MAX_QUEUE_SIZE: ' 100 ', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '10', OTEL_BSP_EXPORT_TIMEOUT: '2000' },
        warn,
      ),
      { scheduleDelayMs: 50, maxQueueSize: 100, maxExportBatchSize: 10, exportTimeoutMs: 2000 },
    );
    assert.deepEqual(warnings, []);
    const bad = batchSettingsFromEnv({ OTEL_BSP_SCHEDULE_DELAY: 'soon', OTEL_BSP_MAX_QUEUE_SIZE: '0', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '' }, warn);
    assert.deepEqual(bad, { scheduleDelayMs: 5000, maxQueueSize: 2048, maxExportBatchSize: 512, exportTimeoutMs: 30_000 });
    assert.equal(warnings.length, 2);
    assert.match(warnings[0]!, /OTEL_BSP_SCHEDULE_DELAY=soon/);
    warnings.length = 0;
    assert.equal(batchSettingsFromEnv({ OTEL_BSP_MAX_QUEUE_SIZE: '100', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '500' }, warn).maxExportBatchSize, 100);
    assert.match(warnings[0]!, /larger than OTEL_BSP_MAX_QUEUE_SIZE/);
  });
});
