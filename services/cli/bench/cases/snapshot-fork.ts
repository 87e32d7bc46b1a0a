/**
 * Snapshots and forks on the docker backend (docs/lifecycle.md), on a warm
 * task holding 100 MiB of written files in its workspace (persistent volumes,
 * the default):
 *
 * - snapshot, fork, and the fork's first command, beside doing it by hand:
 *   `docker commit` of a container holding the same files, `docker run` of
 *   the image, `docker exec true` (no volumes, no shell state, no uid of its
 *   own: the floor of what Docker itself takes);
 * - ten forks of one snapshot at once, first command in each, beside ten
 *   `docker run` + `docker exec true` of a committed image at once.
 *
 * Target (issue #22): fork p50 ≤ 1 s.
 */
import { execFile } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { promisify } from 'node:util';
import type { BenchCase, LatencyCase, LoadCase, LoadRound } from '../bench-case.js';
import type { BenchServer, BenchServerOptions } from '../bench-server-process.js';
import { runProcess, runTerminal } from '../case-helpers.js';
import { BENCH_LABEL, SANDBOX_IMAGE } from '../docker-helpers.js';
import { formatMs } from '../stats.js';

const run = promisify(execFile);
/** 1 GiB a container, so that ten forks and their source fit docker.memory_overcommit's budget on a small host. */
const SERVER: BenchServerOptions = { backend: 'docker', config: { terminal: { container_persistent: true, container_memory: 1024 } } };
/** 100 files of 1 MiB each. */
const WRITE_100_MIB = 'mkdir -p /workspace/data && for i in $(seq 1 100); do head -c 1048576 /dev/urandom > /workspace/data/f$i; done';
const FORKS_AT_ONCE = 10;

/** Removes the volumes (and any container) of tasks the bench made: EndTask keeps a task's volumes by design. */
async function removeTaskLeftovers(taskIds: readonly string[]): Promise<void> {
  for (const id of taskIds) {
    const { stdout } = await run('docker', ['volume', 'ls', '-q', '--filter', `label=berth.task=${id}`]).catch(() => ({ stdout: '' }));
    const names = stdout.split('\n').filter(Boolean);
    if (names.length > 0) await run('docker', ['volume', 'rm', '-f', ...names]).catch(() => undefined);
  }
}

/** A container holding 100 MiB in its own layer, for the by-hand side; `docker rm -f` it afterwards. */
async function startFilledContainer(): Promise<string> {
  const { stdout } = await run('docker', ['run', '-d', '--label', BENCH_LABEL, '--entrypoint', 'sleep', SANDBOX_IMAGE, 'infinity']);
  const id = stdout.trim();
  await run('docker', ['exec', id, 'sh', '-c', WRITE_100_MIB]);
  return id;
}

/** Shared by both cases: a bench server, a warm task with 100 MiB, and a container like it for the baseline. */
class Fixture {
  server: BenchServer | undefined;
  readonly base = `bench-snap-base-${process.pid}`;
  sleeper = '';
  readonly tasks: string[] = [];
  readonly snapshots: string[] = [];
  readonly images: string[] = [];
  #n = 0;

  async setup(server: BenchServer): Promise<void> {
    this.server = server;
    this.tasks.push(this.base);
    await runTerminal(server, this.base, `${WRITE_100_MIB} && cd /workspace/data && export BENCH_MODE=forked`);
    this.sleeper = await startFilledContainer();
  }

  next(prefix: string): string {
    const id = `bench-${prefix}-${process.pid}-${this.#n++}`;
    this.tasks.push(id);
    return id;
  }

  async snapshot(): Promise<string> {
    const r = await this.server!.client.snapshot({ taskId: this.base, label: 'bench' });
    const id = r.snapshot?.snapshotId ?? '';
    this.snapshots.push(id);
    return id;
  }

  async fork(snapshotId: string): Promise<string> {
    const task = this.next('fork');
    await this.server!.client.fork({ snapshotId, sourceTaskId: '', taskId: task, label: '' });
    await runTerminal(this.server!, task, 'test "$BENCH_MODE" = forked && test -f f100');
    return task;
  }

  async commit(): Promise<string> {
    const image = `berth-bench-snapshot:${process.pid}-${this.#n++}`;
    await run('docker', ['commit', this.sleeper, image]);
    this.images.push(image);
    return image;
  }

  async endForks(): Promise<void> {
    const forks = this.tasks.filter((t) => t !== this.base);
    await Promise.all(forks.map((t) => this.server!.endTask(t).catch(() => undefined)));
  }

