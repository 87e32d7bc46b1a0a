/**
 * W3C trace context by hand (https://www.w3.org/TR/trace-context/): the
 * `traceparent` and `tracestate` headers a client sends, parsed strictly (they
 * come from clients), and the ids, sampling decisions and times of Berth's own
 * spans. Pure, and free of OpenTelemetry code.
 */
import { randomFillSync } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { TracingConfig } from '../config.js';

/** A span context received from a caller: the parent of the spans a call makes. */
export interface RemoteParent {
  readonly traceId: string;
  readonly spanId: string;
  readonly sampled: boolean;
  /** The `tracestate` to pass on, already checked ('' for none). */
  readonly traceState: string;
}

const HEX = /^[0-9a-f]+$/;
const ZERO_TRACE_ID = '0'.repeat(32);
const ZERO_SPAN_ID = '0'.repeat(16);

/**
 * A `traceparent` header, or undefined when it is malformed: version `ff`,
 * anything but lower-case hex in its fields, an all-zero trace or parent id,
 * or (version 00) anything after the flags. A later version may carry more
 * fields after a `-`, which are ignored, as the specification says.
 */
export function parseTraceparent(header: string | undefined, tracestate?: string): RemoteParent | undefined {
  if (header === undefined || header.length < 55 || header.length > 512) return undefined;
  const version = header.slice(0, 2);
  if (!HEX.test(version) || version === 'ff') return undefined;
  if (header[2] !== '-' || header[35] !== '-' || header[52] !== '-') return undefined;
  if (version === '00' ? header.length !== 55 : header.length > 55 && header[55] !== '-') return undefined;
  const traceId = header.slice(3, 35);
  const spanId = header.slice(36, 52);
  const flags = header.slice(53, 55);
  if (!HEX.test(traceId) || !HEX.test(spanId) || !HEX.test(flags)) return undefined;
  if (traceId === ZERO_TRACE_ID || spanId === ZERO_SPAN_ID) return undefined;
  return { traceId, spanId, sampled: (parseInt(flags, 16) & 1) === 1, traceState: parseTracestate(tracestate) };
}

/** `traceparent` for a span of ours (version 00). */
export function formatTraceparent(traceId: string, spanId: string, sampled: boolean): string {
  return `00-${traceId}-${spanId}-${sampled ? '01' : '00'}`;
}

const TRACESTATE_KEY = /^(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})$/;
const TRACESTATE_VALUE = /^[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;
const MAX_TRACESTATE_MEMBERS = 32;
const MAX_TRACESTATE_CHARS = 512;

/**
 * A `tracestate` header with its malformed members left out (at most 32 kept,
 * as OpenTelemetry does); '' when there is none or it is longer than 512 characters.
 */
export function parseTracestate(header: string | undefined): string {
  if (header === undefined || header.length === 0 || header.length > MAX_TRACESTATE_CHARS) return '';
  const kept: string[] = [];
  for (const member of header.split(',')) {
    const m = member.trim();
    const eq = m.indexOf('=');
    if (eq <= 0) continue;
    if (TRACESTATE_KEY.test(m.slice(0, eq)) && TRACESTATE_VALUE.test(m.slice(eq + 1))) kept.push(m);
    if (kept.length === MAX_TRACESTATE_MEMBERS) break;
  }
  return kept.join(',');
}

/**
 * Random trace and span ids, cut from a buffer filled 4 KiB at a time (one
 * `crypto` call per 170 spans or so, not one per id). Never all zero.
 */
export class IdSource {
  readonly #pool = Buffer.allocUnsafe(4096);
  #offset = this.#pool.length;

  #hex(bytes: number, zero: string): string {
    for (;;) {
      if (this.#offset + bytes > this.#pool.length) {
        randomFillSync(this.#pool);
        this.#offset = 0;
      }
      const id = this.#pool.toString('hex', this.#offset, this.#offset + bytes);
      this.#offset += bytes;
      if (id !== zero) return id;
    }
  }

  traceId(): string {
    return this.#hex(16, ZERO_TRACE_ID);
  }

  spanId(): string {
    return this.#hex(8, ZERO_SPAN_ID);
  }
}

/** Whether a new span is sampled, given its parent (if any) and trace id. */
export type Sampler = (parent: { readonly sampled: boolean } | undefined, traceId: string) => boolean;

/**
 * OpenTelemetry's trace-id ratio: the trace id's four 32-bit words XORed,
 * below `ratio` × 0xffffffff (every id at 1). The same trace id gets the same
 * decision in every process, and from OpenTelemetry's SDK.
 */
export function traceIdRatio(ratio: number): (traceId: string) => boolean {
  const r = Number.isNaN(ratio) ? 0 : Math.min(1, Math.max(0, ratio));
  const upperBound = r === 1 ? 0x100000000 : Math.floor(r * 0xffffffff);
  return (traceId) => {
    let accumulation = 0;
    for (let i = 0; i < 32; i += 8) accumulation = (accumulation ^ parseInt(traceId.slice(i, i + 8), 16)) >>> 0;
    return accumulation < upperBound;
  };
}

/**
 * The sampler `tracing.sampler` names, with OpenTelemetry's meanings: the
 * `parentbased_*` ones follow the parent's decision and use the named one
 * only for a root; the others decide alone, whatever the parent.
 */
export function buildSampler(config: Pick<TracingConfig, 'sampler' | 'sampler_arg'>): Sampler {
  const ratio = traceIdRatio(config.sampler_arg);
  const parentBased =
    (root: (traceId: string) => boolean): Sampler =>
    (parent, traceId) =>
      parent === undefined ? root(traceId) : parent.sampled;
  switch (config.sampler) {
    case 'always_on':
      return () => true;
    case 'always_off':
      return () => false;
    case 'traceidratio':
      return (_parent, traceId) => ratio(traceId);
    case 'parentbased_always_off':
      return parentBased(() => false);
    case 'parentbased_traceidratio':
      return parentBased(ratio);
    case 'parentbased_always_on':
      return parentBased(() => true);
  }
}

const TIME_ORIGIN_MS = performance.timeOrigin;

/** Milliseconds since the epoch with sub-microsecond steps: the monotonic clock from the process's time origin. */
export function nowMs(): number {
  return TIME_ORIGIN_MS + performance.now();
}
