/**
 * Runs one case: setup, warm-up, then A and B interleaved (A B A B ...) so
 * both see the same machine, then teardown, whatever happened. Produces the
 * case's result record; never throws.
 */
import { performance } from 'node:perf_hooks';
import type {
  BenchCase,
  BenchContext,
  BenchMode,
  BreakdownCase,
  GaugeCase,
  LatencyCase,
  LoadCase,
  LoadRound,
  RunPlan,
  StagedCall,
} from './bench-case.js';
import { isSkip } from './bench-case.js';
import type {
  BreakdownResult,
  CaseResult,
  GaugeResult,
  GaugeRow,
  LatencyResult,
  LoadResult,
  LoadSide,
  TargetResult,
} from './bench-result.js';
import type { Progress } from './progress.js';
import { median, pairedMedianDelta, ratio, summarize } from './stats.js';

const DEFAULT_PLANS: Readonly<Record<BenchCase['kind'], Readonly<Record<BenchMode, RunPlan>>>> = {
  latency: {
    smoke: { warmupPairs: 0, pairs: 2, minPairs: 2, budgetMs: 0 },
    quick: { warmupPairs: 20, pairs: 400, minPairs: 20, budgetMs: 5_000 },
    full: { warmupPairs: 100, pairs: 3000, minPairs: 300, budgetMs: 60_000 },
  },
  load: {
    smoke: { warmupPairs: 0, pairs: 1, minPairs: 1, budgetMs: 0 },
    quick: { warmupPairs: 0, pairs: 3, minPairs: 1, budgetMs: 6_000 },
    full: { warmupPairs: 1, pairs: 10, minPairs: 5, budgetMs: 90_000 },
  },
  gauge: {
    smoke: { warmupPairs: 0, pairs: 1, minPairs: 1, budgetMs: 0 },
    quick: { warmupPairs: 0, pairs: 1, minPairs: 1, budgetMs: 0 },
    full: { warmupPairs: 0, pairs: 1, minPairs: 1, budgetMs: 0 },
  },
  // Pairs are calls here: there is no baseline.
  breakdown: {
    smoke: { warmupPairs: 0, pairs: 3, minPairs: 3, budgetMs: 0 },
    quick: { warmupPairs: 20, pairs: 400, minPairs: 30, budgetMs: 5_000 },
    full: { warmupPairs: 100, pairs: 3000, minPairs: 300, budgetMs: 60_000 },
  },
};

/** The case's plan for `mode` over the defaults; `budgetCapMs` lowers the time budget (never the minimum pairs). */
export function planFor(c: BenchCase, mode: BenchMode, budgetCapMs = Number.POSITIVE_INFINITY): RunPlan {
  const plan = { ...DEFAULT_PLANS[c.kind][mode], ...c.plan?.[mode] };
  return { ...plan, minPairs: Math.min(plan.minPairs, plan.pairs), budgetMs: Math.min(plan.budgetMs, budgetCapMs) };
}

/**
 * The order in which runs happen: `warmupPairs` pairs, then pairs while
 * `pairs` is not reached and the budget lasts (at least `minPairs`).
 * A always runs first in a pair; pairs follow each other without a gap.
 */
async function interleave<T>(
  plan: RunPlan,
  runA: () => Promise<T>,
  runB: () => Promise<T>,
  onProgress: (fraction: number, phase: string) => void,
): Promise<{ a: T[]; b: T[] }> {
  const total = plan.warmupPairs + plan.pairs;
  for (let i = 0; i < plan.warmupPairs; i++) {
    await runA();
    await runB();
    onProgress((i + 1) / total, 'warm-up');
  }
  const a: T[] = [];
  const b: T[] = [];
  const startedMs = performance.now();
  for (let i = 0; i < plan.pairs; i++) {
    const spentMs = performance.now() - startedMs;
    if (i >= plan.minPairs && spentMs > plan.budgetMs) break;
    a.push(await runA());
    b.push(await runB());
    const byCount = (plan.warmupPairs + i + 1) / total;
    const byTime = plan.budgetMs > 0 && i + 1 >= plan.minPairs ? (performance.now() - startedMs) / plan.budgetMs : 0;
    onProgress(Math.max(byCount, byTime), `${i + 1} pairs`);
  }
  return { a, b };
}

type Timed = { readonly ms: number } | { readonly error: string };

