/**
 * Where a warm `terminal true` call's time goes, stage by stage, on the
 * docker backend and the local one. Nothing is compared with a baseline:
 * each call is split into stages that add up to its client-side total.
 *
 * The server runs with tracing on (every call sampled, spans exported every
 * 100 ms to an OTLP receiver this process runs on loopback) and with the
 * shell-state runner's timing log on (each command's script appends bash's
 * `$EPOCHREALTIME` at four points to a file in the task's state dir; off in
 * production, and the output is the same either way). Per call:
 *
 *   client total (this process)  ⊃  `execute_tool terminal` (dispatcher)
 *     ⊃  `berth.v1.Executor/Exec` (executor, in process)  ⊃  `BACKEND exec` (the backend operation)
 *       ⊃  the script in the sandbox: restore the shell state, the command, capture the state
 *
 * Each stage is a difference of two times taken on one clock: span times
 * (one server process), the script's stamps (bash in the sandbox), the total
 * (this process). Tracing itself adds a little to the dispatcher's and the
 * executor's stages (dispatch-overhead measures how much).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { BackendName } from '../../../common/config.js';
import { SANDBOX_STATE_DIR } from '../../../executor/backends/docker/docker-environment.js';
import { SHELL_TIMING_FILE } from '../../../executor/shell-state/shell-state-runner.js';
import type { BenchCase, BreakdownCase, RunPlan, StagedCall } from '../bench-case.js';
import type { BenchServer, BenchServerOptions } from '../bench-server-process.js';
import { checkTerminalResult, unmeasured } from '../case-helpers.js';
import { DOCKER_SERVER } from '../docker-helpers.js';
import { SPAN_KIND, startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../otlp-receiver.js';

const COMMAND = 'true';

/**
 * The stages of one call, in order; their sum is the client-side total.
 * `roundTrip` names what the backend operation does besides the script.
 * The before/after splits subtract span start times, which Berth's tracer
 * takes from the monotonic clock with sub-microsecond steps, so each call's
 * split is exact (the OpenTelemetry SDK it replaced took them from
 * Date.now(), whole milliseconds, and each split was off by up to 1 ms).
 */
export function stagesFor(roundTrip: string): string[] {
  return [
    'client and gRPC: the client total less the dispatcher span',
    'dispatcher, before the executor call',
    'executor, before the backend operation',
    `${roundTrip}: the backend operation less the script`,
    'shell state: restore the snapshot and cwd',
    `the command (\`${COMMAND}\`)`,
    'shell state: capture it and print the cwd marker',
    'executor, after the backend operation: result shaping',
    'dispatcher, after the executor call: result shaping',
  ];
}

/** The four stamps of one command's script, seconds (bash's `$EPOCHREALTIME`). */
export interface ScriptStamps {
  readonly begun: number;
  readonly restored: number;
  readonly commandEnded: number;
  readonly captured: number;
}

/** Lines of the timing log (`T0 T1 T2 T3`); a line that is not four numbers (an `exit` mid-command) is skipped. */
export function parseTimingLog(text: string): ScriptStamps[] {
  return text.split('\n').flatMap((line) => {
    const fields = line.trim().split(/\s+/).map(Number);
    if (fields.length !== 4 || fields.some((f) => !Number.isFinite(f) || f <= 0)) return [];
    const [begun, restored, commandEnded, captured] = fields as [number, number, number, number];
    return [{ begun, restored, commandEnded, captured }];
  });
}

/** The spans of one tool call: the dispatcher's, the executor's Exec in it, the backend's exec in that. */
export interface CallSpans {
  readonly tool: ReceivedSpan;
  readonly exec: ReceivedSpan;
  readonly operation: ReceivedSpan;
}

/** Milliseconds between two span times. */
export const ms = (from: bigint, to: bigint) => Number(to - from) / 1e6;

/** Each span's children, by the parent's span id. */
export function spanChildren(spans: readonly ReceivedSpan[]): Map<string, ReceivedSpan[]> {
  const children = new Map<string, ReceivedSpan[]>();
  for (const s of spans) {
    const list = children.get(s.parentSpanId) ?? [];
    list.push(s);
    children.set(s.parentSpanId, list);
  }
  return children;
}

