/**
 * The bench harness's pure parts and its run order. No timing is asserted:
 * benchmarks are not tests.
 */
import { spawnSync } from 'node:child_process';
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { BenchContext, BenchMode, LatencyCase, LoadCase } from '../../services/cli/bench/bench-case.js';
import { Progress } from '../../services/cli/bench/progress.js';
import { logTicks, renderChart } from '../../services/cli/bench/report-chart.js';
import { renderMarkdown } from '../../services/cli/bench/report-markdown.js';
import { reportToJson, type BenchReport } from '../../services/cli/bench/report.js';
import type { CaseResult } from '../../services/cli/bench/bench-result.js';
import { processCpuMs } from '../../services/cli/bench/listening-child.js';
import { planFor, runCase } from '../../services/cli/bench/runner.js';
import { selectCases } from '../../services/cli/bench/run-bench.js';
import { formatMs, formatRatio, pairedMedianDelta, quantile, summarize } from '../../services/cli/bench/stats.js';
import { escapeXml } from '../../services/cli/bench/svg.js';
import { benchReport } from '../support/bench-report.js';

function fakeContext(mode: BenchMode = 'smoke'): BenchContext {
  return {
    mode,
    repoRoot: '/nonexistent',
    server: () => Promise.reject(new Error('no server in unit tests')),
    dockerUnavailable: () => Promise.resolve('no docker in unit tests'),
    backendMissing: (name) => Promise.resolve(`${name} backend not built yet`),
    note: () => {},
    scaled: (values) => values[mode],
  };
}

function quietProgress(): { progress: Progress; output: () => string } {
  let out = '';
  return { progress: new Progress({ write: (t: string) => (out += t) }, 1, false), output: () => out };
}

describe('bench stats', () => {
  test('quantile interpolates between closest ranks', () => {
    assert.equal(quantile([1, 2, 3, 4], 0.5), 2.5);
    assert.equal(quantile([10], 0.99), 10);
    assert.equal(quantile([1, 2, 3, 4, 5], 0), 1);
    assert.equal(quantile([1, 2, 3, 4, 5], 1), 5);
    assert.ok(Number.isNaN(quantile([], 0.5)));
  });

  test('summarize does not reorder the caller\'s samples', () => {
    const samples = [5, 1, 4, 2, 3];
    const s = summarize(samples);
    assert.deepEqual(samples, [5, 1, 4, 2, 3]);
    assert.equal(s.n, 5);
    assert.equal(s.min, 1);
    assert.equal(s.p50, 3);
    assert.equal(s.max, 5);
    assert.equal(s.mean, 3);
  });

  test('paired delta is the median of per-pair differences', () => {
    // A slow moment (the 100s) hits both halves of pair 2 and cancels out.
    assert.equal(pairedMedianDelta([2, 101, 3], [1, 100, 1]), 1);
  });

  test('durations and ratios format with units', () => {
    assert.equal(formatMs(0.5), '500 µs');
    assert.equal(formatMs(0.0423), '42.3 µs');
    assert.equal(formatMs(4.2), '4.20 ms');
    assert.equal(formatMs(206), '206 ms');
    assert.equal(formatMs(1500), '1.50 s');
    assert.equal(formatMs(Number.NaN), '—');
    assert.equal(formatRatio(12.4), '12×');
    assert.equal(formatRatio(2.345), '2.35×');
    assert.equal(formatRatio(0.4123), '0.41×');
  });
});