async function timed(run: () => Promise<number | void>): Promise<Timed> {
  const t0 = performance.now();
  try {
    const reported = await run();
    const t1 = performance.now();
    return { ms: typeof reported === 'number' ? reported : t1 - t0 };
  } catch (err) {
    return { error: message(err) };
  }
}

/** More failed pairs than this (at least 3, else a tenth) and the case fails rather than report thin data. */
function tooManyFailures(failed: number, attempted: number): boolean {
  return failed > Math.max(3, attempted / 10);
}

/**
 * A failed run drops its whole pair (both halves, so pairs stay aligned) and
 * is counted; in smoke mode any failure fails the case.
 */
async function runLatency(
  c: LatencyCase,
  plan: RunPlan,
  mode: BenchMode,
  onProgress: (f: number, p: string) => void,
): Promise<LatencyResult> {
  const runs = await interleave(plan, () => timed(() => c.runA()), () => timed(() => c.runB()), onProgress);
  const a: number[] = [];
  const b: number[] = [];
  let failedPairs = 0;
  let firstError: string | undefined;
  runs.a.forEach((ra, i) => {
    const rb = runs.b[i]!;
    if ('ms' in ra && 'ms' in rb) {
      a.push(ra.ms);
      b.push(rb.ms);
      return;
    }
    failedPairs += 1;
    firstError ??= 'error' in ra ? `A: ${ra.error}` : 'error' in rb ? `B: ${rb.error}` : undefined;
  });
  if (failedPairs > 0 && (mode === 'smoke' || tooManyFailures(failedPairs, runs.a.length) || a.length === 0)) {
    throw new Error(`${failedPairs} of ${runs.a.length} pairs failed; first: ${firstError}`);
  }
  const sa = summarize(a);
  const sb = summarize(b);
  return {
    warmupPairs: plan.warmupPairs,
    pairs: a.length,
    failedPairs,
    ...(firstError !== undefined ? { firstError } : {}),
    a: sa,
    b: sb,
    ratioP50: ratio(sa.p50, sb.p50),
    ratioP90: ratio(sa.p90, sb.p90),
    ratioP99: ratio(sa.p99, sb.p99),
    pairedDeltaP50: pairedMedianDelta(a, b),
    samplesA: a,
    samplesB: b,
  };
}

function loadSide(rounds: readonly LoadRound[]): LoadSide {
  const samples = rounds.flatMap((r) => r.latenciesMs);
  const firstError = rounds.find((r) => r.firstError !== undefined)?.firstError;
  return {
    latency: summarize(samples),
    callsPerSec: median(rounds.map((r) => (r.latenciesMs.length * 1000) / r.elapsedMs)),
    errors: rounds.reduce((s, r) => s + r.errors, 0),
    ...(firstError !== undefined ? { firstError } : {}),
    rounds: rounds.map((r) => ({ calls: r.latenciesMs.length, errors: r.errors, elapsedMs: r.elapsedMs })),
    samples,
  };
}

async function runLoad(c: LoadCase, plan: RunPlan, onProgress: (f: number, p: string) => void): Promise<LoadResult> {
  const { a, b } = await interleave(plan, () => c.runA(), () => c.runB(), onProgress);
  const sa = loadSide(a);
  const sb = loadSide(b);
  return {
    concurrency: c.concurrency,
    warmupRounds: plan.warmupPairs,
    a: sa,
    b: sb,
    ratioP50: ratio(sa.latency.p50, sb.latency.p50),
    throughputRatio: ratio(sa.callsPerSec, sb.callsPerSec),
  };
}

async function runGauge(c: GaugeCase, plan: RunPlan, onProgress: (f: number, p: string) => void): Promise<GaugeResult> {
  const { a, b } = await interleave(plan, () => c.runA(), () => c.runB(), onProgress);
  const medianOf = (runs: readonly Readonly<Record<string, number>>[], key: string) =>
    median(runs.map((r) => r[key]).filter((v): v is number => typeof v === 'number'));
  const rows = c.gauges.map((g): GaugeRow => {
    const value = medianOf(a, g.key);
    if (g.baselineKey === undefined) return { key: g.key, unit: g.unit, value };
    const baselineValue = medianOf(b, g.baselineKey);
    return { key: g.key, unit: g.unit, value, baselineKey: g.baselineKey, baselineValue, ratio: ratio(value, baselineValue) };
  });
  return { rounds: a.length, rows };
}

