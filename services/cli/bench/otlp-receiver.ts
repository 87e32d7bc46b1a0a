/**
 * A local OTLP/HTTP trace receiver, as a collector would be: POST
 * /v1/traces with an `ExportTraceServiceRequest` in protobuf (gzip or
 * not), answered 200 with an empty `ExportTraceServiceResponse`. Spans are
 * decoded with a small wire-format reader over the fields of
 * opentelemetry/proto/trace/v1/trace.proto that tests look at; unknown
 * fields are skipped.
 */
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import { setTimeout as sleep } from 'node:timers/promises';
import { BinaryReader, type WireType } from '@bufbuild/protobuf/wire';

export type AttributeValue = string | number | boolean;

/** SpanKind of the OTLP proto. */
export const SPAN_KIND = { unspecified: 0, internal: 1, server: 2, client: 3 } as const;
/** Status.StatusCode of the OTLP proto. */
export const STATUS_CODE = { unset: 0, ok: 1, error: 2 } as const;

export interface ReceivedSpan {
  readonly traceId: string;
  readonly spanId: string;
  /** '' for a root span. */
  readonly parentSpanId: string;
  readonly traceState: string;
  readonly name: string;
  readonly kind: number;
  readonly attributes: Readonly<Record<string, AttributeValue>>;
  readonly status: { readonly code: number; readonly message: string };
  /** When the span started and ended, nanoseconds since the epoch (the sender's clock). */
  readonly startTimeUnixNano: bigint;
  readonly endTimeUnixNano: bigint;
  /** The attributes of the resource that sent it (service.name, ...). */
  readonly resource: Readonly<Record<string, AttributeValue>>;
}

export interface OtlpReceiver extends AsyncDisposable {
  /** http://127.0.0.1:PORT, the value for OTEL_EXPORTER_OTLP_ENDPOINT. */
  readonly endpoint: string;
  /** Every span received so far. */
  spans(): ReceivedSpan[];
  /** How many export requests arrived (decodable or not). */
  requests(): number;
  /** Resolves with the spans once `ready(spans)` holds; rejects after `timeoutMs` listing what came. */
  waitFor(what: string, ready: (spans: ReceivedSpan[]) => boolean, timeoutMs?: number): Promise<ReceivedSpan[]>;
  close(): Promise<void>;
}

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');

/** Calls `onField` for every field of a message; the callback must consume the value (or skip it). */
function fields(bytes: Uint8Array, onField: (no: number, type: WireType, r: BinaryReader) => boolean): void {
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [no, type] = r.tag();
    if (!onField(no, type, r)) r.skip(type, no);
  }
}

function anyValue(bytes: Uint8Array): AttributeValue {
  let value: AttributeValue = '';
  fields(bytes, (no, _type, r) => {
    if (no === 1) value = r.string();
    else if (no === 2) value = r.bool();
    else if (no === 3) value = Number(r.int64());
    else if (no === 4) value = r.double();
    else return false;
    return true;
  });
  return value;
}

function keyValue(bytes: Uint8Array, into: Record<string, AttributeValue>): void {
  let key = '';
  let value: AttributeValue = '';
  fields(bytes, (no, _type, r) => {
    if (no === 1) key = r.string();
    else if (no === 2) value = anyValue(r.bytes());
    else return false;
    return true;
  });
  into[key] = value;
}

function decodeSpan(bytes: Uint8Array, resource: Record<string, AttributeValue>): ReceivedSpan {
  const span = {
    traceId: '',
    spanId: '',
    parentSpanId: '',
    traceState: '',
    name: '',
    kind: 0,
    attributes: {} as Record<string, AttributeValue>,
    status: { code: 0, message: '' },
    startTimeUnixNano: 0n,
    endTimeUnixNano: 0n,
    resource,
  };
  fields(bytes, (no, _type, r) => {
    switch (no) {
      case 1: span.traceId = hex(r.bytes()); return true;
      case 2: span.spanId = hex(r.bytes()); return true;
      case 3: span.traceState = r.string(); return true;
      case 4: span.parentSpanId = hex(r.bytes()); return true;
      case 5: span.name = r.string(); return true;
      case 6: span.kind = r.int32(); return true;
      case 7: span.startTimeUnixNano = BigInt(r.fixed64()); return true;
      case 8: span.endTimeUnixNano = BigInt(r.fixed64()); return true;
      case 9: keyValue(r.bytes(), span.attributes); return true;
      case 15:
        fields(r.bytes(), (sno, _t, sr) => {
          if (sno === 2) span.status.message = sr.string();
          else if (sno === 3) span.status.code = sr.int32();
          else return false;
          return true;
        });
        return true;
      default: return false;
    }
  });
  return span;
}

/** Decodes an ExportTraceServiceRequest into its spans. */
export function decodeExportTraceRequest(body: Uint8Array): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  fields(body, (no, _type, r) => {
    if (no !== 1) return false;
    const resource: Record<string, AttributeValue> = {};
    const scopeSpans: Uint8Array[] = [];
    fields(r.bytes(), (rno, _t, rr) => {
      if (rno === 1) fields(rr.bytes(), (ano, _a, ar) => (ano === 1 ? (keyValue(ar.bytes(), resource), true) : false));
      else if (rno === 2) scopeSpans.push(rr.bytes());
      else return false;
      return true;
    });
    for (const scope of scopeSpans) {
      fields(scope, (sno, _t, sr) => (sno === 2 ? (out.push(decodeSpan(sr.bytes(), resource)), true) : false));
    }
    return true;
  });
  return out;
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const body = Buffer.concat(chunks);
  return req.headers['content-encoding'] === 'gzip' ? gunzipSync(body) : body;
}

/** `decode: false` (benchmarks): only count requests, so the receiver costs the measured process little CPU. */
export async function startOtlpReceiver(options: { readonly decode?: boolean } = {}): Promise<OtlpReceiver> {
  const decode = options.decode ?? true;
  const spans: ReceivedSpan[] = [];
  let requests = 0;
  const server = createServer((req, res) => {
    requests += 1;
    if (req.method !== 'POST' || req.url !== '/v1/traces') {
      res.writeHead(404).end();
      return;
    }
    readBody(req).then(
      (body) => {
        if (req.headers['content-type'] !== 'application/x-protobuf') {
          res.writeHead(415).end('only application/x-protobuf');
          return;
        }
        if (decode) spans.push(...decodeExportTraceRequest(body));
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      },
      () => res.writeHead(400).end(),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans: () => [...spans],
    requests: () => requests,
    async waitFor(what, ready, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        if (ready(spans)) return [...spans];
        if (Date.now() > deadline) {
          const seen = spans.map((s) => `${s.resource['service.name']}: ${s.name} (${s.spanId} <- ${s.parentSpanId || 'root'})`);
          throw new Error(`timed out waiting for ${what}; received ${spans.length} spans:\n${seen.join('\n')}`);
        }
        await sleep(50);
      }
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
