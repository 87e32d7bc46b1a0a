/**
 * The implementation of {@link Tracing}: loaded only by `startTracing` when
 * tracing is on (a dynamic import), so a process with tracing off loads none
 * of it.
 *
 * Berth records its spans itself rather than through OpenTelemetry's SDK,
 * whose cost per span was most of tracing's cost per call
 * (docs/performance.md): a span is a small object, its ids come from a pooled
 * random buffer, its times from the monotonic clock, the current span lives
 * in tracing's one AsyncLocalStorage (trace-scope.ts), and W3C trace context
 * is read and written by hand (trace-context.ts). Ended spans wait in a
 * bounded queue (span-batcher.ts) and leave in batches, encoded as OTLP
 * protobuf (otlp-encoding.ts) and sent by OpenTelemetry's OTLP/HTTP
 * transport, which reads the exporter's own variables (headers, TLS,
 * timeout, compression) and retries as the specification says.
 *
 * Nothing here touches OpenTelemetry's globals: each tracer ignores spans it
 * did not make, so several servers in one process (tests, an embedding
 * program) do not see each other's spans. In `berth serve` the dispatcher and
 * the executor share one tracer, so the executor's spans find the
 * dispatcher's as their parent in the same asynchronous context.
 */
import { OTLPExporterBase } from '@opentelemetry/otlp-exporter-base';
import { convertLegacyHttpOptions, createOtlpHttpExportDelegate } from '@opentelemetry/otlp-exporter-base/node-http';
import { Metadata, Status, type ClientMiddleware, type ServerMiddleware } from 'nice-grpc';
import type { TracingConfig } from '../config.js';
import { statusOf } from '../grpc-errors.js';
import type { Logger } from '../logging.js';
import { OTLP_SPAN_KIND, OTLP_STATUS, encodeTraceRequest, type AttributeValue, type EndedSpan } from './otlp-encoding.js';
import { SpanBatcher, batchSettingsFromEnv } from './span-batcher.js';
import { IdSource, buildSampler, formatTraceparent, nowMs, parseTraceparent } from './trace-context.js';
import { traceScopes, type ScopedSpan, type TraceScope } from './trace-scope.js';
import { SPAN_ATTRIBUTES as A, type SpanAttributes, type SpanOptions, type SpanScope, type Tracing, type TracingRole } from './tracing.js';

/** A gRPC call as middleware sees it: a unary call returns its response, a stream yields them. */
type CallGenerator<T> = AsyncGenerator<T, T | void, undefined>;

const DEFAULT_SERVICE_NAMES: Readonly<Record<TracingRole, string>> = {
  serve: 'berth',
  dispatcher: 'berth-dispatcher',
  executor: 'berth-executor',
};

const SERVICE_NAME = 'service.name';
/** The instrumentation scope every span is recorded under. */
const SCOPE = 'berth';

/** Longest a shutdown waits for the last spans to be exported. */
const SHUTDOWN_FLUSH_MS = 5000;

/** A span context: one of ours, or a caller's (`remote`), which is never recorded. */
interface SpanContext extends ScopedSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly sampled: boolean;
  readonly traceState: string;
  readonly remote: boolean;
}

/** A span of ours while it runs; ended, it is what the exporter encodes. */
class LiveSpan implements SpanContext, EndedSpan, SpanScope {
  readonly remote = false;
  endMs = 0;
  statusCode: number = OTLP_STATUS.unset;
  statusMessage = '';
  readonly startMs = nowMs();

  constructor(
    readonly owner: object,
    readonly traceId: string,
    readonly spanId: string,
    readonly parentSpanId: string,
    readonly parentRemote: boolean,
    readonly traceState: string,
    readonly sampled: boolean,
    readonly name: string,
    readonly kind: number,
    /** Key, value, ...: appending is cheaper than adding properties to an object, and spans set few. */
    readonly attributes: (string | AttributeValue)[],
  ) {}

  setAttributes(attributes: SpanAttributes): void {
    if (!this.sampled) return;
    for (const key in attributes) this.attributes.push(key, attributes[key]!);
  }

  /** Marks the span failed with the gRPC status name. */
  fail(name: string): void {
    this.setAttributes({ [A.errorType]: name });
    this.statusCode = OTLP_STATUS.error;
    this.statusMessage = name;
  }
}

/** OTEL_RESOURCE_ATTRIBUTES: `key=value` pairs separated by commas, values percent-encoded. */
export function parseResourceAttributes(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of text.split(',')) {
    const eq = pair.indexOf('=');
    if (eq <= 0) continue;
    const key = pair.slice(0, eq).trim();
    try {
      out[key] = decodeURIComponent(pair.slice(eq + 1).trim());
    } catch {
      out[key] = pair.slice(eq + 1).trim();
    }
  }
  return out;
}

