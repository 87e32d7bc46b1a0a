/**
 * The call-breakdown bench case's pure parts: matching a call's spans,
 * reading the script's timing log, splitting a call into stages that add up,
 * and the report's table. No timing is asserted: benchmarks are not tests.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { BreakdownCase, BenchContext } from '../../services/cli/bench/bench-case.js';
import { callSpans, parseTimingLog, spanChildren, stagesFor, stagesOf } from '../../services/cli/bench/cases/call-breakdown.js';
import { COLD_STAGES, coldStagesOf } from '../../services/cli/bench/cases/new-docker-tasks.js';
import { SPAN_KIND, type ReceivedSpan } from '../../services/cli/bench/otlp-receiver.js';
import { Progress } from '../../services/cli/bench/progress.js';
import { renderMarkdown } from '../../services/cli/bench/report-markdown.js';
import { runCase, summarizeBreakdown } from '../../services/cli/bench/runner.js';
import { benchReport } from '../support/bench-report.js';

const MS = 1_000_000n;

function span(name: string, spanId: string, parentSpanId: string, startMs: number, endMs: number, extra: Partial<ReceivedSpan> = {}): ReceivedSpan {
  return {
    traceId: 't',
    spanId,
    parentSpanId,
    traceState: '',
    name,
    kind: SPAN_KIND.internal,
    attributes: {},
    status: { code: 0, message: '' },
    startTimeUnixNano: BigInt(startMs) * MS,
    endTimeUnixNano: BigInt(endMs) * MS,
    resource: {},
    ...extra,
  };
}

/** One traced terminal call on `task`: tool 0–20 ms, Exec 2–18, `docker exec` 4–16, starting at `at`. */
function tracedCall(id: string, at: number, task = 'task-a'): ReceivedSpan[] {
  return [
    span('execute_tool terminal', `${id}t`, '', at, at + 20, { kind: SPAN_KIND.server, attributes: { 'berth.task.id': task } }),
    span('berth.v1.Executor/Exec', `${id}e`, `${id}t`, at + 2, at + 18, { kind: SPAN_KIND.server }),
    span('docker exec', `${id}o`, `${id}e`, at + 4, at + 16),
  ];
}

describe('call-breakdown', () => {
  test("matches each call's spans in the order the calls started, on its task only", () => {
    const spans = [...tracedCall('b', 100), ...tracedCall('x', 50, 'other'), ...tracedCall('a', 10)];
    const calls = callSpans(spans, 'task-a', 'docker');
    assert.deepEqual(
      calls.map((c) => c && [c.tool.spanId, c.exec.spanId, c.operation.spanId]),
      [['at', 'ae', 'ao'], ['bt', 'be', 'bo']],
    );
  });

  test('a call whose backend exec has not arrived (or that made two) has no match yet', () => {
    const partial = tracedCall('a', 10).slice(0, 2);
    assert.deepEqual(callSpans(partial, 'task-a', 'docker'), [undefined]);
    const twice = [...tracedCall('a', 10), span('docker exec', 'ao2', 'ae', 5, 6)];
    assert.deepEqual(callSpans(twice, 'task-a', 'docker'), [undefined]);
  });

  test('the timing log gives four stamps a line and skips lines that are not', () => {
    const log = '1.000000 1.000500 1.000600 1.001000\n2.0 2.1\n\nx y z w\n3.5 3.6 3.7 3.8\n';
    assert.deepEqual(parseTimingLog(log), [
      { begun: 1, restored: 1.0005, commandEnded: 1.0006, captured: 1.001 },
      { begun: 3.5, restored: 3.6, commandEnded: 3.7, captured: 3.8 },
    ]);
  });

  test("a call's stages add up to its client total, one per stage name", () => {
    const [c] = callSpans(tracedCall('a', 0), 'task-a', 'docker');
    const staged = stagesOf(25, c!, { begun: 10, restored: 10.001, commandEnded: 10.0012, captured: 10.003 });
    assert.equal(staged.stagesMs.length, stagesFor('round trip').length);
    const sum = staged.stagesMs.reduce((s, v) => s + v, 0);
    assert.ok(Math.abs(sum - 25) < 1e-9, `stages add up to ${sum}`);
    // Client 25 − tool 20; dispatcher before 2; executor before 2; exec 12 − script 3.
    assert.deepEqual(staged.stagesMs.slice(0, 4).map((v) => Math.round(v * 1000) / 1000), [5, 2, 2, 9]);
  });

  test("the report shows each stage's median and mean and what the medians leave unexplained", () => {
    const result = summarizeBreakdown(
      ['a', 'b'],
      [
        { totalMs: 3, stagesMs: [1, 2] },
        { totalMs: 10, stagesMs: [9, 1] },
        { totalMs: 5, stagesMs: [2, 3] },
      ],
    );
    // Medians 2 and 2 against a median total of 5: 1 ms unexplained; the means add up.
    assert.equal(result.unexplainedP50, 1);
    assert.ok(Math.abs(result.unexplainedMean) < 1e-9);
    const report = benchReport([
      { suite: 'call-breakdown', name: 'terminal `true`, per stage', baselineName: 'client total', kind: 'breakdown', status: 'ok', durationMs: 1, breakdown: result },
    ]);
    const md = renderMarkdown(report);
    assert.match(md, /Where the time goes: terminal `true`, per stage, 3 calls/);
    assert.match(md, /\| a \| 2\.00 ms \| 4\.00 ms \| 66\.7% \|/);
    assert.match(md, /\| unexplained \(total less the stages above\) \| 1\.00 ms \| 0 µs \| 0\.0% \|/);
    assert.match(md, /\| client total \(p90 .*\) \| 5\.00 ms \| 6\.00 ms \| 100% \|/);
  });

  test('the runner hands the case its plan and fails it when no call was measured', async () => {
    const ctx: BenchContext = {
      mode: 'smoke',
      repoRoot: '/nonexistent',
      server: () => Promise.reject(new Error('no server in unit tests')),
      dockerUnavailable: () => Promise.resolve(undefined),
      backendMissing: () => Promise.resolve(undefined),
      note: () => {},
      scaled: (values) => values.smoke,
    };
    const progress = new Progress({ write: () => true }, 1, false);
    let asked = 0;
    const c: BreakdownCase = {
      kind: 'breakdown',
      name: 'n',
      baselineName: 'client total',
      stages: ['only'],
      setup: async () => {},
      run: async (plan) => {
        asked = plan.pairs;
        return Array.from({ length: plan.pairs }, () => ({ totalMs: 1, stagesMs: [1] }));
      },
      teardown: async () => {},
    };
    const ok = await runCase(c, { suite: 's', ctx, progress });
    assert.equal(ok.status, 'ok');
    assert.equal(ok.breakdown?.calls, asked);
    const empty = await runCase({ ...c, run: async () => [] }, { suite: 's', ctx, progress });
    assert.equal(empty.status, 'error');
    assert.match(empty.error ?? '', /no call was measured/);
  });
});

