/**
 * The SVG chart of a bench run: for every latency and load case, its latency
 * distribution drawn right above its baseline's, on one logarithmic time
 * axis shared by all cases (so a 1 ms and a 200 ms case fit one picture).
 * Box = p25..p75, thick bar = p50, short ticks = p90 and p99, thin line =
 * min..max, dots = samples.
 */
import { machineLine } from './report-markdown.js';
import type { BenchReport } from './report.js';
import { formatMs, formatRatio, type Summary } from './stats.js';
import { el, svgDocument, text } from './svg.js';

interface Series {
  readonly label: string;
  readonly summary: Summary;
  readonly samples: readonly number[];
}

interface ChartRow {
  readonly a: Series;
  readonly b: Series;
  readonly ratio: number;
}

const COLOR_A = '#1d4ed8';
const COLOR_B = '#6b7280';
const WIDTH = 1060;
const LABEL_W = 390;
const PLOT_X = LABEL_W + 10;
const PLOT_W = 500;
const ROW_H = 18;
const PAIR_GAP = 14;
const TOP = 80;
const MAX_DOTS = 400;

function rowsOf(report: BenchReport): ChartRow[] {
  const rows: ChartRow[] = [];
  for (const c of report.cases) {
    if (c.latency !== undefined) {
      rows.push({
        a: { label: c.name, summary: c.latency.a, samples: c.latency.samplesA },
        b: { label: c.baselineName, summary: c.latency.b, samples: c.latency.samplesB },
        ratio: c.latency.ratioP50,
      });
    } else if (c.load !== undefined) {
      rows.push({
        a: { label: `${c.name}`, summary: c.load.a.latency, samples: c.load.a.samples },
        b: { label: c.baselineName, summary: c.load.b.latency, samples: c.load.b.samples },
        ratio: c.load.ratioP50,
      });
    }
  }
  return rows;
}

/** Ticks at 1, 2 and 5 times each power of ten within [lo, hi]. */
export function logTicks(lo: number, hi: number): number[] {
  const ticks: number[] = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
    for (const m of [1, 2, 5]) {
      const v = m * 10 ** e;
      if (v >= lo * 0.999 && v <= hi * 1.001) ticks.push(Number(v.toPrecision(3)));
    }
  }
  return ticks;
}

function tickLabel(ms: number): string {
  if (ms < 1) return `${Number((ms * 1000).toPrecision(3))} µs`;
  if (ms < 1000) return `${Number(ms.toPrecision(3))} ms`;
  return `${Number((ms / 1000).toPrecision(3))} s`;
}

function truncate(label: string, max: number): string {
  return label.length <= max ? label : `${label.slice(0, max - 1)}…`;
}

/** Evenly spaced samples, at most `max`, so huge runs still give a small file. */
function thin(samples: readonly number[], max: number): number[] {
  if (samples.length <= max) return [...samples];
  const step = samples.length / max;
  return Array.from({ length: max }, (_, i) => samples[Math.floor(i * step)]!);
}

