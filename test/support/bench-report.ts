/** A bench run's record for report tests: a made-up machine and commit, and the cases given. */
import type { CaseResult } from '../../services/cli/bench/bench-result.js';
import type { BenchReport } from '../../services/cli/bench/report.js';

export function benchReport(cases: readonly CaseResult[], overrides: Partial<BenchReport> = {}): BenchReport {
  return {
    schema: 'berth-bench/1',
    mode: 'quick',
    command: 'bin/berth bench --quick',
    startedAt: '2025-01-02T03:04:05.000Z',
    finishedAt: '2025-01-02T03:05:05.000Z',
    source: { sha: 'abc12345', describe: 'abc12345' },
    machine: { nproc: 2, cpuModel: 'Test CPU', memoryGiB: 4, kernel: '6.1', node: 'v20.0.0' },
    cases,
    notes: [],
    ...overrides,
  };
}
