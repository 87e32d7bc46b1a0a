/**
 * The dispatcher's own cost per call: CallTool on a tool that does nothing,
 * against the cheapest unary call the same server answers (the standard
 * health Check) on the same channel. The difference is routing, argument
 * parsing and coercion, hooks, the per-call log line and result shaping.
 *
 * Then what tracing adds to that: the same call on a server with tracing on
 * (every call sampled, spans exported over OTLP/protobuf to a receiver this
 * process runs on loopback) against a server with tracing off.
 */
import type { BenchCase } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { NOOP_RESULT, NOOP_TOOL } from '../noop-tool.js';
import { formatMs } from '../stats.js';
import { startOtlpReceiver, type OtlpReceiver } from '../otlp-receiver.js';

export default function cases(): BenchCase[] {
  let server: BenchServer | undefined;
  const callNoop = async () => {
    const result = await server!.call(NOOP_TOOL, {}, 'bench-dispatch');
    if (result !== NOOP_RESULT) throw new Error(`${NOOP_TOOL} returned ${result}`);
  };
  return [
    {
      kind: 'latency',
      name: 'CallTool of a no-op tool',
      baselineName: 'gRPC health Check, same channel',
      plan: { quick: { pairs: 1500, budgetMs: 5_000 } },
      targets: [
        {
          target: 'dispatch overhead over a bare gRPC call: p50 ≤ 0.5 ms',
          judge: (r) => {
            const delta = r.latency!.pairedDeltaP50;
            return { measured: `${formatMs(delta)} (paired Δ p50)`, met: delta <= 0.5 };
          },
        },
      ],
      async setup(ctx) {
        server = await ctx.server();
        await callNoop();
      },
      runA: callNoop,
      async runB() {
        await server!.health.check({ service: '' });
      },
      async teardown() {},
    },
    tracingCase(),
  ];
}

function tracingCase(): BenchCase {
  let receiver: OtlpReceiver | undefined;
  let traced: BenchServer | undefined;
  let plain: BenchServer | undefined;
  let note: (message: string) => void = () => undefined;
  const callNoop = async (server: BenchServer | undefined) => {
    const result = await server!.call(NOOP_TOOL, {}, 'bench-dispatch');
    if (result !== NOOP_RESULT) throw new Error(`${NOOP_TOOL} returned ${result}`);
  };
  return {
    kind: 'latency',
    name: 'CallTool of a no-op tool, tracing on (OTLP to a local receiver)',
    baselineName: 'the same, tracing off',
    plan: { quick: { pairs: 1500, budgetMs: 5_000 } },
    targets: [
      {
        target: 'tracing on adds p50 ≤ 0.1 ms per call',
        judge: (r) => {
          const delta = r.latency!.pairedDeltaP50;
          return { measured: `${formatMs(delta)} (paired Δ p50)`, met: delta <= 0.1 };
        },
      },
    ],
    async setup(ctx) {
      note = (message) => ctx.note(message);
      receiver = await startOtlpReceiver({ decode: false });
      traced = await ctx.server({
        config: { tracing: { exporter: 'otlp', endpoint: `${receiver.endpoint}/v1/traces`, sampler: 'always_on' } },
      });
      plain = await ctx.server();
      await callNoop(traced);
      await callNoop(plain);
    },
    runA: () => callNoop(traced),
    runB: () => callNoop(plain),
    async teardown() {
      // The batch processor exports every 5 s: a quick run sees a few exports, which shows spans were sent.
      note(`OTLP receiver: ${receiver?.requests() ?? 0} export requests`);
      await receiver?.close();
    },
  };
}
