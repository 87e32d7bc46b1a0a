/**
 * Density: how many idle docker tasks one host holds while the executor stays
 * responsive. The live tasks grow in steps (each task's container started by
 * its first `true`, then left idle), and at each step a warm `true` on one
 * task is timed about 30 times; the baseline is the same call with one live
 * task. Beside it, per step: the host's memory used (the drop of
 * MemAvailable since before the first task), the bench server's RSS (the
 * dispatcher and the executor, one process), the RSS of dockerd, containerd
 * and this server's containers' shims, the load average, and how long the
 * step's new tasks took to start.
 *
 * Growing stops at the first step that cannot be had: a task that fails to
 * start (the executor's admission refusing it, Docker failing), host memory
 * that the step would take below a floor, or the time budget; the report
 * says which, as the limiting resource. A step whose p50 misses the 1.5×
 * target does not stop the growth: the curve goes on, and the target rows say
 * where it was missed.
 *
 * Steps: BERTH_BENCH_DENSITY_STEPS (e.g. `1,50,100,200`; 1 is always the
 * first), time budget: BERTH_BENCH_DENSITY_BUDGET_S (growth stops when a step
 * would start after it).
 */
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import type { BenchCase, BenchContext, BenchMode, GaugeCase, GaugeSpec, Target } from '../bench-case.js';
import type { BenchServer, BenchServerOptions } from '../bench-server-process.js';
import { runTerminal, unmeasured } from '../case-helpers.js';
import { DOCKER_SERVER } from '../docker-helpers.js';
import { rssKiB } from '../listening-child.js';
import { loadAverage1m } from '../machine.js';
import { median, quantile } from '../stats.js';

const run = promisify(execFile);

const STEPS: Readonly<Record<BenchMode, readonly number[]>> = {
  smoke: [1, 2],
  quick: [1, 10, 25],
  full: [1, 25, 50, 100, 200, 350, 500],
};
/** Warm calls timed per step, after a few untimed ones. */
const CALLS: Readonly<Record<BenchMode, number>> = { smoke: 5, quick: 20, full: 30 };
const WARMUP_CALLS = 3;
/** After a step's containers started, dockerd is still busy for a while; the measurement waits it out. */
const SETTLE_MS: Readonly<Record<BenchMode, number>> = { smoke: 0, quick: 2000, full: 5000 };
/** Default time budget of the growth, seconds. */
const BUDGET_S: Readonly<Record<BenchMode, number>> = { smoke: 120, quick: 90, full: 2400 };
/** Tasks started at once while growing (a container start is about a second of dockerd's CPU). */
const START_CONCURRENCY = 4;
/** Tasks ended at once at teardown. */
const END_CONCURRENCY = 8;
/** Each container's memory limit, MiB: small, as an idle task needs little. */
const CONTAINER_MEMORY_MIB = 128;
/** The target: warm p50 with N live tasks at most this many times the p50 with one. */
const TARGET_RATIO = 1.5;
/** Growth stops before a step that would leave less than this share of the host's memory available. */
const MEMORY_FLOOR_SHARE = 0.1;

/**
 * A server of its own: small containers, no memory admission bound (so the
 * curve goes to the host's real limit rather than the policy's: with the
 * default `docker.memory_overcommit` of 1.5 it would stop at host memory × 1.5
 * / 128 MiB tasks), and idle tasks kept for the whole run.
 */
const SERVER: BenchServerOptions = {
  backend: 'docker',
  config: {
    terminal: { ...DOCKER_SERVER.config.terminal, container_memory: CONTAINER_MEMORY_MIB, lifetime_seconds: 86_400 },
    docker: { memory_overcommit: 0 },
  },
  startTimeoutMs: 60_000,
};