/** Each stage's median and mean over the calls, and what the medians leave of the median total. */
export function summarizeBreakdown(stages: readonly string[], calls: readonly StagedCall[]): BreakdownResult {
  if (calls.length === 0) throw new Error('no call was measured');
  const mean = (values: readonly number[]) => values.reduce((s, v) => s + v, 0) / values.length;
  const rows = stages.map((stage, i) => {
    const values = calls.map((c) => {
      const v = c.stagesMs[i];
      if (v === undefined) throw new Error(`a call has no figure for stage "${stage}"`);
      return v;
    });
    return { stage, p50: median(values), mean: mean(values) };
  });
  const total = summarize(calls.map((c) => c.totalMs));
  return {
    calls: calls.length,
    stages: rows,
    total,
    unexplainedP50: total.p50 - rows.reduce((s, r) => s + r.p50, 0),
    unexplainedMean: total.mean - rows.reduce((s, r) => s + r.mean, 0),
  };
}

async function runBreakdown(c: BreakdownCase, plan: RunPlan): Promise<BreakdownResult> {
  return summarizeBreakdown(c.stages, await c.run(plan));
}

function message(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

export interface RunCaseOptions {
  readonly suite: string;
  readonly ctx: BenchContext;
  readonly progress: Progress;
  /** Upper bound on the case's measuring time, from the run's overall budget. */
  readonly budgetCapMs?: number;
}

export async function runCase(c: BenchCase, options: RunCaseOptions): Promise<CaseResult> {
  const { suite, ctx, progress } = options;
  const base = { suite, name: c.name, baselineName: c.baselineName, kind: c.kind };
  const startedMs = performance.now();
  const elapsed = () => performance.now() - startedMs;
  let result: CaseResult;
  try {
    const setup = await c.setup(ctx);
    if (isSkip(setup)) {
      result = { ...base, status: 'skipped', reason: setup.skip, durationMs: elapsed() };
    } else {
      const plan = planFor(c, ctx.mode, options.budgetCapMs);
      const onProgress = (f: number, p: string) => progress.update(f, p);
      progress.update(0, plan.warmupPairs > 0 ? 'warm-up' : 'running');
      switch (c.kind) {
        case 'latency':
          result = { ...base, status: 'ok', durationMs: 0, latency: await runLatency(c, plan, ctx.mode, onProgress) };
          break;
        case 'load': {
          const load = await runLoad(c, plan, onProgress);
          const errors = load.a.errors + load.b.errors;
          // In smoke mode a failing call means the harness or the server broke; elsewhere it is a measurement.
          const failed = ctx.mode === 'smoke' && errors > 0;
          result = {
            ...base,
            status: failed ? 'error' : 'ok',
            ...(failed ? { error: `${errors} calls failed; first: ${load.a.firstError ?? load.b.firstError}` } : {}),
            durationMs: 0,
            load,
          };
          break;
        }
        case 'gauge':
          result = { ...base, status: 'ok', durationMs: 0, gauge: await runGauge(c, plan, onProgress) };
          break;
        case 'breakdown':
          result = { ...base, status: 'ok', durationMs: 0, breakdown: await runBreakdown(c, plan) };
          break;
      }
    }
  } catch (err) {
    result = { ...base, status: 'error', error: message(err), durationMs: 0 };
  }
  try {
    progress.update(1, 'teardown');
    await c.teardown();
  } catch (err) {
    if (result.status !== 'error') result = { ...base, status: 'error', error: `teardown: ${message(err)}`, durationMs: 0 };
  }
  const targets = judgeTargets(c, result);
  return { ...result, durationMs: elapsed(), ...(targets !== undefined ? { targets } : {}) };
}

/** "docker backend not built yet" reads better in a target row as "needs the docker backend". */
function notMeasured(result: CaseResult): string {
  if (result.status === 'error') return `not measured (the case failed: ${result.error})`;
  const m = /^(\w+) backend not built yet$/.exec(result.reason ?? '');
  return `not measured yet (${m ? `needs the ${m[1]} backend` : result.reason})`;
}

function judgeTargets(c: BenchCase, result: CaseResult): TargetResult[] | undefined {
  return c.targets?.map((t): TargetResult => {
    if (result.status !== 'ok') return { target: t.target, measured: notMeasured(result), met: null };
    try {
      return { target: t.target, ...t.judge(result) };
    } catch (err) {
      return { target: t.target, measured: `cannot judge: ${message(err)}`, met: null };
    }
  });
}