/** The caller's span context in gRPC metadata (W3C `traceparent`, `tracestate`), if well formed. */
function extract(metadata: Metadata, owner: object): SpanContext | undefined {
  const header = metadata.get('traceparent');
  if (typeof header !== 'string') return undefined;
  const state = metadata.get('tracestate');
  const parent = parseTraceparent(header, typeof state === 'string' ? state : undefined);
  return parent && { owner, ...parent, remote: true };
}

function rpcAttributes(path: string, more: SpanAttributes = {}): (string | AttributeValue)[] {
  const slash = path.lastIndexOf('/');
  return [A.rpcSystem, 'grpc', A.rpcService, path.slice(1, slash), A.rpcMethod, path.slice(slash + 1), ...attributeList(more)];
}

function attributeList(attributes: SpanAttributes): (string | AttributeValue)[] {
  const list: (string | AttributeValue)[] = [];
  for (const key in attributes) list.push(key, attributes[key]!);
  return list;
}

/** Sends batches of spans as OTLP/protobuf over HTTP; failures are logged (the first, then one in a hundred). */
function otlpSender(endpoint: string, resource: Record<string, AttributeValue>, logger: Logger): { send(spans: EndedSpan[]): Promise<void>; shutdown(): Promise<void> } {
  const serializer = {
    serializeRequest: (spans: EndedSpan[]) => encodeTraceRequest(resource, SCOPE, spans),
    deserializeResponse: () => ({}),
  };
  const options = convertLegacyHttpOptions({ url: endpoint }, 'TRACES', 'v1/traces', { 'Content-Type': 'application/x-protobuf' });
  const exporter = new OTLPExporterBase<EndedSpan[]>(
    createOtlpHttpExportDelegate(options, serializer, 'berth_otlp_http_span_exporter', { name: 'span', countItems: (spans) => spans.length }, undefined),
  );
  let failures = 0;
  return {
    send: (spans) =>
      new Promise((resolve) => {
        exporter.export(spans, (result) => {
          if (result.code !== 0) {
            if (failures % 100 === 0) {
              logger.warn(
                { err: result.error, endpoint, failures: failures + 1 },
                'exporting trace spans failed; check OTEL_EXPORTER_OTLP_ENDPOINT and that the collector runs',
              );
            }
            failures += 1;
          }
          resolve();
        });
      }),
    shutdown: () => exporter.shutdown(),
  };
}

