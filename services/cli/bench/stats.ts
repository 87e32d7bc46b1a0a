/** Order statistics for latency samples. Pure functions, so they are unit-tested. */

export interface Summary {
  readonly n: number;
  readonly min: number;
  readonly p25: number;
  readonly p50: number;
  readonly p75: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
  readonly mean: number;
}

/**
 * The q-quantile (0..1) of ascending `sorted` by linear interpolation between
 * closest ranks (R's type 7, numpy's default), so small samples still give a
 * p99 between the two largest values rather than jumping to the maximum.
 */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  if (q <= 0) return sorted[0]!;
  if (q >= 1) return sorted[sorted.length - 1]!;
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  const a = sorted[lo]!;
  const b = sorted[hi]!;
  return a + (b - a) * (pos - lo);
}

export function summarize(samples: readonly number[]): Summary {
  const sorted = [...samples].sort((x, y) => x - y);
  const n = sorted.length;
  const mean = n === 0 ? Number.NaN : sorted.reduce((s, x) => s + x, 0) / n;
  return {
    n,
    min: n === 0 ? Number.NaN : sorted[0]!,
    p25: quantile(sorted, 0.25),
    p50: quantile(sorted, 0.5),
    p75: quantile(sorted, 0.75),
    p90: quantile(sorted, 0.9),
    p99: quantile(sorted, 0.99),
    max: n === 0 ? Number.NaN : sorted[n - 1]!,
    mean,
  };
}

export function median(values: readonly number[]): number {
  return quantile([...values].sort((x, y) => x - y), 0.5);
}

/**
 * Median of the per-pair differences a[i] - b[i]. Each pair ran back to back,
 * so a slow moment of the machine lands in both halves of a pair and mostly
 * cancels; this is the overhead estimate that survives noise best.
 */
export function pairedMedianDelta(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  const deltas: number[] = [];
  for (let i = 0; i < n; i++) deltas.push(a[i]! - b[i]!);
  return median(deltas);
}

/** a / b, or NaN when b is zero or either is not a number. */
export function ratio(a: number, b: number): number {
  if (!Number.isFinite(a) || !Number.isFinite(b) || b === 0) return Number.NaN;
  return a / b;
}

/** A duration for tables: 3 significant figures, µs below 1 ms, s from 1 s. */
export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return '—';
  const abs = Math.abs(ms);
  if (abs < 1) return `${Number((ms * 1000).toPrecision(3))} µs`;
  if (abs >= 1000) return `${(ms / 1000).toPrecision(3)} s`;
  return `${ms.toPrecision(3)} ms`;
}

/** A ratio for tables: "3.2×", "0.41×". */
export function formatRatio(r: number): string {
  if (!Number.isFinite(r)) return '—';
  return `${r >= 10 ? r.toFixed(0) : r >= 1 ? r.toFixed(2) : r.toPrecision(2)}×`;
}