/**
 * A bench server's options with tracing on: every call sampled, spans
 * (with task ids) exported every 100 ms to `receiver`, so they are in soon
 * after the last call.
 */
export function tracedServer(receiver: OtlpReceiver, options: BenchServerOptions): BenchServerOptions {
  const tracing = { exporter: 'otlp', endpoint: `${receiver.endpoint}/v1/traces`, sampler: 'always_on', task_ids: true };
  return { ...options, config: { ...options.config, tracing }, env: { ...options.env, OTEL_BSP_SCHEDULE_DELAY: '100' } };
}

/** Splits one call into the stages of {@link stagesFor}: every stage a difference on one clock, adding up to `totalMs`. */
export function stagesOf(totalMs: number, spans: CallSpans, stamps: ScriptStamps): StagedCall {
  const { tool, exec, operation } = spans;
  const scriptMs = (stamps.captured - stamps.begun) * 1000;
  const stagesMs = [
    totalMs - ms(tool.startTimeUnixNano, tool.endTimeUnixNano),
    ms(tool.startTimeUnixNano, exec.startTimeUnixNano),
    ms(exec.startTimeUnixNano, operation.startTimeUnixNano),
    ms(operation.startTimeUnixNano, operation.endTimeUnixNano) - scriptMs,
    (stamps.restored - stamps.begun) * 1000,
    (stamps.commandEnded - stamps.restored) * 1000,
    (stamps.captured - stamps.commandEnded) * 1000,
    ms(operation.endTimeUnixNano, exec.endTimeUnixNano),
    ms(exec.endTimeUnixNano, tool.endTimeUnixNano),
  ];
  return { totalMs, stagesMs };
}

/**
 * The task's tool calls, in the order they started, each with its Exec and
 * backend exec spans; undefined for a call whose spans are not all in yet or
 * that did more than one exec (the first, which made the environment).
 */
export function callSpans(spans: readonly ReceivedSpan[], taskId: string, backend: string): (CallSpans | undefined)[] {
  const children = spanChildren(spans);
  const only = (parent: ReceivedSpan, match: (s: ReceivedSpan) => boolean) => {
    const found = (children.get(parent.spanId) ?? []).filter(match);
    return found.length === 1 ? found[0] : undefined;
  };
  return spans
    .filter((s) => s.name === 'execute_tool terminal' && s.kind === SPAN_KIND.server && s.attributes['berth.task.id'] === taskId)
    .sort((a, b) => (a.startTimeUnixNano < b.startTimeUnixNano ? -1 : 1))
    .map((tool) => {
      const exec = only(tool, (s) => s.name === 'berth.v1.Executor/Exec' && s.kind === SPAN_KIND.server);
      const operation = exec && only(exec, (s) => s.name === `${backend} exec`);
      return exec && operation ? { tool, exec, operation } : undefined;
    });
}

interface Target {
  readonly backend: BackendName;
  readonly name: string;
  readonly task: string;
  readonly server: BenchServerOptions;
  /** What the backend operation does besides running the script. */
  readonly roundTrip: string;
  /** The last `lines` lines of the task's timing log. */
  readTimingLog(server: BenchServer, task: string, lines: number): Promise<string>;
}

/** Lines of the log read per terminal call: well inside a result's output cap. */
const LOG_PAGE_LINES = 400;

/**
 * Through the terminal tool itself, a page at a time; each reading call's own
 * line is appended after its output was taken, so the pages count back from
 * where the log ended when reading began.
 */
async function timingLogInContainer(server: BenchServer, task: string, lines: number): Promise<string> {
  const log = `${SANDBOX_STATE_DIR}/${SHELL_TIMING_FILE}`;
  const read = async (command: string) => checkTerminalResult(await server.call('terminal', { command }, task)).output;
  const count = Number((await read(`wc -l < ${log}`)).trim());
  const first = Math.max(1, count - lines + 1);
  const pages: string[] = [];
  for (let from = first; from <= count; from += LOG_PAGE_LINES) {
    pages.push((await read(`sed -n '${from},${Math.min(count, from + LOG_PAGE_LINES - 1)}p' ${log}`)).trimEnd());
  }
  return pages.join('\n');
}

