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
import { processCpuMs } from '../listening-child.js';
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

/** Calls each server of the tracing case makes before its CPU time is read (not counted). */
const CPU_WARMUP_CALLS = 1000;

/** One side's server: its calls counted and its CPU time read around them. */
class CpuPerCall {
  #calls = 0;
  #startMs: number | undefined;
  constructor(readonly server: BenchServer) {}
  start(): void {
    this.#calls = 0;
    this.#startMs = processCpuMs(this.server.pid);
  }
  counted(): void {
    this.#calls++;
  }
  /** Server CPU per call since start(), in ms. */
  perCallMs(): number | undefined {
    const now = processCpuMs(this.server.pid);
    if (now === undefined || this.#startMs === undefined || this.#calls === 0) return undefined;
    return (now - this.#startMs) / this.#calls;
  }
}

function tracingCase(): BenchCase {
  let receiver: OtlpReceiver | undefined;
  let traced: CpuPerCall | undefined;
  let plain: CpuPerCall | undefined;
  /** Server CPU per call, traced and plain (ms), read at teardown. */
  let cpu: { traced: number; plain: number } | undefined;
  let note: (message: string) => void = () => undefined;
  const callNoop = async (side: CpuPerCall | undefined) => {
    const result = await side!.server.call(NOOP_TOOL, {}, 'bench-dispatch');
    if (result !== NOOP_RESULT) throw new Error(`${NOOP_TOOL} returned ${result}`);
    side!.counted();
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
      {
        // CPU time is what tracing takes from the server whatever else the machine runs; latency on a busy one is mostly waiting.
        target: "tracing on adds ≤ 0.1 ms of the server's CPU time per call",
        judge: () => {
          if (!cpu) return { measured: 'not measured (no /proc here)', met: false };
          const added = cpu.traced - cpu.plain;
          return { measured: `${formatMs(added)} (${formatMs(cpu.traced)} vs ${formatMs(cpu.plain)} per call)`, met: added <= 0.1 };
        },
      },
    ],
    async setup(ctx) {
      note = (message) => ctx.note(message);
      receiver = await startOtlpReceiver({ decode: false });
      traced = new CpuPerCall(
        await ctx.server({
          config: { tracing: { exporter: 'otlp', endpoint: `${receiver.endpoint}/v1/traces`, sampler: 'always_on' } },
        }),
      );
      // A plain server of its own (tracing off said explicitly: the shared default server has served the
      // first case's calls), so both sides start alike and get the same warm-up here. With the shared one,
      // two plain servers measured ~200 µs apart per call: the newer one's JIT and heap were still settling.
      plain = new CpuPerCall(await ctx.server({ config: { tracing: { exporter: 'none' } } }));
      for (let i = 0; i < (ctx.mode === 'smoke' ? 1 : CPU_WARMUP_CALLS); i++) {
        await callNoop(traced);
        await callNoop(plain);
      }
      traced.start();
      plain.start();
    },
    runA: () => callNoop(traced),
    runB: () => callNoop(plain),
    async teardown() {
      const [a, b] = [traced?.perCallMs(), plain?.perCallMs()];
      cpu = a !== undefined && b !== undefined ? { traced: a, plain: b } : undefined;
      // The batch processor exports every 5 s: a quick run sees a few exports, which shows spans were sent.
      note(`OTLP receiver: ${receiver?.requests() ?? 0} export requests`);
      if (cpu) note(`server CPU per call: ${formatMs(cpu.traced)} traced, ${formatMs(cpu.plain)} plain`);
      await receiver?.close();
    },
  };
}
