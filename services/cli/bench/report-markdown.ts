/** The markdown form of a bench run: the tables docs/performance.md quotes. */
import type { BenchReport } from './report.js';
import type { CaseResult } from './bench-result.js';
import { formatMs, formatRatio, ratio } from './stats.js';

function row(cells: readonly string[]): string {
  return `| ${cells.map((c) => c.replace(/\|/g, '\\|')).join(' | ')} |`;
}

export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  return [row(header), row(header.map(() => '---')), ...rows.map(row)].join('\n');
}

export function formatValue(value: number, unit: string): string {
  if (!Number.isFinite(value)) return '—';
  return `${value >= 100 ? value.toFixed(0) : value.toPrecision(3)} ${unit}`;
}

/** One line naming the machine and the commit. */
export function machineLine(report: BenchReport): string {
  const m = report.machine;
  const docker = m.docker !== undefined ? `, Docker ${m.docker}` : '';
  const load = m.loadAverage !== undefined ? `, load average ${m.loadAverage.start} at start and ${m.loadAverage.end} at end` : '';
  return (
    `nproc ${m.nproc}, ${m.cpuModel}, ${m.memoryGiB} GiB RAM, Linux ${m.kernel}, ` +
    `Node ${m.node}${docker}${load}; commit ${report.source.describe}, ${report.mode} mode, ${report.startedAt.slice(0, 16)}Z`
  );
}

function latencyTable(cases: readonly CaseResult[]): string | undefined {
  const rows = cases.flatMap((c) => {
    const l = c.latency;
    if (l === undefined) return [];
    return [
      [
        c.name,
        c.baselineName,
        l.failedPairs > 0 ? `${l.pairs} (+${l.failedPairs} failed)` : String(l.pairs),
        formatMs(l.a.p50),
        formatMs(l.a.p90),
        formatMs(l.a.p99),
        formatMs(l.b.p50),
        formatMs(l.b.p90),
        formatMs(l.b.p99),
        formatRatio(l.ratioP50),
        formatMs(l.pairedDeltaP50),
      ],
    ];
  });
  if (rows.length === 0) return undefined;
  return table(
    ['case (A)', 'baseline (B)', 'pairs', 'A p50', 'A p90', 'A p99', 'B p50', 'B p90', 'B p99', 'A/B p50', 'paired Δ p50'],
    rows,
  );
}

function loadTable(cases: readonly CaseResult[]): string | undefined {
  const load = cases.filter((c) => c.load !== undefined);
  if (load.length === 0) return undefined;
  // The cost curve: each suite's p50 against the same suite at its lowest concurrency.
  const lowest = new Map<string, CaseResult>();
  const perSuite = new Map<string, number>();
  for (const c of load) {
    perSuite.set(c.suite, (perSuite.get(c.suite) ?? 0) + 1);
    const prev = lowest.get(c.suite);
    if (prev === undefined || c.load!.concurrency < prev.load!.concurrency) lowest.set(c.suite, c);
  }
  const rows = load.map((c) => {
    const l = c.load!;
    const first = lowest.get(c.suite)!.load!;
    return [
      c.name,
      c.baselineName,
      String(l.concurrency),
      String(l.a.rounds.length),
      l.a.callsPerSec.toFixed(0),
      l.b.callsPerSec.toFixed(0),
      `${l.a.errors} / ${l.b.errors}`,
      formatMs(l.a.latency.p50),
      formatMs(l.a.latency.p99),
      formatRatio(ratio(l.a.latency.p99, l.a.latency.p50)),
      perSuite.get(c.suite)! > 1 ? formatRatio(ratio(l.a.latency.p50, first.a.latency.p50)) : '—',
      formatMs(l.b.latency.p50),
      formatMs(l.b.latency.p99),
      formatRatio(l.ratioP50),
    ];
  });
  return table(
    [
      'case (A)',
      'baseline (B)',
      'tasks at once',
      'rounds',
      'A calls/s',
      'B calls/s',
      'errors A / B',
      'A p50',
      'A p99',
      'A p99/p50',
      'A p50 vs fewest tasks',
      'B p50',
      'B p99',
      'A/B p50',
    ],
    rows,
  );
}

function gaugeTable(cases: readonly CaseResult[]): string | undefined {
  const rows = cases.flatMap((c) =>
    (c.gauge?.rows ?? []).map((g) => [
      g.key,
      formatValue(g.value, g.unit),
      g.baselineKey !== undefined ? `${g.baselineKey}: ${formatValue(g.baselineValue ?? Number.NaN, g.unit)}` : '—',
      g.ratio !== undefined ? formatRatio(g.ratio) : '—',
    ]),
  );
  if (rows.length === 0) return undefined;
  return table(['measurement', 'value', 'baseline', 'ratio'], rows);
}