export function renderChart(report: BenchReport): string {
  const rows = rowsOf(report);
  const all = rows.flatMap((r) => [r.a.summary.min, r.a.summary.max, r.b.summary.min, r.b.summary.max]);
  const positive = all.filter((v) => Number.isFinite(v) && v > 0);
  const lo = 10 ** Math.floor(Math.log10(positive.length > 0 ? Math.min(...positive) : 0.1));
  const hi = 10 ** Math.ceil(Math.log10(positive.length > 0 ? Math.max(...positive) : 1000));
  const x = (ms: number) => PLOT_X + ((Math.log10(Math.max(ms, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * PLOT_W;

  const plotH = rows.length * (2 * ROW_H + PAIR_GAP);
  const height = TOP + plotH + 70;
  const parts: string[] = [el('rect', { x: 0, y: 0, width: WIDTH, height, fill: '#ffffff' })];
  parts.push(
    text(12, 22, `Berth benchmarks, ${report.startedAt.slice(0, 10)} (${report.source.sha}, ${report.mode})`, {
      'font-size': 15,
      'font-weight': 'bold',
    }),
  );
  // The machine on one line, the commit and mode on the next: one line would run off the picture.
  const [hardware = '', ...rest] = machineLine(report).split('; ');
  parts.push(
    text(12, 40, truncate(hardware, 175), { fill: '#374151' }),
    text(12, 55, truncate(rest.join('; '), 175), { fill: '#374151' }),
  );
  parts.push(
    text(PLOT_X + PLOT_W + 12, TOP - 8, 'p50, A/B', { fill: '#374151', 'font-weight': 'bold' }),
    text(PLOT_X, TOP - 8, 'latency, log scale', { fill: '#374151', 'font-weight': 'bold' }),
  );

  // Grid and axis labels.
  for (const t of logTicks(lo, hi)) {
    const major = Number.isInteger(Math.log10(t));
    parts.push(
      el('line', {
        x1: x(t),
        x2: x(t),
        y1: TOP,
        y2: TOP + plotH,
        stroke: major ? '#d1d5db' : '#eef0f3',
        'stroke-width': 1,
      }),
    );
    // Only powers of ten get a label: the 2 and 5 lines are too close to them to carry text.
    if (major) parts.push(text(x(t), TOP + plotH + 14, tickLabel(t), { 'text-anchor': 'middle', fill: '#111827' }));
  }

  rows.forEach((r, i) => {
    const top = TOP + i * (2 * ROW_H + PAIR_GAP) + PAIR_GAP / 2;
    if (i > 0) {
      parts.push(el('line', { x1: 8, x2: WIDTH - 8, y1: top - PAIR_GAP / 2, y2: top - PAIR_GAP / 2, stroke: '#f3f4f6' }));
    }
    drawSeries(parts, r.a, top + ROW_H / 2, COLOR_A, x, true, i);
    drawSeries(parts, r.b, top + ROW_H * 1.5, COLOR_B, x, false, i);
    parts.push(
      text(PLOT_X + PLOT_W + 12, top + ROW_H / 2 + 4, `${formatMs(r.a.summary.p50)}  ${formatRatio(r.ratio)}`, {
        fill: COLOR_A,
        'font-weight': 'bold',
      }),
      text(PLOT_X + PLOT_W + 12, top + ROW_H * 1.5 + 4, formatMs(r.b.summary.p50), { fill: COLOR_B }),
    );
  });

  // Legend.
  const ly = TOP + plotH + 38;
  parts.push(
    el('rect', { x: 12, y: ly - 8, width: 10, height: 10, fill: COLOR_A, 'fill-opacity': 0.35, stroke: COLOR_A }),
    text(26, ly + 1, 'A: the case', { fill: '#111827' }),
    el('rect', { x: 110, y: ly - 8, width: 10, height: 10, fill: COLOR_B, 'fill-opacity': 0.35, stroke: COLOR_B }),
    text(124, ly + 1, 'B: its baseline, run interleaved with A', { fill: '#111827' }),
    text(
      12,
      ly + 20,
      'box p25–p75 · thick bar p50 · short ticks p90, p99 · thin line min–max · dots: samples. Ratios are A/B of p50.',
      { fill: '#4b5563' },
    ),
  );
  return svgDocument(WIDTH, height, parts);
}

function drawSeries(
  parts: string[],
  s: Series,
  cy: number,
  color: string,
  x: (ms: number) => number,
  isA: boolean,
  rowIndex: number,
): void {
  parts.push(
    text(isA ? 12 : 24, cy + 4, truncate(isA ? s.label : `vs ${s.label}`, isA ? 54 : 58), {
      fill: isA ? '#111827' : '#4b5563',
      'font-weight': isA ? 'bold' : undefined,
    }),
  );
  const m = s.summary;
  if (m.n === 0) return;
  const dots = thin(s.samples, MAX_DOTS).map((v, j) => {
    // Deterministic jitter: the same run always draws the same picture.
    const jitter = (((j * 2654435761 + rowIndex * 40503) >>> 0) % 1000) / 1000 - 0.5;
    return el('circle', { cx: x(v), cy: cy + jitter * 10, r: 1.4 });
  });
  parts.push(el('g', { fill: color, 'fill-opacity': 0.22 }, dots));
  parts.push(
    el('line', { x1: x(m.min), x2: x(m.max), y1: cy, y2: cy, stroke: color, 'stroke-width': 1 }),
    el('rect', {
      x: x(m.p25),
      y: cy - 5,
      width: Math.max(1, x(m.p75) - x(m.p25)),
      height: 10,
      fill: color,
      'fill-opacity': 0.3,
      stroke: color,
    }),
    el('line', { x1: x(m.p50), x2: x(m.p50), y1: cy - 7, y2: cy + 7, stroke: color, 'stroke-width': 3 }),
    el('line', { x1: x(m.p90), x2: x(m.p90), y1: cy - 4, y2: cy + 4, stroke: color, 'stroke-width': 1.5 }),
    el('line', { x1: x(m.p99), x2: x(m.p99), y1: cy - 4, y2: cy + 4, stroke: color, 'stroke-width': 1.5 }),
  );
}