/** The step list: BERTH_BENCH_DENSITY_STEPS if set, else the mode's; always ascending and starting at 1. */
function densitySteps(mode: BenchMode, env: NodeJS.ProcessEnv = process.env): number[] {
  const raw = env.BERTH_BENCH_DENSITY_STEPS?.trim();
  if (raw === undefined || raw === '') return [...STEPS[mode]];
  const steps = raw.split(',').map((s) => Number(s.trim()));
  if (steps.some((n) => !Number.isInteger(n) || n < 1)) {
    throw new Error(`BERTH_BENCH_DENSITY_STEPS must be positive integers separated by commas, not ${JSON.stringify(raw)}`);
  }
  const sorted = [...new Set([1, ...steps])].sort((a, b) => a - b);
  return sorted;
}

function budgetS(mode: BenchMode, env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.BERTH_BENCH_DENSITY_BUDGET_S?.trim();
  if (raw === undefined || raw === '') return BUDGET_S[mode];
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`BERTH_BENCH_DENSITY_BUDGET_S must be a positive number, not ${JSON.stringify(raw)}`);
  return n;
}

function meminfoKiB(field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, 'm').exec(readFileSync('/proc/meminfo', 'utf8'));
  if (!m) throw new Error(`no ${field} in /proc/meminfo`);
  return Number(m[1]);
}

/** IDs of the running and stopped containers of the executor in process `pid`. */
async function serverContainerIds(pid: number): Promise<string[]> {
  const { stdout } = await run('docker', ['ps', '-aq', '--no-trunc', '--filter', `label=berth.executor.pid=${pid}`]);
  return stdout.trim().split('\n').filter(Boolean);
}

/**
 * RSS of dockerd and containerd plus the shims of the given containers, KiB.
 * Other containers on the engine (another user's) have shims too; those are
 * left out, the daemons cannot be split.
 */
function dockerRssKiB(containerIds: ReadonlySet<string>): number {
  let total = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const comm = readFileSync(`/proc/${entry}/comm`, 'utf8').trim();
      if (comm === 'dockerd' || comm === 'containerd') {
        total += rssKiB(Number(entry));
      } else if (comm.startsWith('containerd-shim')) {
        const args = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
        const id = args[args.indexOf('-id') + 1];
        if (id !== undefined && containerIds.has(id)) total += rssKiB(Number(entry));
      }
    } catch {
      // The process ended while being read.
    }
  }
  return total;
}

/** Runs `work` on each item, `concurrency` at a time; returns the failures' messages. */
async function pooled<T>(items: readonly T[], concurrency: number, work: (item: T) => Promise<unknown>): Promise<string[]> {
  const errors: string[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, items.length) }, async () => {
      while (next < items.length) {
        const item = items[next++]!;
        try {
          await work(item);
        } catch (err) {
          errors.push(err instanceof Error ? err.message : String(err));
        }
      }
    }),
  );
  return errors;
}

/** The limiting resource a failed start points at, for the report. */
function limitOf(error: string): string {
  if (/memory_overcommit|RESOURCE_EXHAUSTED|quota/i.test(error)) return `admission refused: ${error}`;
  if (/out of memory|cannot allocate|ENOMEM/i.test(error)) return `memory: ${error}`;
  if (/pids|fork|resource temporarily unavailable|EAGAIN/i.test(error)) return `processes: ${error}`;
  if (/no space left|ENOSPC/i.test(error)) return `disk: ${error}`;
  return `a task failed to start: ${error}`;
}

const MIB = 1024;

const p50Key = (n: number) => `warm \`true\` p50, ${n} live ${n === 1 ? 'task' : 'tasks'}`;
const BASELINE_KEY = p50Key(1);