describe('bench runner', () => {
  test('runs warm-up, then A and B strictly interleaved, then teardown', async () => {
    const calls: string[] = [];
    const c: LatencyCase = {
      kind: 'latency',
      name: 'a',
      baselineName: 'b',
      plan: { smoke: { warmupPairs: 1, pairs: 3, minPairs: 3 } },
      setup: async () => {
        calls.push('setup');
      },
      runA: async () => {
        calls.push('A');
      },
      runB: async () => {
        calls.push('B');
      },
      teardown: async () => {
        calls.push('teardown');
      },
    };
    const { progress } = quietProgress();
    const r = await runCase(c, { suite: 's', ctx: fakeContext(), progress });
    assert.equal(r.status, 'ok');
    assert.deepEqual(calls, ['setup', 'A', 'B', 'A', 'B', 'A', 'B', 'A', 'B', 'teardown']);
    assert.equal(r.latency?.pairs, 3);
    assert.equal(r.latency?.samplesA.length, 3);
  });

  test('a run may report its own duration', async () => {
    const c: LatencyCase = {
      kind: 'latency',
      name: 'a',
      baselineName: 'b',
      setup: async () => {},
      runA: async () => 7,
      runB: async () => 2,
      teardown: async () => {},
    };
    const r = await runCase(c, { suite: 's', ctx: fakeContext(), progress: quietProgress().progress });
    assert.deepEqual(r.latency?.samplesA, [7, 7]);
    assert.equal(r.latency?.ratioP50, 3.5);
    assert.equal(r.latency?.pairedDeltaP50, 5);
  });

  test('a skip is recorded with its reason and teardown still runs', async () => {
    let tornDown = false;
    const c: LatencyCase = {
      kind: 'latency',
      name: 'docker thing',
      baselineName: 'docker exec',
      setup: async (ctx) => ({ skip: (await ctx.backendMissing('docker'))! }),
      runA: async () => assert.fail('must not run'),
      runB: async () => assert.fail('must not run'),
      teardown: async () => {
        tornDown = true;
      },
    };
    const r = await runCase(c, { suite: 's', ctx: fakeContext(), progress: quietProgress().progress });
    assert.equal(r.status, 'skipped');
    assert.equal(r.reason, 'docker backend not built yet');
    assert.ok(tornDown);
  });

  test('outside smoke mode a rare failed pair is dropped and counted, not fatal', async () => {
    let n = 0;
    const c: LatencyCase = {
      kind: 'latency',
      name: 'a',
      baselineName: 'b',
      plan: { quick: { warmupPairs: 0, pairs: 40, minPairs: 40 } },
      setup: async () => {},
      runA: async () => {
        n += 1;
        if (n === 5) throw new Error('UNAVAILABLE once');
        return 2;
      },
      runB: async () => 1,
      teardown: async () => {},
    };
    const r = await runCase(c, { suite: 's', ctx: fakeContext('quick'), progress: quietProgress().progress });
    assert.equal(r.status, 'ok');
    assert.equal(r.latency?.pairs, 39);
    assert.equal(r.latency?.failedPairs, 1);
    assert.match(r.latency?.firstError ?? '', /A: UNAVAILABLE once/);
  });

  test('a throwing run fails the case with its message; teardown still runs', async () => {
    let tornDown = false;
    const c: LatencyCase = {
      kind: 'latency',
      name: 'a',
      baselineName: 'b',
      setup: async () => {},
      runA: async () => {
        throw new Error('exit 1');
      },
      runB: async () => {},
      teardown: async () => {
        tornDown = true;
      },
    };
    const r = await runCase(c, { suite: 's', ctx: fakeContext(), progress: quietProgress().progress });
    assert.equal(r.status, 'error');
    assert.match(r.error ?? '', /exit 1/);
    assert.ok(tornDown);
  });

  test('failed calls in a load round fail a smoke run but are data in a quick run', async () => {
    const load = (): LoadCase => ({
      kind: 'load',
      name: 'load',
      baselineName: 'base',
      concurrency: 2,
      setup: async () => {},
      runA: async () => ({ latenciesMs: [1, 2], elapsedMs: 10, errors: 1, firstError: 'UNAVAILABLE' }),
      runB: async () => ({ latenciesMs: [1, 1], elapsedMs: 5, errors: 0 }),
      teardown: async () => {},
      plan: { quick: { warmupPairs: 0, pairs: 2 } },
    });
    const smoke = await runCase(load(), { suite: 's', ctx: fakeContext('smoke'), progress: quietProgress().progress });
    assert.equal(smoke.status, 'error');
    assert.match(smoke.error ?? '', /UNAVAILABLE/);
    const quick = await runCase(load(), { suite: 's', ctx: fakeContext('quick'), progress: quietProgress().progress });
    assert.equal(quick.status, 'ok');
    assert.equal(quick.load?.a.errors, 2);
    assert.equal(quick.load?.a.callsPerSec, 200);
    assert.equal(quick.load?.throughputRatio, 0.5);
  });

  test('targets are judged when the case ran, and say why not when it was skipped', async () => {
    const target = {
      target: 'p50 ≤ 5 ms',
      judge: (r: CaseResult) => ({ measured: `p50 ${r.latency!.a.p50} ms`, met: r.latency!.a.p50 <= 5 }),
    };
    const ran: LatencyCase = {
      kind: 'latency',
      name: 'a',
      baselineName: 'b',
      targets: [target],
      setup: async () => {},
      runA: async () => 7,
      runB: async () => 1,
      teardown: async () => {},
    };
    const r1 = await runCase(ran, { suite: 's', ctx: fakeContext(), progress: quietProgress().progress });
    assert.deepEqual(r1.targets, [{ target: 'p50 ≤ 5 ms', measured: 'p50 7 ms', met: false }]);
    const skipped: LatencyCase = { ...ran, setup: async (ctx) => ({ skip: (await ctx.backendMissing('docker'))! }) };
    const r2 = await runCase(skipped, { suite: 's', ctx: fakeContext(), progress: quietProgress().progress });
    assert.deepEqual(r2.targets, [{ target: 'p50 ≤ 5 ms', measured: 'not measured yet (needs the docker backend)', met: null }]);
  });

  test('a plan never asks for fewer pairs than its minimum allows', () => {
    const c: LatencyCase = {
      kind: 'latency',
      name: 'a',
      baselineName: 'b',
      plan: { quick: { pairs: 5 } },
      setup: async () => {},
      runA: async () => {},
      runB: async () => {},
      teardown: async () => {},
    };
    const plan = planFor(c, 'quick');
    assert.equal(plan.pairs, 5);
    assert.equal(plan.minPairs, 5);
  });
});