/** The local backend's state dirs lie under the bench server's scratch directory (its log's). */
async function timingLogOnHost(server: BenchServer, _task: string, lines: number): Promise<string> {
  const scratch = dirname(server.logPath);
  const found = readdirSync(scratch, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith(SHELL_TIMING_FILE));
  if (found.length !== 1) throw new Error(`expected one ${SHELL_TIMING_FILE} under ${scratch}, found ${found.length}`);
  return Promise.resolve(readFileSync(join(scratch, found[0]!), 'utf8').trimEnd().split('\n').slice(-lines).join('\n'));
}

const TARGETS: readonly Target[] = [
  {
    backend: 'docker',
    name: `terminal \`${COMMAND}\`, docker backend, warm task: per stage`,
    task: 'bench-breakdown-docker',
    server: DOCKER_SERVER,
    roundTrip: "exec agent round trip (spawn frame to exit frame, the agent's pre-started bash)",
    readTimingLog: timingLogInContainer,
  },
  {
    backend: 'local',
    name: `terminal \`${COMMAND}\`, local backend, warm task: per stage`,
    task: 'bench-breakdown-local',
    server: { backend: 'local' },
    roundTrip: 'starting `bash -c` and seeing it exit',
    readTimingLog: timingLogOnHost,
  },
];

function breakdownCase(target: Target): BreakdownCase {
  let receiver: OtlpReceiver | undefined;
  let server: BenchServer | undefined;
  const call = async (): Promise<number> => {
    const t0 = performance.now();
    const result = await server!.call('terminal', { command: COMMAND }, target.task);
    const totalMs = performance.now() - t0;
    checkTerminalResult(result);
    return totalMs;
  };
  return {
    kind: 'breakdown',
    name: target.name,
    baselineName: 'client total (CallTool round trip)',
    stages: stagesFor(target.roundTrip),
    plan: { quick: { pairs: 400, budgetMs: 8_000 } },
    async setup(ctx) {
      const missing = await ctx.backendMissing(target.backend);
      if (missing !== undefined) return { skip: missing };
      receiver = await startOtlpReceiver();
      const s = await ctx.server({ ...tracedServer(receiver, target.server), shellTiming: true });
      server = s;
      // The first call makes the task's environment; every measured call finds it warm.
      await unmeasured(ctx, `warming the ${target.backend} task`, () => call());
      return undefined;
    },
    async run(plan: RunPlan): Promise<StagedCall[]> {
      for (let i = 0; i < plan.warmupPairs; i++) await call();
      const totals: number[] = [];
      const startedMs = performance.now();
      while (totals.length < plan.pairs && (totals.length < plan.minPairs || performance.now() - startedMs <= plan.budgetMs)) {
        totals.push(await call());
      }
      // The set-up call, the warm-up and the measured calls, the measured ones last.
      const made = 1 + plan.warmupPairs + totals.length;
      const received = await receiver!.waitFor(`the spans of ${made} terminal calls`, (spans) => {
        const calls = callSpans(spans, target.task, target.backend);
        return calls.length >= made && calls.slice(-totals.length).every((c) => c !== undefined);
      });
      const spans = callSpans(received, target.task, target.backend).slice(-totals.length) as CallSpans[];
      const stamps = parseTimingLog(await target.readTimingLog(server!, target.task, totals.length));
      if (stamps.length < totals.length) {
        throw new Error(`the timing log has ${stamps.length} lines for ${totals.length} calls`);
      }
      // The log ends with the measured calls (the reading call's own line comes after its output).
      const measured = stamps.slice(-totals.length);
      return totals.map((totalMs, i) => stagesOf(totalMs, spans[i]!, measured[i]!));
    },
    async teardown() {
      await server?.endTask(target.task).catch(() => undefined);
      // The server's exporter logs its failures to reach it from now on; nothing fails.
      await receiver?.close();
    },
  };
}

export default function cases(): BenchCase[] {
  return TARGETS.map(breakdownCase);
}
