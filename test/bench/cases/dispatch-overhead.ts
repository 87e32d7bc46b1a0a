/**
 * The dispatcher's own cost per call: CallTool on a tool that does nothing,
 * against the cheapest unary call the same server answers (the standard
 * health Check) on the same channel. The difference is routing, argument
 * parsing and coercion, hooks, the per-call log line and result shaping.
 */
import type { BenchCase } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { NOOP_RESULT, NOOP_TOOL } from '../noop-tool.js';
import { formatMs } from '../stats.js';

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
  ];
}