describe('new-docker-tasks, per stage', () => {
  /** A new task's first call: the create (with its steps), the bootstrap's exec and stat, the command's exec. */
  function firstCall(): ReceivedSpan[] {
    return [
      span('execute_tool terminal', 't', '', 0, 1000, { kind: SPAN_KIND.server, attributes: { 'berth.task.id': 'task-a' } }),
      span('berth.v1.Executor/Exec', 'e', 't', 10, 990, { kind: SPAN_KIND.server }),
      span('docker create_environment', 'c', 'e', 20, 800),
      span('docker memory_admission', 'c1', 'c', 20, 30),
      span('docker network_setup', 'c2', 'c', 40, 50),
      span('docker container_start', 'c3', 'c', 100, 600),
      span('docker network_setup', 'c4', 'c', 600, 620),
      span('docker exec', 'b', 'e', 810, 900),
      span('docker stat', 's', 'e', 900, 905),
      span('docker exec', 'x', 'e', 910, 980),
    ];
  }

  test("a first call's stages add up to its client total, the create's steps each in its own", () => {
    const spans = firstCall();
    const staged = coldStagesOf(1200, spans[0]!, spanChildren(spans));
    assert.equal(staged?.stagesMs.length, COLD_STAGES.length);
    const sum = staged!.stagesMs.reduce((s, v) => s + v, 0);
    assert.ok(Math.abs(sum - 1200) < 1e-9, `stages add up to ${sum}`);
    const by = new Map(COLD_STAGES.map((name, i) => [name, staged!.stagesMs[i]]));
    const stage = (prefix: string) => by.get(COLD_STAGES.find((s) => s.startsWith(prefix))!);
    assert.equal(stage('client and gRPC'), 200);
    assert.equal(stage('network setup'), 30);
    assert.equal(stage('container start'), 500);
    assert.equal(stage('create_environment, the rest'), 780 - 10 - 30 - 500);
    assert.equal(stage('login shell snapshot'), 95);
    assert.equal(stage('first command'), 70);
  });

  test('a call whose create_environment or command has not arrived has no split yet', () => {
    const spans = firstCall();
    const without = (id: string) => spans.filter((s) => s.spanId !== id);
    assert.equal(coldStagesOf(1200, spans[0]!, spanChildren(without('c'))), undefined);
    const noExec = spans.filter((s) => s.name !== 'docker exec');
    assert.equal(coldStagesOf(1200, spans[0]!, spanChildren(noExec)), undefined);
  });
});
