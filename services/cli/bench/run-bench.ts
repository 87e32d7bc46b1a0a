/**
 * `berth bench`: loads the cases under cases/, runs them one after another
 * (never two at once: they would measure each other), and writes the JSON,
 * markdown and SVG reports under bench-results/ (the checkout's; kept out of
 * git unless a report is added on purpose).
 *
 * Exit status: 0 when no case failed (skips are fine), 1 otherwise.
 */
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchCase, BenchMode, CaseFactory } from './bench-case.js';
import { createBenchContext } from './bench-context.js';
import { dockerVersion, loadAverage1m, machineInfo, sourceInfo } from './machine.js';
import { Progress, type ProgressStream } from './progress.js';
import { renderChart } from './report-chart.js';
import { renderComparison, readReport } from './report-compare.js';
import { renderMarkdown } from './report-markdown.js';
import { dateStamp, reportToJson, type BenchReport } from './report.js';
import type { CaseResult } from './bench-result.js';
import { runCase } from './runner.js';
import { formatMs, formatRatio } from './stats.js';

export const REPO_ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
const CASES_DIR = fileURLToPath(new URL('./cases/', import.meta.url));
export const RESULTS_DIR = join(REPO_ROOT, 'bench-results');

/**
 * --quick aims at two minutes in all. Each case may measure for at most half
 * of its fair share of what is left (the other half goes to set-up, warm-up
 * and teardown), so a slow machine trims pairs rather than overrunning; the
 * cases' minimum pairs still run.
 */
const QUICK_TOTAL_MS = 110_000;

/** A wrong --only and the like: the CLI exits 2 with the message. */
export class BenchUsageError extends Error {}

export interface BenchOptions {
  readonly mode: BenchMode;
  /** Suite names (case file names) or parts of case names; empty: everything. */
  readonly only: readonly string[];
  /** Write result files (default: yes, except in smoke mode). */
  readonly write?: boolean;
  readonly resultsDir?: string;
  /** An earlier run's results file: print each case's ratio change against it. */
  readonly compare?: string;
  /** Also write the results (JSON) to this file, in any mode. */
  readonly json?: string;
  /** The command line that reproduces this run, for the report. */
  readonly command: string;
  readonly stderr?: ProgressStream;
  readonly stdout?: { write(text: string): unknown };
}

interface LoadedCase {
  readonly suite: string;
  readonly benchCase: BenchCase;
}

export async function loadCases(mode: BenchMode, dir = CASES_DIR): Promise<LoadedCase[]> {
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.js'))
    .sort();
  const loaded: LoadedCase[] = [];
  for (const file of files) {
    const mod = (await import(new URL(file, `file://${dir}`).href)) as { default?: CaseFactory };
    if (typeof mod.default !== 'function') {
      throw new Error(`bench case file ${file} must default-export a function returning its cases`);
    }
    const suite = file.replace(/\.js$/, '');
    for (const benchCase of mod.default(mode)) loaded.push({ suite, benchCase });
  }
  return loaded;
}

/**
 * The cases `--only` names: a word that is a suite's name selects that suite
 * (and nothing else, so `memory` is not also a case that mentions a memory
 * hog); any other word selects the cases whose names contain it.
 */
export function selectCases<C extends { readonly suite: string; readonly benchCase: { readonly name: string } }>(
  all: readonly C[],
  only: readonly string[],
): C[] {
  if (only.length === 0) return [...all];
  const suites = new Set(all.map((c) => c.suite.toLowerCase()));
  const wanted = only.map((o) => o.toLowerCase());
  const bySuite = wanted.filter((w) => suites.has(w));
  const byName = wanted.filter((w) => !suites.has(w));
  const chosen = all.filter(
    (c) => bySuite.includes(c.suite.toLowerCase()) || byName.some((w) => c.benchCase.name.toLowerCase().includes(w)),
  );
  if (chosen.length === 0) {
    const suites = [...new Set(all.map((c) => c.suite))].join(', ');
    throw new BenchUsageError(`--only ${only.join(',')} matches no case; suites: ${suites}`);
  }
  return chosen;
}

function readEarlierReport(path: string): BenchReport {
  try {
    return readReport(path);
  } catch (err) {
    throw new BenchUsageError((err as Error).message);
  }
}