  async teardown(): Promise<void> {
    if (this.server) {
      await Promise.all(this.tasks.map((t) => this.server!.endTask(t).catch(() => undefined)));
      for (const id of this.snapshots) await this.server.client.deleteSnapshot({ snapshotId: id }).catch(() => undefined);
    }
    await removeTaskLeftovers(this.tasks);
    if (this.sleeper) await run('docker', ['rm', '-f', this.sleeper]).catch(() => undefined);
    for (const image of this.images) await run('docker', ['rmi', '-f', image]).catch(() => undefined);
  }
}

/** `docker run` of the image and a first `docker exec true`; resolves to the container id. */
async function runAndExec(image: string): Promise<string> {
  const { stdout } = await run('docker', ['run', '-d', '--label', BENCH_LABEL, '--entrypoint', 'sleep', image, 'infinity']);
  const id = stdout.trim();
  await runProcess('docker', ['exec', id, 'true']);
  return id;
}

function snapshotAndForkCase(): LatencyCase {
  const f = new Fixture();
  return {
    kind: 'latency',
    name: 'snapshot + fork + first command, docker task with 100 MiB written',
    baselineName: '`docker commit` + `docker run` + `docker exec true` (CLI, same files)',
    targets: [],
    plan: {
      smoke: { pairs: 1 },
      quick: { warmupPairs: 0, pairs: 5, minPairs: 3, budgetMs: 120_000 },
      full: { warmupPairs: 1, pairs: 15, minPairs: 8, budgetMs: 600_000 },
    },
    async setup(ctx) {
      const missing = await ctx.backendMissing('docker');
      if (missing !== undefined) return { skip: missing };
      await f.setup(await ctx.server(SERVER));
      return undefined;
    },
    async runA() {
      const t0 = performance.now();
      const snap = await f.snapshot();
      await f.fork(snap);
      const ms = performance.now() - t0;
      await f.endForks();
      return ms;
    },
    async runB() {
      const t0 = performance.now();
      const image = await f.commit();
      const id = await runAndExec(image);
      const ms = performance.now() - t0;
      await run('docker', ['rm', '-f', id]);
      return ms;
    },
    teardown: () => f.teardown(),
  };
}

function tenForksCase(): LoadCase {
  const f = new Fixture();
  let snapshotId = '';
  let image = '';
  const round = async (one: () => Promise<unknown>): Promise<LoadRound> => {
    const latenciesMs: number[] = [];
    let errors = 0;
    let firstError: string | undefined;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: FORKS_AT_ONCE }, async () => {
        const s = performance.now();
        try {
          await one();
          latenciesMs.push(performance.now() - s);
        } catch (err) {
          errors += 1;
          firstError ??= (err as Error).message;
        }
      }),
    );
    return { latenciesMs, elapsedMs: performance.now() - t0, errors, ...(firstError !== undefined ? { firstError } : {}) };
  };
  return {
    kind: 'load',
    name: `${FORKS_AT_ONCE} forks of one snapshot at once (100 MiB), first command in each`,
    baselineName: `${FORKS_AT_ONCE} \`docker run\` + \`docker exec true\` of one committed image at once`,
    concurrency: FORKS_AT_ONCE,
    targets: [
      {
        target: 'fork of a snapshot to its first command: p50 ≤ 1 s',
        judge: (r) => ({ measured: `p50 ${formatMs(r.load!.a.latency.p50)}`, met: r.load!.a.latency.p50 <= 1000 }),
      },
    ],
    plan: {
      smoke: { pairs: 1 },
      quick: { warmupPairs: 0, pairs: 2, minPairs: 1, budgetMs: 120_000 },
      full: { warmupPairs: 0, pairs: 5, minPairs: 3, budgetMs: 600_000 },
    },
    async setup(ctx) {
      const missing = await ctx.backendMissing('docker');
      if (missing !== undefined) return { skip: missing };
      await f.setup(await ctx.server(SERVER));
      snapshotId = await f.snapshot();
      image = await f.commit();
      return undefined;
    },
    async runA() {
      const r = await round(() => f.fork(snapshotId));
      await f.endForks();
      await removeTaskLeftovers(f.tasks.filter((t) => t !== f.base));
      return r;
    },
    async runB() {
      const ids: string[] = [];
      const r = await round(async () => ids.push(await runAndExec(image)));
      if (ids.length > 0) await run('docker', ['rm', '-f', ...ids]);
      return r;
    },
    teardown: () => f.teardown(),
  };
}

export default function cases(): BenchCase[] {
  return [snapshotAndForkCase(), tenForksCase()];
}