describe('bench reports', () => {
  const latencyCase: CaseResult = {
    suite: 'dispatch-overhead',
    name: 'CallTool <noop> & co',
    baselineName: 'health Check',
    kind: 'latency',
    status: 'ok',
    durationMs: 1000,
    targets: [{ target: 'dispatch overhead: p50 ≤ 0.5 ms', measured: '1.40 ms', met: false }],
    latency: {
      warmupPairs: 1,
      pairs: 3,
      failedPairs: 0,
      a: summarize([1, 2, 3]),
      b: summarize([0.5, 0.6, 0.7]),
      ratioP50: 2 / 0.6,
      ratioP90: 1,
      ratioP99: 1,
      pairedDeltaP50: 1.4,
      samplesA: [1, 2, 3],
      samplesB: [0.5, 0.6, 0.7],
    },
  };
  const report: BenchReport = benchReport(
    [
      latencyCase,
      { suite: 'terminal-docker', name: 'docker', baselineName: 'docker exec', kind: 'latency', status: 'skipped', reason: 'docker backend not built yet', durationMs: 1 },
    ],
    { source: { sha: 'abc12345', describe: 'abc12345-dirty' }, notes: ['warming the task failed once; retrying'] },
  );

  test('markdown has the machine, the reproduce command, the table row and the skip reason', () => {
    const md = renderMarkdown(report, 'x.svg');
    assert.match(md, /nproc 2, Test CPU, 4 GiB RAM/);
    assert.match(md, /`bin\/berth bench --quick`/);
    assert.match(md, /\| CallTool <noop> & co \| health Check \| 3 \| 2\.00 ms \|/);
    assert.match(md, /docker vs docker exec: docker backend not built yet/);
    assert.match(md, /- warming the task failed once; retrying/);
    assert.match(md, /!\[latency distributions\]\(x\.svg\)/);
    assert.match(md, /\| dispatch overhead: p50 ≤ 0\.5 ms \| 1\.40 ms \| not met \|/);
  });

  test('the chart is one SVG document with labels escaped', () => {
    const svg = renderChart(report);
    assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    assert.match(svg, /<\/svg>\n$/);
    assert.ok(svg.includes('CallTool &#60;noop&#62; &#38; co'));
    assert.ok(!svg.includes('<noop>'));
    assert.equal(escapeXml(`a<b>&"'`), 'a&#60;b&#62;&#38;&#34;&#39;');
  });

  test('log ticks cover the range at 1, 2 and 5 per decade', () => {
    assert.deepEqual(logTicks(0.1, 10), [0.1, 0.2, 0.5, 1, 2, 5, 10]);
  });

  test('JSON keeps sample arrays on one line and turns NaN into null', () => {
    const json = reportToJson({ ...report, cases: [{ ...latencyCase, latency: { ...latencyCase.latency!, ratioP90: Number.NaN } }] });
    assert.match(json, /"samplesA": \[1,2,3\]/);
    const parsed = JSON.parse(json) as { cases: Array<{ latency: { ratioP90: unknown } }> };
    assert.equal(parsed.cases[0]!.latency.ratioP90, null);
  });
});