function summaryLine(r: CaseResult): string {
  const secs = `${(r.durationMs / 1000).toFixed(1)} s`;
  if (r.status === 'skipped') return `skipped: ${r.reason}`;
  if (r.status === 'error') return `FAILED: ${r.error}`;
  if (r.latency) {
    const l = r.latency;
    return `p50 ${formatMs(l.a.p50)} vs ${formatMs(l.b.p50)} (${formatRatio(l.ratioP50)}), p99 ${formatMs(l.a.p99)}, ${l.pairs} pairs, ${secs}`;
  }
  if (r.load) {
    const l = r.load;
    return (
      `${l.a.callsPerSec.toFixed(0)} calls/s vs ${l.b.callsPerSec.toFixed(0)}, p50 ${formatMs(l.a.latency.p50)} ` +
      `p99 ${formatMs(l.a.latency.p99)}, errors ${l.a.errors}, ${l.a.rounds.length} rounds, ${secs}`
    );
  }
  if (r.breakdown) {
    const b = r.breakdown;
    const largest = [...b.stages].sort((x, y) => y.mean - x.mean)[0];
    const most = largest ? `, most in ${largest.stage} (${formatMs(largest.mean)} mean)` : '';
    return `total p50 ${formatMs(b.total.p50)} over ${b.calls} calls${most}, ${secs}`;
  }
  if (r.gauge) return `${r.gauge.rows.map((g) => `${g.key} ${g.value.toFixed(1)} ${g.unit}`).join('; ')}, ${secs}`;
  return secs;
}

export async function runBench(options: BenchOptions): Promise<number> {
  const stderr = options.stderr ?? process.stderr;
  const stdout = options.stdout ?? process.stdout;
  // Read before the run: a wrong path should not cost a whole run.
  const earlier = options.compare === undefined ? undefined : readEarlierReport(options.compare);
  const chosen = selectCases(await loadCases(options.mode), options.only);
  const progress = new Progress(stderr, chosen.length);
  const notes: string[] = [];
  const note = (m: string) => {
    notes.push(m);
    progress.note(m);
  };
  const ctx = createBenchContext({ mode: options.mode, repoRoot: REPO_ROOT, note });
  const startedAt = new Date().toISOString();
  const loadAtStart = loadAverage1m();
  // Read now: commits that land while the run goes on were not measured.
  const source = sourceInfo(REPO_ROOT);
  const results: CaseResult[] = [];

  // Ctrl-C mid-run: tear down the running case and the servers, so no child or container outlives us.
  let current: BenchCase | undefined;
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) return;
    interrupted = true;
    progress.finish();
    stderr.write(`bench: ${signal}, cleaning up\n`);
    void Promise.allSettled([current?.teardown(), ctx.close()]).then(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const deadlineMs = Date.now() + QUICK_TOTAL_MS;
    for (const [i, { suite, benchCase }] of chosen.entries()) {
      current = benchCase;
      progress.startCase(benchCase.name);
      const budgetCapMs =
        options.mode === 'quick' ? Math.max(0, (deadlineMs - Date.now()) / (chosen.length - i) / 2) : undefined;
      const r = await runCase(benchCase, { suite, ctx, progress, ...(budgetCapMs !== undefined ? { budgetCapMs } : {}) });
      current = undefined;
      results.push(r);
      progress.endCase(summaryLine(r));
    }
  } finally {
    progress.finish();
    await ctx.close();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }

  const machine = machineInfo();
  machine.loadAverage = { start: loadAtStart, end: loadAverage1m() };
  if (results.some((r) => r.status === 'ok' && /docker/i.test(`${r.name} ${r.baselineName}`))) {
    const v = dockerVersion();
    if (v !== undefined) machine.docker = v;
  }
  const report: BenchReport = {
    schema: 'berth-bench/1',
    mode: options.mode,
    command: options.command,
    startedAt,
    finishedAt: new Date().toISOString(),
    source,
    machine,
    cases: results,
    notes,
  };

  const failed = results.filter((r) => r.status === 'error').length;
  const skipped = results.filter((r) => r.status === 'skipped').length;
  const write = options.write ?? options.mode !== 'smoke';
  if (write) {
    const dir = options.resultsDir ?? RESULTS_DIR;
    mkdirSync(dir, { recursive: true });
    const base = `${dateStamp(startedAt)}-${report.source.sha}`;
    writeFileSync(join(dir, `${base}.json`), reportToJson(report));
    writeFileSync(join(dir, `${base}.svg`), renderChart(report));
    const markdown = renderMarkdown(report, `${base}.svg`);
    writeFileSync(join(dir, `${base}.md`), markdown);
    stdout.write(`${markdown}\n`);
    stderr.write(`bench: wrote ${join(dir, base)}.{json,md,svg}\n`);
  }
  if (options.json !== undefined) {
    writeFileSync(options.json, reportToJson(report));
    stderr.write(`bench: wrote ${options.json}\n`);
  }
  if (earlier !== undefined) stdout.write(`${renderComparison(earlier, report, options.compare!)}\n`);
  stderr.write(
    `bench ${options.mode}: ${results.length - failed - skipped} ran, ${skipped} skipped, ${failed} failed\n`,
  );
  return failed > 0 ? 1 : 0;
}