/** A tracer exporting OTLP/protobuf as `config` says; `role` names the default service. */
export function createOtelTracing(config: TracingConfig, role: TracingRole, logger: Logger): Tracing {
  const resourceAttributes = parseResourceAttributes(config.resource_attributes);
  const serviceName = config.service_name || resourceAttributes[SERVICE_NAME] || DEFAULT_SERVICE_NAMES[role];
  const endpoint = config.endpoint || 'http://localhost:4318/v1/traces';
  const sender = otlpSender(endpoint, { ...resourceAttributes, [SERVICE_NAME]: serviceName }, logger);
  const settings = batchSettingsFromEnv(process.env, (message) => logger.warn(message));
  const batcher = new SpanBatcher<EndedSpan>({
    settings,
    exportBatch: (spans) => sender.send(spans),
    onFirstDrop: () =>
      logger.warn(
        { maxQueueSize: settings.maxQueueSize },
        'trace spans are dropped: more ended than the exporter keeps up with (OTEL_BSP_MAX_QUEUE_SIZE); the count is logged at shutdown',
      ),
    detached: (fn) => traceScopes.exit(fn),
  });
  const sampler = buildSampler(config);
  const ids = new IdSource();
  /** Tells this tracer's spans (and the remote parents it read) from another tracer's in the same store. */
  const owner = {};

  const current = (): SpanContext | undefined => {
    const span = traceScopes.getStore()?.span as SpanContext | undefined;
    return span?.owner === owner ? span : undefined;
  };

  function start(name: string, kind: number, attributes: (string | AttributeValue)[], parent: SpanContext | undefined): LiveSpan {
    const traceId = parent?.traceId ?? ids.traceId();
    const sampled = sampler(parent, traceId);
    return new LiveSpan(owner, traceId, ids.spanId(), parent?.spanId ?? '', parent?.remote ?? false, parent?.traceState ?? '', sampled, name, kind, attributes);
  }

  function end(span: LiveSpan): void {
    span.endMs = nowMs();
    if (span.sampled) batcher.add(span);
  }

  const scopeOf = (span: SpanContext): TraceScope => ({ span, stage: traceScopes.getStore()?.stage });

  /**
   * Runs every step of a handler's generator in `scope`; what a step starts
   * (awaits, promises, callbacks) keeps it, so spans made deep in the call
   * find their parent.
   */
  async function* runIn<T>(scope: TraceScope, gen: CallGenerator<T>): CallGenerator<T> {
    let finished = false;
    try {
      for (;;) {
        const step = await traceScopes.run(scope, () => gen.next());
        if (step.done === true) {
          finished = true;
          return step.value;
        }
        yield step.value;
      }
    } finally {
      // The caller stopped early (a cancelled stream): let the handler's own clean-up run.
      if (!finished) await traceScopes.run(scope, () => gen.return(undefined)).catch(() => undefined);
    }
  }

  /**
   * Runs a gRPC call's generator in `span`, recording how it ended. A caller
   * that stops reading a stream once it has what it needs (Exec's exit event)
   * ends the call normally; `cancelled` tells a real cancellation apart.
   */
  async function* spanOver<T>(span: LiveSpan, gen: CallGenerator<T>, cancelled: () => boolean): CallGenerator<T> {
    let status: Status = Status.OK;
    try {
      return yield* runIn(scopeOf(span), gen);
    } catch (err) {
      status = statusOf(err);
      span.fail(Status[status] ?? 'UNKNOWN');
      throw err;
    } finally {
      if (status === Status.OK && cancelled()) {
        status = Status.CANCELLED;
        span.fail('CANCELLED');
      }
      span.setAttributes({ [A.rpcStatusCode]: status });
      end(span);
    }
  }

  const continueTrace: ServerMiddleware = async function* continueTraceMiddleware(call, context) {
    const parent = extract(context.metadata, owner);
    // No caller context and none around: the handler already runs outside any trace.
    if (parent === undefined && traceScopes.getStore() === undefined) return yield* call.next(call.request, context);
    return yield* runIn({ span: parent }, call.next(call.request, context));
  };

  const rpcClientSpans: ClientMiddleware = async function* rpcClientSpansMiddleware(call, options) {
    const parent = current();
    if (parent === undefined) return yield* call.next(call.request, options);
    const span = start(call.method.path.slice(1), OTLP_SPAN_KIND.client, rpcAttributes(call.method.path), parent);
    const metadata = Metadata(options.metadata);
    metadata.set('traceparent', formatTraceparent(span.traceId, span.spanId, span.sampled));
    if (span.traceState !== '') metadata.set('tracestate', span.traceState);
    const signal = options.signal;
    return yield* spanOver(span, call.next(call.request, { ...options, metadata }), () => signal?.aborted === true);
  };

  return {
    serviceName,
    includeTaskIds: config.task_ids,
    continueTrace,
    rpcClientSpans,

    rpcServerSpans({ inProcess, attributes }) {
      return async function* rpcServerSpansMiddleware(call, context) {
        // Over the network the caller's context comes only from the metadata; in process it is also the current one.
        const parent = extract(context.metadata, owner) ?? (inProcess ? current() : undefined);
        if (parent === undefined) return yield* call.next(call.request, context);
        const span = start(call.method.path.slice(1), OTLP_SPAN_KIND.server, rpcAttributes(call.method.path, attributes), parent);
        // In process the call's signal is aborted at every end (in-process-client.ts), so it tells nothing there.
        const cancelled = () => !inProcess && context.signal.aborted;
        return yield* spanOver(span, call.next(call.request, context), cancelled);
      };
    },

    span<T>(name: string, options: SpanOptions, fn: (scope: SpanScope) => Promise<T>): Promise<T> {
      const parent = current();
      if (options.childOnly === true && parent === undefined) return fn(NO_SCOPE);
      const kind = options.kind === 'server' ? OTLP_SPAN_KIND.server : OTLP_SPAN_KIND.internal;
      const span = start(name, kind, attributeList(options.attributes), parent);
      return traceScopes.run(scopeOf(span), async () => {
        try {
          return await fn(span);
        } catch (err) {
          span.fail(Status[statusOf(err)] ?? 'UNKNOWN');
          throw err;
        } finally {
          end(span);
        }
      });
    },

    annotate(attributes) {
      const span = current();
      if (span instanceof LiveSpan) span.setAttributes(attributes);
    },

    async shutdown() {
      const timer = new Promise<void>((resolve) => setTimeout(resolve, SHUTDOWN_FLUSH_MS).unref());
      const flushed = batcher
        .close()
        .then(() => sender.shutdown())
        .catch((err: unknown) => logger.warn({ err }, 'flushing trace spans failed'));
      await Promise.race([flushed, timer]);
      if (batcher.dropped > 0) logger.warn({ dropped: batcher.dropped }, 'trace spans dropped because the queue was full (OTEL_BSP_MAX_QUEUE_SIZE)');
    },
  };
}

const NO_SCOPE: SpanScope = { setAttributes: () => undefined };