/**
 * Each breakdown case's stages: median and mean, and each mean's share of the
 * mean total. The means add up to the total; the medians need not, and what
 * they leave is a row of its own.
 */
function breakdownTables(cases: readonly CaseResult[]): string[] {
  return cases.flatMap((c) => {
    const b = c.breakdown;
    if (b === undefined) return [];
    const share = (mean: number) => `${((100 * mean) / b.total.mean).toFixed(1)}%`;
    // The means' remainder is floating-point dust: show it as the zero it is.
    const unexplainedMean = Math.abs(b.unexplainedMean) < 1e-6 ? 0 : b.unexplainedMean;
    const rows = [
      ...b.stages.map((s) => [s.stage, formatMs(s.p50), formatMs(s.mean), share(s.mean)]),
      ['unexplained (total less the stages above)', formatMs(b.unexplainedP50), formatMs(unexplainedMean), share(unexplainedMean)],
      [`${c.baselineName} (p90 ${formatMs(b.total.p90)}, p99 ${formatMs(b.total.p99)})`, formatMs(b.total.p50), formatMs(b.total.mean), '100%'],
    ];
    return [
      `Where the time goes: ${c.name}, ${b.calls} calls (per stage: median and mean; medians do not add up, ` +
        `means do, so the unexplained median is the medians' own remainder):\n\n` +
        table(['stage', 'p50', 'mean', 'share of mean'], rows),
    ];
  });
}

/** Every case's targets beside what was measured. */
export function renderTargets(report: BenchReport): string | undefined {
  const rows = report.cases.flatMap((c) =>
    (c.targets ?? []).map((t) => [t.target, t.measured, t.met === null ? '—' : t.met ? 'met' : 'not met']),
  );
  if (rows.length === 0) return undefined;
  return table(['target', 'measured', ''], rows);
}

/** The tables alone (latency, load, levels, skipped, failed), for docs/performance.md. */
export function renderTables(report: BenchReport): string {
  const parts: string[] = [];
  const latency = latencyTable(report.cases);
  if (latency) parts.push(`Latency, one operation at a time:\n\n${latency}`);
  const load = loadTable(report.cases);
  if (load) parts.push(`Under load (latency of each call in a round; calls/s per round, median over rounds):\n\n${load}`);
  const gauge = gaugeTable(report.cases);
  if (gauge) parts.push(`Memory:\n\n${gauge}`);
  parts.push(...breakdownTables(report.cases));
  const skipped = report.cases.filter((c) => c.status === 'skipped');
  if (skipped.length > 0) {
    parts.push(`Skipped:\n\n${skipped.map((c) => `- ${c.name} vs ${c.baselineName}: ${c.reason}`).join('\n')}`);
  }
  if (report.notes.length > 0) parts.push(`Notes:\n\n${report.notes.map((n) => `- ${n}`).join('\n')}`);
  const failed = report.cases.filter((c) => c.status === 'error');
  if (failed.length > 0) {
    parts.push(`Failed:\n\n${failed.map((c) => `- ${c.name}: ${c.error}`).join('\n')}`);
  }
  return `${parts.join('\n\n')}\n`;
}

function runTime(report: BenchReport): string {
  const s = Math.round((Date.parse(report.finishedAt) - Date.parse(report.startedAt)) / 1000);
  return s >= 60 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${s} s`;
}

export function renderMarkdown(report: BenchReport, chartFile?: string): string {
  const lines = [
    `# Berth benchmarks, ${report.startedAt.slice(0, 10)} (${report.source.sha})`,
    '',
    `Machine: ${machineLine(report)}.`,
    '',
    `Reproduce: \`${report.command}\` (this run took ${runTime(report)}). ` +
      'Every figure was measured beside its baseline in the same run, ' +
      'interleaved A B A B after a warm-up. A/B is the ratio of A to B; paired Δ is the median of A − B ' +
      'over back-to-back pairs. Absolute times on a shared machine are for orientation only.',
    '',
    renderTables(report).trimEnd(),
  ];
  const targets = renderTargets(report);
  if (targets !== undefined) lines.push('', '## Targets', '', targets);
  if (chartFile !== undefined) lines.push('', `![latency distributions](${chartFile})`);
  return `${lines.join('\n')}\n`;
}
