/**
 * The OpenTelemetry side of {@link Tracing}: loaded only by `startTracing`
 * when tracing is on (a dynamic import), so a process with tracing off never
 * loads the SDK.
 *
 * Nothing here touches OpenTelemetry's globals (tracer provider, context
 * manager, propagator): each tracer keeps its own, so several servers in one
 * process (tests, an embedding program) do not see each other's spans, and
 * Berth never changes what another library in the process records. In
 * `berth serve` the dispatcher and the executor share one tracer, so the
 * executor's spans find the dispatcher's as their parent in the same
 * asynchronous context.
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { ExportResultCode, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  type Sampler,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import { Metadata, Status, type ClientMiddleware, type ServerMiddleware } from 'nice-grpc';
import type { TracingConfig } from '../config.js';
import { statusOf } from '../grpc-errors.js';
import type { Logger } from '../logging.js';
import { SPAN_ATTRIBUTES as A, type SpanAttributes, type SpanOptions, type SpanScope, type Tracing, type TracingRole } from './tracing.js';

/** A gRPC call as middleware sees it: a unary call returns its response, a stream yields them. */
type CallGenerator<T> = AsyncGenerator<T, T | void, undefined>;

const DEFAULT_SERVICE_NAMES: Readonly<Record<TracingRole, string>> = {
  serve: 'berth',
  dispatcher: 'berth-dispatcher',
  executor: 'berth-executor',
};

/** Longest a shutdown waits for the last spans to be exported. */
const SHUTDOWN_FLUSH_MS = 5000;

const metadataGetter: TextMapGetter<Metadata> = {
  keys: (carrier) => Array.from(carrier, ([key]) => key),
  get: (carrier, key) => {
    const value = carrier.get(key);
    return typeof value === 'string' ? value : undefined;
  },
};

const metadataSetter: TextMapSetter<Metadata> = {
  set: (carrier, key, value) => carrier.set(key, value),
};

function buildSampler(config: TracingConfig): Sampler {
  const ratio = () => new TraceIdRatioBasedSampler(config.sampler_arg);
  switch (config.sampler) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return ratio();
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio() });
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
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

/**
 * Logs export failures (a wrong endpoint, a collector down) instead of the
 * exporter's silence: the first one, then one in a hundred.
 */
function loggingExporter(inner: SpanExporter, endpoint: string, logger: Logger): SpanExporter {
  let failures = 0;
  return {
    export(spans, done) {
      inner.export(spans, (result) => {
        if (result.code !== ExportResultCode.SUCCESS) {
          if (failures % 100 === 0) {
            logger.warn(
              { err: result.error, endpoint, failures: failures + 1 },
              'exporting trace spans failed; check OTEL_EXPORTER_OTLP_ENDPOINT and that the collector runs',
            );
          }
          failures += 1;
        }
        done(result);
      });
    },
    shutdown: () => inner.shutdown(),
    ...(inner.forceFlush ? { forceFlush: () => inner.forceFlush!() } : {}),
  };
}

function rpcAttributes(path: string): SpanAttributes {
  const slash = path.lastIndexOf('/');
  return { [A.rpcSystem]: 'grpc', [A.rpcService]: path.slice(1, slash), [A.rpcMethod]: path.slice(slash + 1) };
}

function fail(span: Span, err: unknown): void {
  const status = statusOf(err);
  const name = Status[status] ?? 'UNKNOWN';
  span.setAttribute(A.errorType, name);
  span.setStatus({ code: SpanStatusCode.ERROR, message: name });
}

