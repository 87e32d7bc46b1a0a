/** The record of one bench run, and its JSON form. */
import type { BenchMode } from './bench-case.js';
import type { MachineInfo, SourceInfo } from './machine.js';
import type { CaseResult } from './bench-result.js';

export interface BenchReport {
  readonly schema: 'berth-bench/1';
  readonly mode: BenchMode;
  /** The command that reproduces the run. */
  readonly command: string;
  readonly startedAt: string;
  readonly finishedAt: string;
  readonly source: SourceInfo;
  readonly machine: MachineInfo;
  readonly cases: readonly CaseResult[];
  /** What happened along the way that a reader should know (retried steps, pool misses). */
  readonly notes: readonly string[];
}

const SAMPLE_KEYS: ReadonlySet<string> = new Set(['samples', 'samplesA', 'samplesB']);

/**
 * Indented JSON, except that sample arrays stay on one line each (thousands
 * of numbers one per line would drown the rest) and keep 0.1 µs: finer
 * digits are noise.
 */
export function reportToJson(report: BenchReport): string {
  const raw: string[] = [];
  const text = JSON.stringify(
    report,
    (key, value: unknown) => {
      if (SAMPLE_KEYS.has(key) && Array.isArray(value)) {
        raw.push(JSON.stringify(value.map((v) => (typeof v === 'number' ? Math.round(v * 10_000) / 10_000 : v))));
        return `@@raw${raw.length - 1}@@`;
      }
      if (typeof value === 'number' && !Number.isFinite(value)) return null;
      return value;
    },
    1,
  );
  return `${text.replace(/"@@raw(\d+)@@"/g, (_, i: string) => raw[Number(i)]!)}\n`;
}

/** `2025-01-31` in UTC, for file names. */
export function dateStamp(iso: string): string {
  return iso.slice(0, 10);
}