function stepGauges(n: number): GaugeSpec[] {
  const tasks = `${n} live ${n === 1 ? 'task' : 'tasks'}`;
  return [
    { key: p50Key(n), unit: 'ms', baselineKey: BASELINE_KEY },
    { key: `warm \`true\` p90, ${tasks}`, unit: 'ms' },
    { key: `host memory used, ${tasks}`, unit: 'MiB' },
    { key: `bench server (dispatcher + executor) RSS, ${tasks}`, unit: 'MiB' },
    { key: `dockerd + containerd + shims RSS, ${tasks}`, unit: 'MiB' },
    { key: `load average (1 min), ${tasks}`, unit: '' },
    { key: `time to start the step's new tasks, ${tasks}`, unit: 's' },
  ];
}

export default function cases(mode: BenchMode): BenchCase[] {
  const steps = densitySteps(mode);
  const budgetMs = budgetS(mode) * 1000;
  let server: BenchServer | undefined;
  let ctx: BenchContext | undefined;
  const live: string[] = [];
  let values: Record<string, number> = {};
  let limit: string | undefined;
  const taskId = (i: number) => `bench-density-${process.pid}-${i}`;

  /** Warm `true` on the first task: `calls` timed after a few untimed. */
  const timeWarmCalls = async (calls: number): Promise<number[]> => {
    for (let i = 0; i < WARMUP_CALLS; i++) await runTerminal(server!, live[0]!, 'true');
    const samples: number[] = [];
    for (let i = 0; i < calls; i++) {
      const t0 = performance.now();
      await runTerminal(server!, live[0]!, 'true');
      samples.push(performance.now() - t0);
    }
    return samples.sort((a, b) => a - b);
  };

  const grow = async (): Promise<Record<string, number>> => {
    const s = server!;
    const startedMs = performance.now();
    const availableBefore = meminfoKiB('MemAvailable');
    const floorKiB = meminfoKiB('MemTotal') * MEMORY_FLOOR_SHARE;
    const result: Record<string, number> = {};
    let perTaskKiB = 0;
    for (const n of steps) {
      const add = n - live.length;
      if (performance.now() - startedMs > budgetMs) {
        limit = `time budget: ${budgetMs / 1000} s spent before the step to ${n} tasks (BERTH_BENCH_DENSITY_BUDGET_S)`;
        break;
      }
      const availableKiB = meminfoKiB('MemAvailable');
      if (availableKiB - add * perTaskKiB < floorKiB) {
        limit =
          `memory: ${n} tasks would need about ${Math.round((add * perTaskKiB) / MIB)} MiB more, ` +
          `and ${Math.round(availableKiB / MIB)} MiB is available (floor ${Math.round(floorKiB / MIB)} MiB)`;
        break;
      }
      ctx!.note(`density: starting ${add} tasks (to ${n} live)`);
      const ids = Array.from({ length: add }, (_, i) => taskId(live.length + i));
      const t0 = performance.now();
      const started = new Set<string>();
      const errors = await pooled(ids, START_CONCURRENCY, async (id) => {
        try {
          await runTerminal(s, id, 'true');
        } finally {
          // Counted live even when the call failed: its container may exist, and EndTask is harmless otherwise.
          started.add(id);
        }
      });
      live.push(...ids.filter((id) => started.has(id)));
      const startMs = performance.now() - t0;
      if (errors.length > 0) {
        limit = `${limitOf(errors[0]!)} (${errors.length} of ${add} starts failed on the way to ${n} tasks)`;
        break;
      }
      await sleep(SETTLE_MS[mode]);
      const samples = await timeWarmCalls(CALLS[mode]);
      const containers = new Set(await serverContainerIds(s.pid));
      const usedKiB = availableBefore - meminfoKiB('MemAvailable');
      perTaskKiB = Math.max(perTaskKiB, usedKiB / n);
      const gauges = stepGauges(n);
      const figures = [
        quantile(samples, 0.5),
        quantile(samples, 0.9),
        usedKiB / MIB,
        median([rssKiB(s.pid), rssKiB(s.pid), rssKiB(s.pid)]) / MIB,
        dockerRssKiB(containers) / MIB,
        loadAverage1m(),
        startMs / 1000,
      ];
      gauges.forEach((g, i) => (result[g.key] = figures[i]!));
      const ratioToOne = figures[0]! / result[BASELINE_KEY]!;
      ctx!.note(
        `density: ${n} live tasks: p50 ${figures[0]!.toFixed(1)} ms (${ratioToOne.toFixed(2)}× one), ` +
          `host memory used ${Math.round(figures[2]!)} MiB, load ${figures[5]}, started in ${figures[6]!.toFixed(1)} s`,
      );
    }
    result['live tasks reached'] = live.length;
    return result;
  };

  /** The step a target is about, judged from the gauge rows; a step not reached says why. */
  const judgeStep = (n: number): Target['judge'] => (r) => {
    const row = r.gauge!.rows.find((g) => g.key === p50Key(n));
    if (row === undefined || !Number.isFinite(row.value)) {
      return { measured: `not reached (${limit ?? 'not measured'})`, met: false };
    }
    const ratio = row.ratio ?? Number.NaN;
    return { measured: `${ratio.toFixed(2)}× (${row.value.toFixed(1)} ms vs ${(row.baselineValue ?? Number.NaN).toFixed(1)} ms)`, met: ratio <= TARGET_RATIO };
  };

  const top = steps[steps.length - 1]!;
  const densityCase: GaugeCase = {
    kind: 'gauge',
    name: `density: idle docker tasks, growing to ${top}, warm \`true\` on one of them`,
    baselineName: 'the same call with one live task',
    gauges: [...steps.flatMap(stepGauges), { key: 'live tasks reached', unit: 'tasks' }],
    targets: [
      ...steps
        .filter((n) => n > 1)
        .map((n) => ({ target: `warm \`true\` p50 with ${n} idle docker tasks live ≤ ${TARGET_RATIO}× with one`, judge: judgeStep(n) })),
      {
        target: `idle docker tasks one host holds: ${top} (the last step)`,
        judge: (r) => {
          const reached = r.gauge!.rows.find((g) => g.key === 'live tasks reached')?.value ?? 0;
          return { measured: `${reached}${limit !== undefined ? `; stopped by ${limit}` : ''}`, met: reached >= top };
        },
      },
    ],
    async setup(context) {
      ctx = context;
      const missing = await context.backendMissing('docker');
      if (missing !== undefined) return { skip: missing };
      server = await context.server(SERVER);
      return undefined;
    },
    async runA() {
      values = await grow();
      if (values[BASELINE_KEY] === undefined) throw new Error(`no task could be measured: ${limit}`);
      if (limit !== undefined) {
        // Smoke runs two tasks: anything stopping them is the harness or the server broken, not a finding.
        if (ctx!.mode === 'smoke') throw new Error(`growth stopped at ${live.length} live tasks: ${limit}`);
        ctx!.note(`density: growth stopped at ${live.length} live tasks: ${limit}`);
      }
      return values;
    },
    // The baseline is the first step of the same run (one live task), taken in runA.
    runB: async () => ({ [BASELINE_KEY]: values[BASELINE_KEY] ?? Number.NaN }),
    async teardown() {
      const s = server;
      if (s === undefined) return;
      const ids = live.splice(0);
      if (ids.length > 0) ctx?.note(`density: ending ${ids.length} tasks`);
      await pooled(ids, END_CONCURRENCY, (id) => unmeasured(ctx!, `ending ${id}`, () => s.endTask(id)));
      const deadline = Date.now() + Math.max(60_000, ids.length * 500);
      let left = await serverContainerIds(s.pid);
      while (left.length > 0 && Date.now() < deadline) {
        await sleep(500);
        left = await serverContainerIds(s.pid);
      }
      if (left.length > 0) {
        await run('docker', ['rm', '-f', ...left]).catch(() => undefined);
        throw new Error(`${left.length} of the bench server's containers were still there after every task ended; removed them`);
      }
    },
  };
  return [densityCase];
}