/** A tracer exporting OTLP/protobuf as `config` says; `role` names the default service. */
export function createOtelTracing(config: TracingConfig, role: TracingRole, logger: Logger): Tracing {
  const resourceAttributes = parseResourceAttributes(config.resource_attributes);
  const serviceName = config.service_name || resourceAttributes[ATTR_SERVICE_NAME] || DEFAULT_SERVICE_NAMES[role];
  const endpoint = config.endpoint || 'http://localhost:4318/v1/traces';
  const exporter = loggingExporter(new OTLPTraceExporter({ url: endpoint }), endpoint, logger);
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ ...resourceAttributes, [ATTR_SERVICE_NAME]: serviceName }),
    sampler: buildSampler(config),
    // Batching settings (OTEL_BSP_*) are read by the SDK itself.
    spanProcessors: [new BatchSpanProcessor(exporter)],
  });
  const tracer = provider.getTracer('berth');
  const contexts = new AsyncLocalStorageContextManager().enable();
  const propagator = new W3CTraceContextPropagator();

  /**
   * Runs every step of a handler's generator in `ctx`; what a step starts
   * (awaits, promises, callbacks) keeps that context, so spans made deep in
   * the call find their parent.
   */
  async function* runIn<T>(ctx: Context, gen: CallGenerator<T>): CallGenerator<T> {
    let finished = false;
    try {
      for (;;) {
        const step = await contexts.with(ctx, () => gen.next());
        if (step.done === true) {
          finished = true;
          return step.value;
        }
        yield step.value;
      }
    } finally {
      // The caller stopped early (a cancelled stream): let the handler's own clean-up run.
      if (!finished) await contexts.with(ctx, () => gen.return(undefined)).catch(() => undefined);
    }
  }

  /**
   * Runs a gRPC call's generator in `span`, recording how it ended. A caller
   * that stops reading a stream once it has what it needs (Exec's exit event)
   * ends the call normally; `cancelled` tells a real cancellation apart.
   */
  async function* spanOver<T>(span: Span, ctx: Context, gen: CallGenerator<T>, cancelled: () => boolean): CallGenerator<T> {
    let status: Status = Status.OK;
    try {
      return yield* runIn(ctx, gen);
    } catch (err) {
      status = statusOf(err);
      fail(span, err);
      throw err;
    } finally {
      if (status === Status.OK && cancelled()) {
        status = Status.CANCELLED;
        span.setAttribute(A.errorType, 'CANCELLED');
        span.setStatus({ code: SpanStatusCode.ERROR, message: 'CANCELLED' });
      }
      span.setAttribute(A.rpcStatusCode, status);
      span.end();
    }
  }

  const continueTrace: ServerMiddleware = async function* continueTraceMiddleware(call, context) {
    const parent = propagator.extract(ROOT_CONTEXT, context.metadata, metadataGetter);
    return yield* runIn(parent, call.next(call.request, context));
  };

  const rpcClientSpans: ClientMiddleware = async function* rpcClientSpansMiddleware(call, options) {
    const parent = contexts.active();
    if (trace.getSpan(parent) === undefined) return yield* call.next(call.request, options);
    const span = tracer.startSpan(call.method.path.slice(1), { kind: SpanKind.CLIENT, attributes: rpcAttributes(call.method.path) }, parent);
    const ctx = trace.setSpan(parent, span);
    const metadata = Metadata(options.metadata);
    propagator.inject(ctx, metadata, metadataSetter);
    const signal = options.signal;
    return yield* spanOver(span, ctx, call.next(call.request, { ...options, metadata }), () => signal?.aborted === true);
  };

  return {
    serviceName,
    includeTaskIds: config.task_ids,
    continueTrace,
    rpcClientSpans,

    rpcServerSpans({ inProcess, attributes }) {
      return async function* rpcServerSpansMiddleware(call, context) {
        // Over the network the caller's context comes only from the metadata; in process it is also the current one.
        const parent = propagator.extract(inProcess ? contexts.active() : ROOT_CONTEXT, context.metadata, metadataGetter);
        if (trace.getSpan(parent) === undefined) return yield* call.next(call.request, context);
        const span = tracer.startSpan(
          call.method.path.slice(1),
          { kind: SpanKind.SERVER, attributes: { ...rpcAttributes(call.method.path), ...attributes } },
          parent,
        );
        // In process the call's signal is aborted at every end (in-process-client.ts), so it tells nothing there.
        const cancelled = () => !inProcess && context.signal.aborted;
        return yield* spanOver(span, trace.setSpan(parent, span), call.next(call.request, context), cancelled);
      };
    },

    span<T>(name: string, options: SpanOptions, fn: (scope: SpanScope) => Promise<T>): Promise<T> {
      const parent = contexts.active();
      if (options.childOnly === true && trace.getSpan(parent) === undefined) return fn(NO_SCOPE);
      const span = tracer.startSpan(
        name,
        { kind: options.kind === 'server' ? SpanKind.SERVER : SpanKind.INTERNAL, attributes: options.attributes },
        parent,
      );
      return contexts.with(trace.setSpan(parent, span), async () => {
        try {
          return await fn(span);
        } catch (err) {
          fail(span, err);
          throw err;
        } finally {
          span.end();
        }
      });
    },

    annotate(attributes) {
      trace.getSpan(contexts.active())?.setAttributes(attributes);
    },

    async shutdown() {
      const timer = new Promise<void>((resolve) => setTimeout(resolve, SHUTDOWN_FLUSH_MS).unref());
      await Promise.race([provider.shutdown().catch((err: unknown) => logger.warn({ err }, 'flushing trace spans failed')), timer]);
      contexts.disable();
    },
  };
}

const NO_SCOPE: SpanScope = { setAttributes: () => undefined };
