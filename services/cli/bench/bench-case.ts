/**
 * What a benchmark case is. A case measures one thing (A) beside its
 * baseline (B) in the same run, interleaved A B A B ..., so that the noise of
 * a shared machine hits both alike and the ratio means something even when
 * the absolute times do not.
 *
 * To add a case, add a file under `services/cli/bench/cases/` whose default export is
 * a function of the mode returning one or more cases. The file's name (without `.ts`) is
 * the suite name `berth bench --only NAME` selects.
 */
import type { BackendName } from '../../common/config.js';
import type { CaseResult } from './bench-result.js';
import type { BenchServer, BenchServerOptions } from './bench-server-process.js';

/** smoke: a few runs, only errors matter; quick: under two minutes; full: tighter percentiles. */
export type BenchMode = 'smoke' | 'quick' | 'full';

/** How many interleaved pairs to run: stop at `pairs`, or once `budgetMs` is spent after at least `minPairs`. */
export interface RunPlan {
  readonly warmupPairs: number;
  readonly pairs: number;
  readonly minPairs: number;
  readonly budgetMs: number;
}

/** Returned by `setup` when the case cannot run here; the reason is printed and recorded. */
export interface Skip {
  readonly skip: string;
}

/** Shared resources a case may use; everything is started lazily and stopped by the runner. */
export interface BenchContext {
  readonly mode: BenchMode;
  /** The repository checkout (source tree, not dist/). */
  readonly repoRoot: string;
  /** A bench server (dispatcher + in-process executor, as a child process), one per distinct options. */
  server(options?: BenchServerOptions): Promise<BenchServer>;
  /** Runs scripts/ensure-docker.sh once; resolves to a reason when Docker cannot be used. */
  dockerUnavailable(): Promise<string | undefined>;
  /**
   * Resolves to a reason when the backend is not built into this version
   * (its folder is absent or createBackend refuses the name), or when it needs
   * Docker and Docker is unavailable; undefined when it is there.
   */
  backendMissing(name: BackendName): Promise<string | undefined>;
  /** A line for the person watching (shown above the progress bar). */
  note(message: string): void;
  /** Picks the value for the current mode. */
  scaled<T>(values: Readonly<Record<BenchMode, T>>): T;
}

/**
 * A performance goal, judged against the case's result and reported beside
 * it. Never a test: nothing fails on a missed target.
 */
export interface Target {
  /** What is aimed at, e.g. "terminal on a warm docker task: p50 ≤ 5 ms". */
  readonly target: string;
  /** Called only when the case ran; `measured` is the figure the target is about, as text. */
  judge(result: CaseResult): { readonly measured: string; readonly met: boolean };
}

interface CaseBase {
  /** What is measured, e.g. "terminal `true`, local backend". */
  readonly name: string;
  /** What it is measured against, e.g. "spawn bash -c true". */
  readonly baselineName: string;
  /** Goals this case measures; shown as "not measured yet" while the case is skipped. */
  readonly targets?: readonly Target[];
  /** Plans per mode; the runner's defaults for the case's kind fill the gaps. */
  readonly plan?: Partial<Readonly<Record<BenchMode, Partial<RunPlan>>>>;
  setup(ctx: BenchContext): Promise<void | Skip>;
  teardown(): Promise<void>;
}

/**
 * One operation per run, timed by the runner around the call. A run may
 * return a number to report its own duration in milliseconds instead (to
 * leave untimed clean-up out of the sample). A throw fails the case.
 */
export interface LatencyCase extends CaseBase {
  readonly kind: 'latency';
  runA(): Promise<number | void>;
  runB(): Promise<number | void>;
}

/** One round of many calls (concurrent or in a script), measured by the case itself. */
export interface LoadRound {
  /** Latency of every call in the round, milliseconds. */
  readonly latenciesMs: readonly number[];
  /** Wall time of the whole round, milliseconds. */
  readonly elapsedMs: number;
  /** Calls that failed; they are not in `latenciesMs`. */
  readonly errors: number;
  /** First failure's message, for the report. */
  readonly firstError?: string;
}

/** Rounds of load; the report gives pooled latency percentiles and calls per second per round. */
export interface LoadCase extends CaseBase {
  readonly kind: 'load';
  /** Concurrency shown in the report (tasks running at once). */
  readonly concurrency: number;
  runA(): Promise<LoadRound>;
  runB(): Promise<LoadRound>;
}

/** A named measurement of a gauge case, and which baseline measurement it is compared with. */
export interface GaugeSpec {
  readonly key: string;
  readonly unit: string;
  /** Key in runB's result to divide by; absent: no ratio (e.g. per-task figures). */
  readonly baselineKey?: string;
}

/** Levels rather than latencies (memory); each run returns named values, the report gives medians. */
export interface GaugeCase extends CaseBase {
  readonly kind: 'gauge';
  readonly gauges: readonly GaugeSpec[];
  runA(): Promise<Readonly<Record<string, number>>>;
  runB(): Promise<Readonly<Record<string, number>>>;
}

/** One call split into stages: each stage's duration in ms, in the case's `stages` order, adding up to `totalMs`. */
export interface StagedCall {
  readonly totalMs: number;
  readonly stagesMs: readonly number[];
}

/**
 * Where one operation's time goes: the case runs its calls (the plan's
 * `warmupPairs` unmeasured, then up to `pairs`, at least `minPairs`, while
 * `budgetMs` lasts) and splits each into stages; the report gives each
 * stage's median and mean, and what the medians leave unexplained.
 * Nothing is compared with a baseline: `baselineName` says what the stages add up to.
 */
export interface BreakdownCase extends CaseBase {
  readonly kind: 'breakdown';
  /** The stages' names, in the order of `StagedCall.stagesMs`. */
  readonly stages: readonly string[];
  run(plan: RunPlan): Promise<StagedCall[]>;
}

export type BenchCase = LatencyCase | LoadCase | GaugeCase | BreakdownCase;

/** The default export of a file under `cases/`; sizes that differ by mode (tasks, calls) go in names too. */
export type CaseFactory = (mode: BenchMode) => BenchCase[];

export function isSkip(value: unknown): value is Skip {
  return typeof value === 'object' && value !== null && typeof (value as Skip).skip === 'string';
}
