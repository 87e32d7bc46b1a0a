/**
 * Ended spans on their way to the exporter: a bounded queue exported in
 * batches, on a timer or as soon as a batch is full, never on a call's own
 * path. A full queue drops spans (counted, and logged) rather than holding up
 * a call. Its settings are OpenTelemetry's batch span processor's, read from
 * the same `OTEL_BSP_*` variables.
 */

export interface BatchSettings {
  /** OTEL_BSP_SCHEDULE_DELAY: longest a span waits before an export starts. */
  readonly scheduleDelayMs: number;
  /** OTEL_BSP_MAX_QUEUE_SIZE: spans kept waiting; more are dropped. */
  readonly maxQueueSize: number;
  /** OTEL_BSP_MAX_EXPORT_BATCH_SIZE: spans per export request. */
  readonly maxExportBatchSize: number;
  /** OTEL_BSP_EXPORT_TIMEOUT: longest one export is waited for before the next starts. */
  readonly exportTimeoutMs: number;
}

const DEFAULTS: BatchSettings = { scheduleDelayMs: 5000, maxQueueSize: 2048, maxExportBatchSize: 512, exportTimeoutMs: 30_000 };

const VARIABLES: readonly (readonly [keyof BatchSettings, string, number])[] = [
  ['scheduleDelayMs', 'OTEL_BSP_SCHEDULE_DELAY', 0],
  ['maxQueueSize', 'OTEL_BSP_MAX_QUEUE_SIZE', 1],
  ['maxExportBatchSize', 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 1],
  ['exportTimeoutMs', 'OTEL_BSP_EXPORT_TIMEOUT', 1],
];

/**
 * The settings `env` gives, defaults (OpenTelemetry's) for the rest; `warn`
 * hears of a value that is not a number in range (ignored), and of a batch
 * larger than the queue (cut to the queue's size).
 */
export function batchSettingsFromEnv(env: NodeJS.ProcessEnv, warn: (message: string) => void): BatchSettings {
  const settings: Record<keyof BatchSettings, number> = { ...DEFAULTS };
  for (const [key, name, min] of VARIABLES) {
    const raw = env[name]?.trim();
    if (raw === undefined || raw === '') continue;
    const value = Number(raw);
    if (Number.isFinite(value) && value >= min) settings[key] = Math.floor(value);
    else warn(`${name}=${raw} is not a number ≥ ${min}; using ${DEFAULTS[key]}`);
  }
  if (settings.maxExportBatchSize > settings.maxQueueSize) {
    warn(`OTEL_BSP_MAX_EXPORT_BATCH_SIZE (${settings.maxExportBatchSize}) is larger than OTEL_BSP_MAX_QUEUE_SIZE; using ${settings.maxQueueSize}`);
    settings.maxExportBatchSize = settings.maxQueueSize;
  }
  return settings;
}

export interface SpanBatcherOptions<T> {
  readonly settings: BatchSettings;
  /** Sends one batch; a rejection is the exporter's to report. */
  readonly exportBatch: (batch: T[]) => Promise<void>;
  /** The first span dropped because the queue was full (later ones are only counted). */
  readonly onFirstDrop: () => void;
  /** Runs `fn` outside any trace context, so timers and exports carry none. */
  readonly detached?: <R>(fn: () => R) => R;
}

export class SpanBatcher<T> {
  readonly #o: SpanBatcherOptions<T>;
  #queue: T[] = [];
  #timer: NodeJS.Timeout | undefined;
  /** An export about to start because a batch is full. */
  #immediate: NodeJS.Immediate | undefined;
  #exporting: Promise<void> | undefined;
  #dropped = 0;
  #closed = false;

  constructor(options: SpanBatcherOptions<T>) {
    this.#o = options;
  }

  /** Spans dropped so far because the queue was full. */
  get dropped(): number {
    return this.#dropped;
  }

  /** Queues an ended span; O(1), never waits. */
  add(item: T): void {
    if (this.#closed) return;
    if (this.#queue.length >= this.#o.settings.maxQueueSize) {
      if (this.#dropped === 0) this.#o.onFirstDrop();
      this.#dropped += 1;
      return;
    }
    this.#queue.push(item);
    this.#schedule();
  }

  /** Exports everything queued, batch by batch. */
  async flush(): Promise<void> {
    this.#clearTimer();
    while (this.#exporting !== undefined || this.#queue.length > 0) {
      if (this.#exporting !== undefined) await this.#exporting;
      else await this.#exportOne();
    }
  }

  /** Exports what is queued, then takes no more. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.flush();
  }

  #schedule(): void {
    if (this.#exporting !== undefined) return;
    const full = this.#queue.length >= this.#o.settings.maxExportBatchSize;
    if (this.#immediate !== undefined || (this.#timer !== undefined && !full)) return;
    this.#clearTimer();
    const start = () => {
      // A full batch leaves once the current call's work is done; otherwise after the delay (a timer that keeps no process alive).
      if (full) this.#immediate = setImmediate(() => void this.#exportOne());
      else this.#timer = setTimeout(() => void this.#exportOne(), this.#o.settings.scheduleDelayMs).unref();
    };
    if (this.#o.detached) this.#o.detached(start);
    else start();
  }

  #clearTimer(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    if (this.#immediate !== undefined) clearImmediate(this.#immediate);
    this.#timer = undefined;
    this.#immediate = undefined;
  }

  /** Exports one batch; another is scheduled after it if spans remain. */
  #exportOne(): Promise<void> {
    this.#clearTimer();
    if (this.#exporting !== undefined) return this.#exporting;
    if (this.#queue.length === 0) return Promise.resolve();
    const size = this.#o.settings.maxExportBatchSize;
    const batch = this.#queue.length <= size ? this.#queue : this.#queue.slice(0, size);
    this.#queue = this.#queue.length <= size ? [] : this.#queue.slice(size);
    let timeout: NodeJS.Timeout | undefined;
    const timedOut = new Promise<void>((resolve) => {
      // Not waited for any longer: the next batch may start.
      timeout = setTimeout(resolve, this.#o.settings.exportTimeoutMs);
    });
    const sent = this.#o.exportBatch(batch).catch(() => undefined);
    this.#exporting = Promise.race([sent, timedOut]).then(() => {
      clearTimeout(timeout);
      this.#exporting = undefined;
      if (this.#queue.length > 0 && !this.#closed) this.#schedule();
    });
    return this.#exporting;
  }
}
