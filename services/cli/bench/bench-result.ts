/** What a case's run produced: the records the reports are written from. */
import type { Summary } from './stats.js';

/** A target judged: `met` is null when the case did not run, and `measured` says why. */
export interface TargetResult {
  readonly target: string;
  readonly measured: string;
  readonly met: boolean | null;
}

export interface LatencyResult {
  readonly warmupPairs: number;
  /** Pairs measured (failed ones excluded). */
  readonly pairs: number;
  /** Pairs dropped because A or B failed; a few are tolerated outside smoke mode. */
  readonly failedPairs: number;
  readonly firstError?: string;
  readonly a: Summary;
  readonly b: Summary;
  /** p50(A) / p50(B), and the same for p90 and p99. */
  readonly ratioP50: number;
  readonly ratioP90: number;
  readonly ratioP99: number;
  /** Median of per-pair differences A - B, ms. */
  readonly pairedDeltaP50: number;
  readonly samplesA: readonly number[];
  readonly samplesB: readonly number[];
}

export interface LoadSide {
  readonly latency: Summary;
  /** Median over rounds of successful calls per second. */
  readonly callsPerSec: number;
  readonly errors: number;
  readonly firstError?: string;
  readonly rounds: readonly { readonly calls: number; readonly errors: number; readonly elapsedMs: number }[];
  readonly samples: readonly number[];
}

export interface LoadResult {
  readonly concurrency: number;
  readonly warmupRounds: number;
  readonly a: LoadSide;
  readonly b: LoadSide;
  readonly ratioP50: number;
  /** callsPerSec(A) / callsPerSec(B). */
  readonly throughputRatio: number;
}

export interface GaugeRow {
  readonly key: string;
  readonly unit: string;
  readonly value: number;
  readonly baselineKey?: string;
  readonly baselineValue?: number;
  readonly ratio?: number;
}

export interface GaugeResult {
  readonly rounds: number;
  readonly rows: readonly GaugeRow[];
}

/** One stage of a breakdown: its median and mean over the calls, ms. */
export interface BreakdownStage {
  readonly stage: string;
  readonly p50: number;
  readonly mean: number;
}

export interface BreakdownResult {
  readonly calls: number;
  readonly stages: readonly BreakdownStage[];
  /** The calls' own totals (client side). */
  readonly total: Summary;
  /**
   * Total p50 less the sum of the stages' p50s: medians do not add up, so
   * this is what they leave unexplained (the means add up to the mean total,
   * each call's stages to its total).
   */
  readonly unexplainedP50: number;
  /** Total mean less the sum of the stages' means (rounding only, unless a stage was lost). */
  readonly unexplainedMean: number;
}

export interface CaseResult {
  readonly suite: string;
  readonly name: string;
  readonly baselineName: string;
  readonly kind: 'latency' | 'load' | 'gauge' | 'breakdown';
  readonly status: 'ok' | 'skipped' | 'error';
  /** Why it was skipped. */
  readonly reason?: string;
  /** Why it failed. */
  readonly error?: string;
  readonly durationMs: number;
  readonly latency?: LatencyResult;
  readonly load?: LoadResult;
  readonly gauge?: GaugeResult;
  readonly breakdown?: BreakdownResult;
  /** The case's targets, judged against this result. */
  readonly targets?: readonly TargetResult[];
}