describe('bench --only', () => {
  const cases = [
    { suite: 'memory', benchCase: { name: 'resident memory, berth executor' } },
    { suite: 'fair-share', benchCase: { name: 'terminal `true` while another tenant runs a CPU burner, memory hog, docker' } },
    { suite: 'terminal-docker', benchCase: { name: 'terminal `true`, docker backend, warm task' } },
  ];
  const names = (only: string[]) => selectCases(cases, only).map((c) => c.suite);

  test("a suite's name selects that suite only, not cases that mention the word", () => {
    assert.deepEqual(names(['memory']), ['memory']);
    assert.deepEqual(names(['Fair-Share', 'memory']), ['memory', 'fair-share']);
  });

  test('any other word selects the cases whose names contain it', () => {
    assert.deepEqual(names(['docker']), ['fair-share', 'terminal-docker']);
    assert.deepEqual(names(['hog']), ['fair-share']);
  });

  test('a word that matches nothing is a usage error listing the suites', () => {
    assert.throws(() => selectCases(cases, ['nope']), { message: '--only nope matches no case; suites: memory, fair-share, terminal-docker' });
  });
});

describe("the tracing case's CPU time per call", () => {
  test("reads a process's CPU time from /proc, and it grows with work done", () => {
    const before = processCpuMs(process.pid);
    assert.ok(before !== undefined && before >= 0, String(before));
    const until = process.cpuUsage().user + 100_000;
    while (process.cpuUsage().user < until) Math.sqrt(Math.random());
    assert.ok(processCpuMs(process.pid)! > before!, 'more CPU time after 100 ms of work');
    assert.equal(processCpuMs(2 ** 22 + 1), undefined, 'no such process');
  });

  test('with reaped, counts the CPU time of the children a process has waited for', () => {
    const own = processCpuMs(process.pid)!;
    const withChildren = processCpuMs(process.pid, { reaped: true })!;
    const busy = spawnSync(process.execPath, ['-e', 'const t = process.cpuUsage().user + 200000; while (process.cpuUsage().user < t);']);
    assert.equal(busy.status, 0);
    const grown = processCpuMs(process.pid, { reaped: true })! - withChildren;
    const ownGrown = processCpuMs(process.pid)! - own;
    assert.ok(grown >= ownGrown + 150, `the child's 200 ms of CPU counted: ${grown} ms with reaped children, ${ownGrown} ms own`);
  });
});
