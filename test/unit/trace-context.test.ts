/**
 * W3C trace context from clients (strict: a malformed header is ignored and
 * the call starts a trace of its own), the samplers `tracing.sampler` names,
 * and the ids and OTLP encoding of Berth's own spans.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { decodeExportTraceRequest } from '../../services/cli/bench/otlp-receiver.js';
import { OTLP_SPAN_KIND, OTLP_STATUS, encodeTraceRequest, type EndedSpan } from '../../services/common/tracing/otlp-encoding.js';
import { IdSource, buildSampler, formatTraceparent, parseTraceparent, parseTracestate, traceIdRatio } from '../../services/common/tracing/trace-context.js';

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN = '00f067aa0ba902b7';

describe('traceparent from a client', () => {
  test('a well-formed header gives the parent, its sampled flag and the tracestate', () => {
    assert.deepEqual(parseTraceparent(`00-${TRACE}-${SPAN}-01`, 'vendor=client'), { traceId: TRACE, spanId: SPAN, sampled: true, traceState: 'vendor=client' });
    assert.equal(parseTraceparent(`00-${TRACE}-${SPAN}-00`)?.sampled, false);
    // Flags other than sampled are carried by later versions of the spec; only bit 0 counts.
    assert.equal(parseTraceparent(`00-${TRACE}-${SPAN}-03`)?.sampled, true);
  });

  test('malformed headers are ignored (the call then starts a new trace)', () => {
    const malformed = [
      '',
      'garbage',
      `00-${TRACE}-${SPAN}`, // no flags
      `00-${TRACE}-${SPAN}-01-extra`, // version 00 has exactly four fields
      `ff-${TRACE}-${SPAN}-01`, // version ff is invalid
      `00-${'0'.repeat(32)}-${SPAN}-01`, // all-zero trace id
      `00-${TRACE}-${'0'.repeat(16)}-01`, // all-zero parent id
      `00-${TRACE.toUpperCase()}-${SPAN}-01`, // upper-case hex
      `00-${TRACE.slice(1)}x-${SPAN}-01`,
      `00-${TRACE}-${SPAN}-0g`,
      `00_${TRACE}_${SPAN}_01`,
      ` 00-${TRACE}-${SPAN}-01`,
      `0x-${TRACE}-${SPAN}-01`,
      `01-${TRACE}-${SPAN}-01x`, // a later version's extra fields start with '-'
      `00-${TRACE}-${SPAN}-01${'-'.repeat(600)}`,
    ];
    for (const header of malformed) assert.equal(parseTraceparent(header, 'vendor=client'), undefined, JSON.stringify(header));
    assert.equal(parseTraceparent(undefined), undefined);
  });

  test('a later version is read for its first four fields', () => {
    assert.deepEqual(parseTraceparent(`01-${TRACE}-${SPAN}-01-what-comes-next`), { traceId: TRACE, spanId: SPAN, sampled: true, traceState: '' });
  });

  test('tracestate keeps its well-formed members, at most 32, and nothing over 512 characters', () => {
    assert.equal(parseTracestate('rojo=00f067aa0ba902b7, congo=t61rcWkgMzE'), 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE');
    assert.equal(parseTracestate('tenant@vendor=x,Bad=1,=x,novalue=,ok=1,sp ace=2'), 'tenant@vendor=x,ok=1');
    assert.equal(parseTracestate(Array.from({ length: 40 }, (_, i) => `k${i}=v`).join(',')).split(',').length, 32);
    assert.equal(parseTracestate(`k=${'v'.repeat(600)}`), '');
    assert.equal(parseTracestate(undefined), '');
  });

  test('what Berth sends on is version 00 with the sampled flag', () => {
    assert.equal(formatTraceparent(TRACE, SPAN, true), `00-${TRACE}-${SPAN}-01`);
    assert.equal(formatTraceparent(TRACE, SPAN, false), `00-${TRACE}-${SPAN}-00`);
    assert.deepEqual(parseTraceparent(formatTraceparent(TRACE, SPAN, false)), { traceId: TRACE, spanId: SPAN, sampled: false, traceState: '' });
  });
});

describe('samplers', () => {
  const sampled = { sampled: true };
  const unsampled = { sampled: false };
  const decide = (sampler: string, arg: number, parent: { sampled: boolean } | undefined, traceId = TRACE) =>
    buildSampler({ sampler: sampler as 'always_on', sampler_arg: arg })(parent, traceId);

  test('always_on and always_off decide alone, whatever the parent', () => {
    for (const parent of [undefined, sampled, unsampled]) {
      assert.equal(decide('always_on', 1, parent), true);
      assert.equal(decide('always_off', 1, parent), false);
    }
  });

  test('parentbased_* follow the parent, and use their own rule only for a root', () => {
    for (const root of ['parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio']) {
      assert.equal(decide(root, 0, sampled), true, root);
      assert.equal(decide(root, 1, unsampled), false, root);
    }
    assert.equal(decide('parentbased_always_on', 1, undefined), true);
    assert.equal(decide('parentbased_always_off', 1, undefined), false);
    assert.equal(decide('parentbased_traceidratio', 1, undefined), true);
    assert.equal(decide('parentbased_traceidratio', 0, undefined), false);
  });

  test("traceidratio is OpenTelemetry's: the trace id's 32-bit words XORed, below ratio × 0xffffffff", () => {
    // The first word XORed with three zero words is itself; at 0.5 the bound is floor(0x7fffffff.8) = 0x7fffffff.
    const low = `00000001${'0'.repeat(24)}`;
    const high = `ffffffff${'0'.repeat(24)}`;
    assert.equal(traceIdRatio(0.5)(low), true);
    assert.equal(traceIdRatio(0.5)(`7ffffffe${'0'.repeat(24)}`), true);
    assert.equal(traceIdRatio(0.5)(`7fffffff${'0'.repeat(24)}`), false);
    assert.equal(traceIdRatio(0.5)(`7ffffffe${'0'.repeat(16)}00000001`), false, 'every word counts: 7ffffffe ^ 1');
    assert.equal(traceIdRatio(0.5)(high), false);
    assert.equal(traceIdRatio(1)(high), true, 'a ratio of 1 samples every trace');
    assert.equal(traceIdRatio(0)(low), false);
    // A parent's trace id decides for its children too (traceidratio ignores the parent's flag).
    assert.equal(decide('traceidratio', 0.5, unsampled, low), true);
    assert.equal(decide('traceidratio', 0.5, sampled, high), false);
  });

  test('traceidratio samples about its ratio of random traces', () => {
    const ids = new IdSource();
    const sample = traceIdRatio(0.25);
    let kept = 0;
    for (let i = 0; i < 20_000; i++) if (sample(ids.traceId())) kept += 1;
    assert.ok(kept > 4000 && kept < 6000, `${kept} of 20000 kept at 0.25`);
  });
});

describe('span ids and encoding', () => {
  test('ids are lower-case hex of the right length, and differ', () => {
    const ids = new IdSource();
    const seen = new Set<string>();
    for (let i = 0; i < 1000; i++) {
      const t = ids.traceId();
      const s = ids.spanId();
      assert.match(t, /^[0-9a-f]{32}$/);
      assert.match(s, /^[0-9a-f]{16}$/);
      seen.add(t).add(s);
    }
    assert.equal(seen.size, 2000);
  });

  test('an encoded request decodes to the spans, attributes (a key set again wins), status and resource', () => {
    const span: EndedSpan = {
      traceId: TRACE,
      spanId: SPAN,
      parentSpanId: 'b7ad6b7169203331',
      parentRemote: true,
      traceState: 'vendor=client',
      name: 'execute_tool terminal',
      kind: OTLP_SPAN_KIND.server,
      startMs: 1_764_000_000_000.25,
      endMs: 1_764_000_000_001.5,
      attributes: ['gen_ai.tool.name', 'terminal', 'process.exit.code', 3, 'berth.timed_out', false, 'ratio', 0.5, 'berth.outcome', 'x', 'berth.outcome', 'success'],
      statusCode: OTLP_STATUS.error,
      statusMessage: 'CANCELLED',
    };
    const root: EndedSpan = { ...span, spanId: 'b7ad6b7169203331', parentSpanId: '', parentRemote: false, traceState: '', attributes: [], statusCode: OTLP_STATUS.unset, statusMessage: '' };
    const [a, b] = decodeExportTraceRequest(encodeTraceRequest({ 'service.name': 'berth', 'deployment.environment': 'prod' }, 'berth', [span, root]));
    assert.equal(a!.traceId, TRACE);
    assert.equal(a!.spanId, SPAN);
    assert.equal(a!.parentSpanId, 'b7ad6b7169203331');
    assert.equal(a!.traceState, 'vendor=client');
    assert.equal(a!.name, 'execute_tool terminal');
    assert.equal(a!.kind, OTLP_SPAN_KIND.server);
    assert.equal(a!.endTimeUnixNano - a!.startTimeUnixNano, 1_250_000n, 'times keep their microseconds');
    assert.deepEqual(a!.attributes, { 'gen_ai.tool.name': 'terminal', 'process.exit.code': 3, 'berth.timed_out': false, ratio: 0.5, 'berth.outcome': 'success' });
    assert.deepEqual(a!.status, { code: OTLP_STATUS.error, message: 'CANCELLED' });
    assert.deepEqual(a!.resource, { 'service.name': 'berth', 'deployment.environment': 'prod' });
    assert.equal(b!.parentSpanId, '');
    assert.deepEqual(b!.status, { code: OTLP_STATUS.unset, message: '' });
  });
});
