/**
 * `berth bench --compare OLD.json`: each case's ratio to its baseline then
 * and now, the change, and which changes are big enough to call worse or
 * better. Reports are built by hand; nothing is timed.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CaseResult } from '../../services/cli/bench/bench-result.js';
import { readReport, renderComparison } from '../../services/cli/bench/report-compare.js';
import { reportToJson, type BenchReport } from '../../services/cli/bench/report.js';
import { summarize } from '../../services/cli/bench/stats.js';
import { main } from '../../services/cli/main.js';

function latency(suite: string, name: string, ratioP50: number): CaseResult {
  return {
    suite,
    name,
    baselineName: 'baseline',
    kind: 'latency',
    status: 'ok',
    durationMs: 1000,
    latency: {
      warmupPairs: 1,
      pairs: 3,
      failedPairs: 0,
      a: summarize([ratioP50]),
      b: summarize([1]),
      ratioP50,
      ratioP90: ratioP50,
      ratioP99: ratioP50,
      pairedDeltaP50: ratioP50 - 1,
      samplesA: [ratioP50],
      samplesB: [1],
    },
  };
}

function gauge(executorRatio: number, perTaskKiB: number): CaseResult {
  return {
    suite: 'memory',
    name: 'RSS',
    baselineName: 'bare node',
    kind: 'gauge',
    status: 'ok',
    durationMs: 1000,
    gauge: {
      rounds: 1,
      rows: [
        { key: 'executor RSS, idle', unit: 'MiB', value: executorRatio * 40, baselineKey: 'bare node RSS', baselineValue: 40, ratio: executorRatio },
        { key: 'executor RSS per live task', unit: 'KiB', value: perTaskKiB },
      ],
    },
  };
}

function report(sha: string, cases: CaseResult[]): BenchReport {
  return {
    schema: 'berth-bench/1',
    mode: 'quick',
    command: 'bin/berth bench --quick',
    startedAt: '2026-12-01T10:00:00.000Z',
    finishedAt: '2026-12-01T10:05:00.000Z',
    source: { sha, describe: sha },
    machine: { nproc: 2, cpuModel: 'Test CPU', memoryGiB: 4, kernel: '6.1', node: 'v20.0.0' },
    cases,
    notes: [],
  };
}

/** The table row of a case's figure, cells trimmed. */
function rowOf(text: string, name: string, figure: string): string[] {
  const line = text.split('\n').find((l) => l.startsWith(`| ${name} | ${figure} |`));
  assert.ok(line, `no row for ${name} / ${figure} in:\n${text}`);
  return line.split('|').slice(1, -1).map((c) => c.trim());
}

describe('bench --compare', () => {
  const before = report('aaaa1111', [
    latency('cli-startup', '`berth --help`', 6.9),
    latency('dispatch-overhead', 'CallTool', 1.2),
    latency('terminal-local', 'terminal true', 1.75),
    gauge(2.7, 90),
    latency('gone', 'a case since removed', 1),
  ]);
  const now = report('bbbb2222', [
    latency('cli-startup', '`berth --help`', 1.3),
    latency('dispatch-overhead', 'CallTool', 1.5),
    latency('terminal-local', 'terminal true', 1.8),
    gauge(2.0, 90),
    latency('new-suite', 'a new case', 2),
    { suite: 'terminal-ssh', name: 'ssh', baselineName: 'ssh', kind: 'latency', status: 'skipped', reason: 'no docker', durationMs: 1 },
  ]);
  const text = renderComparison(before, now, 'old.json');

  test('each case shows its ratio then and now and the change; 10% or more is called better or worse', () => {
    assert.deepEqual(rowOf(text, '`berth --help`', 'A/B p50'), ['`berth --help`', 'A/B p50', '6.90×', '1.30×', '−81% (better)']);
    assert.deepEqual(rowOf(text, 'CallTool', 'A/B p50'), ['CallTool', 'A/B p50', '1.20×', '1.50×', '+25% (worse)']);
    // Within the noise: the change is given, not judged.
    assert.deepEqual(rowOf(text, 'terminal true', 'A/B p50'), ['terminal true', 'A/B p50', '1.75×', '1.80×', '+3%']);
  });

  test('one case measured beside several baselines is compared baseline by baseline, each row naming its baseline', () => {
    const beside = (baselineName: string, ratio: number): CaseResult => ({ ...latency('terminal-docker', 'docker warm', ratio), baselineName });
    const then = report('aaaa1111', [beside('docker exec', 0.12), beside('resident process', 1.9)]);
    const later = report('bbbb2222', [beside('docker exec', 0.1), beside('resident process', 1.4)]);
    const compared = renderComparison(then, later, 'old.json');
    assert.deepEqual(rowOf(compared, 'docker warm, beside docker exec', 'A/B p50'), ['docker warm, beside docker exec', 'A/B p50', '0.12×', '0.10×', '−17% (better)']);
    assert.deepEqual(rowOf(compared, 'docker warm, beside resident process', 'A/B p50'), [
      'docker warm, beside resident process',
      'A/B p50',
      '1.90×',
      '1.40×',
      '−26% (better)',
    ]);
  });

  test('memory compares each ratio to bare node, and per-task figures by value', () => {
    assert.deepEqual(rowOf(text, 'RSS', 'executor RSS, idle'), ['RSS', 'executor RSS, idle', '2.70×', '2.00×', '−26% (better)']);
    assert.deepEqual(rowOf(text, 'RSS', 'executor RSS per live task'), ['RSS', 'executor RSS per live task', '90.0 KiB', '90.0 KiB', '+0%']);
  });

  test('cases in only one of the runs, or skipped, are listed as such', () => {
    assert.deepEqual(rowOf(text, 'a new case', '—'), ['a new case', '—', 'not run', 'ok', '—']);
    assert.deepEqual(rowOf(text, 'ssh', '—'), ['ssh', '—', 'not run', 'skipped', '—']);
    // Cases of the earlier run left out of this one (--only) are named in one line, not a row each.
    assert.match(text, /\nIn old\.json but not in this run: a case since removed\.\n$/);
    assert.ok(!text.includes('| a case since removed |'));
  });

  test('the head names the earlier run and counts what got worse', () => {
    assert.match(text, /^Compared with old\.json \(commit aaaa1111, quick mode, 2026-12-01T10:00Z\)/);
    assert.match(text, /1 figure got worse\./);
    assert.match(renderComparison(before, before, 'old.json'), /Nothing got worse\./);
  });

  test('a results file round-trips; anything else is refused with what to pass', () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-bench-compare-'));
    try {
      const good = join(dir, 'good.json');
      writeFileSync(good, reportToJson(before));
      assert.equal(readReport(good).cases.length, before.cases.length);
      const other = join(dir, 'other.json');
      writeFileSync(other, '{"hello": 1}');
      assert.throws(() => readReport(other), /--compare .*other\.json: not a berth bench results file.*bench-results\/DATE-SHA\.json/);
      assert.throws(() => readReport(join(dir, 'missing.json')), /--compare .*missing\.json: ENOENT/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('berth bench --compare with a file that is not a results file exits 2 before running anything', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'berth-bench-compare-'));
    const stderr: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((chunk: string) => (stderr.push(String(chunk)), true)) as typeof process.stderr.write;
    try {
      const bad = join(dir, 'bad.json');
      writeFileSync(bad, 'not json');
      assert.equal(await main(['bench', '--smoke', '--compare', bad]), 2);
    } finally {
      process.stderr.write = write;
      rmSync(dir, { recursive: true, force: true });
    }
    assert.match(stderr.join(''), /^berth: --compare .*bad\.json: .*JSON/);
  });
});
