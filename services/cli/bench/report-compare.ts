/**
 * `berth bench --compare OLD.json`: each case's ratio to its baseline now
 * beside the same ratio in an earlier run's results file, so that a change
 * that made Berth slower (or bigger) shows even when the machine's speed
 * moved between the runs. Ratios are compared, not times: both runs measured
 * each case beside its baseline, and the ratio is what survives a busier or
 * quieter machine.
 */
import { readFileSync } from 'node:fs';
import type { CaseResult } from './bench-result.js';
import type { BenchReport } from './report.js';
import { formatValue, table } from './report-markdown.js';
import { formatRatio } from './stats.js';

/** A change of this much or more either way is called out; smaller ones are within a shared machine's noise. */
export const NOTABLE_CHANGE = 0.1;

/** One figure of a case: a ratio (lower is better unless `higherIsBetter`) or, without a baseline, a value. */
interface Figure {
  readonly measure: string;
  readonly value: number;
  readonly format: (v: number) => string;
  readonly higherIsBetter?: boolean;
}

function figuresOf(c: CaseResult): Figure[] {
  if (c.status !== 'ok') return [];
  if (c.latency) return [{ measure: 'A/B p50', value: c.latency.ratioP50, format: formatRatio }];
  if (c.load) {
    return [
      { measure: 'A/B p50', value: c.load.ratioP50, format: formatRatio },
      { measure: 'A/B calls/s', value: c.load.throughputRatio, format: formatRatio, higherIsBetter: true },
    ];
  }
  if (c.gauge) {
    return c.gauge.rows.map((g) =>
      g.ratio !== undefined
        ? { measure: g.key, value: g.ratio, format: formatRatio }
        : { measure: g.key, value: g.value, format: (v: number) => formatValue(v, g.unit) },
    );
  }
  return [];
}

// A case is its name and its baseline: one case name may be measured beside several baselines (terminal-docker).
const keyOf = (c: CaseResult) => `${c.suite}\u0000${c.name}\u0000${c.baselineName}`;

/** How rows name a case: with its baseline where another case of either run has the same name. */
function labeller(...reports: readonly BenchReport[]): (c: CaseResult) => string {
  const seen = new Map<string, Set<string>>();
  for (const c of reports.flatMap((r) => r.cases)) seen.set(c.name, (seen.get(c.name) ?? new Set()).add(c.baselineName));
  return (c) => ((seen.get(c.name)?.size ?? 0) > 1 ? `${c.name}, beside ${c.baselineName}` : c.name);
}

/** "+12% (worse)", "−30% (better)", "+3%". */
function describeChange(before: number, now: number, higherIsBetter: boolean): string {
  if (!Number.isFinite(before) || !Number.isFinite(now) || before === 0) return '—';
  const change = now / before - 1;
  const percent = `${change >= 0 ? '+' : '−'}${Math.abs(change * 100).toFixed(0)}%`;
  if (Math.abs(change) < NOTABLE_CHANGE) return percent;
  return `${percent} (${change > 0 === higherIsBetter ? 'better' : 'worse'})`;
}

function statusWord(c: CaseResult | undefined): string {
  if (c === undefined) return 'not run';
  return c.status === 'ok' ? 'ok' : c.status;
}

/** The comparison as markdown: one row per figure of every case in either run. */
export function renderComparison(before: BenchReport, now: BenchReport, beforeName: string): string {
  const old = new Map(before.cases.map((c) => [keyOf(c), c]));
  const label = labeller(before, now);
  const rows: string[][] = [];
  let worse = 0;
  for (const c of now.cases) {
    const earlier = old.get(keyOf(c));
    old.delete(keyOf(c));
    const figures = figuresOf(c);
    const earlierFigures = new Map(earlier ? figuresOf(earlier).map((f) => [f.measure, f]) : []);
    if (figures.length === 0 || earlierFigures.size === 0) {
      rows.push([label(c), '—', earlier ? statusWord(earlier) : 'not run', statusWord(c), '—']);
      continue;
    }
    for (const f of figures) {
      const e = earlierFigures.get(f.measure);
      const change = e === undefined ? '—' : describeChange(e.value, f.value, f.higherIsBetter === true);
      if (change.endsWith('(worse)')) worse++;
      rows.push([label(c), f.measure, e === undefined ? '—' : e.format(e.value), f.format(f.value), change]);
    }
  }
  const head =
    `Compared with ${beforeName} (commit ${before.source.sha}, ${before.mode} mode, ${before.startedAt.slice(0, 16)}Z): ` +
    `each case's ratio to its baseline then and now; a change of ${NOTABLE_CHANGE * 100}% or more is marked. ` +
    `${worse === 0 ? 'Nothing got worse.' : `${worse} figure${worse === 1 ? '' : 's'} got worse.`}`;
  // A run of a few cases (--only) would otherwise list every case it left out.
  const notRun = old.size === 0 ? '' : `\nIn ${beforeName} but not in this run: ${[...old.values()].map(label).join('; ')}.\n`;
  return `${head}\n\n${table(['case', 'figure', 'before', 'now', 'change'], rows)}\n${notRun}`;
}

/** Reads an earlier results file; a file that is not one says so, with what to pass instead. */
export function readReport(path: string): BenchReport {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`--compare ${path}: ${(err as Error).message}; pass a results file 'berth bench' wrote (bench-results/DATE-SHA.json)`);
  }
  const report = parsed as Partial<BenchReport> | null;
  if (report === null || typeof report !== 'object' || report.schema !== 'berth-bench/1' || !Array.isArray(report.cases)) {
    throw new Error(`--compare ${path}: not a berth bench results file (no "schema": "berth-bench/1"); pass one 'berth bench' wrote (bench-results/DATE-SHA.json)`);
  }
  return report as BenchReport;
}
