/**
 * An OTLP `ExportTraceServiceRequest` in protobuf
 * (opentelemetry/proto/collector/trace/v1/trace_service.proto), written
 * straight from Berth's ended spans: one resource, one instrumentation scope.
 * Only the fields Berth's spans have are written.
 */
import { BinaryWriter, WireType } from '@bufbuild/protobuf/wire';

export type AttributeValue = string | number | boolean;

/** OTLP's SpanKind. */
export const OTLP_SPAN_KIND = { internal: 1, server: 2, client: 3 } as const;
/** OTLP's Status.StatusCode. */
export const OTLP_STATUS = { unset: 0, ok: 1, error: 2 } as const;

/** An ended span, as the tracer records it. */
export interface EndedSpan {
  readonly traceId: string;
  readonly spanId: string;
  /** '' for a root. */
  readonly parentSpanId: string;
  readonly parentRemote: boolean;
  readonly traceState: string;
  readonly name: string;
  readonly kind: number;
  /** Milliseconds since the epoch, sub-microsecond steps. */
  readonly startMs: number;
  readonly endMs: number;
  /** Key, value, key, value, ...; a key set again later wins. */
  readonly attributes: readonly (string | AttributeValue)[];
  readonly statusCode: number;
  readonly statusMessage: string;
}

/** Span.flags: W3C flags (sampled), and whether the parent's remoteness is known (0x100) and true (0x200). */
const FLAGS_SAMPLED = 0x01;
const FLAGS_HAS_IS_REMOTE = 0x100;
const FLAGS_IS_REMOTE = 0x200;

function nanos(ms: number): bigint {
  const whole = Math.floor(ms);
  return BigInt(whole) * 1_000_000n + BigInt(Math.round((ms - whole) * 1e6));
}

function keyValue(w: BinaryWriter, field: number, key: string, value: AttributeValue): void {
  w.tag(field, WireType.LengthDelimited).fork();
  w.tag(1, WireType.LengthDelimited).string(key);
  w.tag(2, WireType.LengthDelimited).fork();
  if (typeof value === 'string') w.tag(1, WireType.LengthDelimited).string(value);
  else if (typeof value === 'boolean') w.tag(2, WireType.Varint).bool(value);
  else if (Number.isInteger(value)) w.tag(3, WireType.Varint).int64(value);
  else w.tag(4, WireType.Bit64).double(value);
  w.join();
  w.join();
}

function span(w: BinaryWriter, s: EndedSpan): void {
  w.tag(2, WireType.LengthDelimited).fork();
  w.tag(1, WireType.LengthDelimited).bytes(Buffer.from(s.traceId, 'hex'));
  w.tag(2, WireType.LengthDelimited).bytes(Buffer.from(s.spanId, 'hex'));
  if (s.traceState !== '') w.tag(3, WireType.LengthDelimited).string(s.traceState);
  if (s.parentSpanId !== '') w.tag(4, WireType.LengthDelimited).bytes(Buffer.from(s.parentSpanId, 'hex'));
  w.tag(5, WireType.LengthDelimited).string(s.name);
  w.tag(6, WireType.Varint).int32(s.kind);
  w.tag(7, WireType.Bit64).fixed64(nanos(s.startMs));
  w.tag(8, WireType.Bit64).fixed64(nanos(s.endMs));
  const list = s.attributes;
  for (let i = 0; i < list.length; i += 2) {
    const key = list[i] as string;
    let later = false;
    for (let j = i + 2; j < list.length && !later; j += 2) later = list[j] === key;
    if (!later) keyValue(w, 9, key, list[i + 1]!);
  }
  w.tag(15, WireType.LengthDelimited).fork();
  if (s.statusMessage !== '') w.tag(2, WireType.LengthDelimited).string(s.statusMessage);
  if (s.statusCode !== OTLP_STATUS.unset) w.tag(3, WireType.Varint).int32(s.statusCode);
  w.join();
  w.tag(16, WireType.Bit32).fixed32(FLAGS_SAMPLED | FLAGS_HAS_IS_REMOTE | (s.parentRemote ? FLAGS_IS_REMOTE : 0));
  w.join();
}

/** The request body for `spans`, all of one resource (`resource`) and one scope (`scope`). */
export function encodeTraceRequest(resource: Readonly<Record<string, AttributeValue>>, scope: string, spans: readonly EndedSpan[]): Uint8Array {
  const w = new BinaryWriter();
  w.tag(1, WireType.LengthDelimited).fork(); // ResourceSpans
  w.tag(1, WireType.LengthDelimited).fork(); // Resource
  for (const key in resource) keyValue(w, 1, key, resource[key]!);
  w.join();
  w.tag(2, WireType.LengthDelimited).fork(); // ScopeSpans
  w.tag(1, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).string(scope).join();
  for (const s of spans) span(w, s);
  w.join();
  w.join();
  return w.finish();
}
