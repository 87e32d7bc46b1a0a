/**
 * Which of Berth's container settings cost the Docker engine's start:
 * N containers at once running `true` through the Engine API
 * (engine-start.ts), first with a plain spec (what `docker run IMAGE true`
 * asks for), then with one of Berth's settings added at a time, each taken
 * from the spec container-spec.ts builds for a bench server's task, then
 * with Berth's whole spec. Each variant's round runs beside a plain one
 * (A B, then B A the next cycle), the variants round-robin, so a load that
 * drifts meets each alike; each variant's p50 is divided by its plain
 * neighbour's, and the report gives the median of those ratios, and the
 * same for the engine's CPU time (dockerd's and containerd's, which other
 * users of the engine add to, but not the machine's other load). No Berth
 * server runs: the engine alone.
 *
 * Usage: node dist/services/cli/bench/engine-ablation.js [--tasks N] [--cycles C]
 *
 * It makes (and removes at the end, or on SIGINT/SIGTERM) a bridge network
 * with Berth's options, a cgroup parent, host directories; every container
 * and volume carries its labels (engine-start.ts).
 */
import { rmdir } from 'node:fs/promises';
import { readdirSync, readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import type Docker from 'dockerode';
import { parseConfig } from '../../common/config-load.js';
import { BENCH_LABEL, dockerClient, SANDBOX_IMAGE } from './docker-helpers.js';
import {
  benchHostDir,
  benchLabels,
  engineRound,
  removeEngineLeftovers,
  runningTrue,
  taskSpecRunningTrue,
  type BenchHostDir,
  type EngineSteps,
  type TaskPlacement,
} from './engine-start.js';
import { processCpuMs } from './listening-child.js';
import { median } from './stats.js';

type Spec = Docker.ContainerCreateOptions;

/** One variant: its name, and the spec of its `i`th container from the plain spec and Berth's (for the same container). */
interface Variant {
  readonly name: string;
  readonly spec: (plain: Spec, berth: BerthSpecs) => Spec;
}

/** Berth's spec of one container as the bench server builds it, and under the two settings it leaves off (persistent volumes, a read-only root). */
interface BerthSpecs {
  /** A user-defined bridge network with Docker's defaults. */
  readonly plainNetwork: string;
  readonly task: Spec;
  readonly persistent: Spec;
  readonly readOnly: Spec;
}

/** The plain spec with some of Berth's host config. */
function withHost(plain: Spec, host: Docker.HostConfig): Spec {
  return { ...plain, HostConfig: { ...plain.HostConfig, ...host } };
}

export const VARIANTS: readonly Variant[] = [
  { name: 'plain (`docker run IMAGE true`: default bridge, no settings)', spec: (p) => p },
  {
    name: 'a user-defined bridge network (Docker\'s defaults; the embedded DNS)',
    spec: (p, b) => withHost(p, { NetworkMode: b.plainNetwork }),
  },
  {
    name: "Berth's own bridge network (its options: no inter-container traffic)",
    spec: (p, b) => withHost(p, { NetworkMode: b.task.HostConfig!.NetworkMode! }),
  },
  {
    name: 'binds: host directory at /run/berth, account files, resolv.conf',
    spec: (p, b) => withHost(p, { Mounts: b.task.HostConfig!.Mounts! }),
  },
  {
    name: 'named volumes: workspace and home, new, filled from the image (`container_persistent`)',
    spec: (p, b) => withHost(p, { Mounts: b.persistent.HostConfig!.Mounts!.filter((m) => m.Type === 'volume') }),
  },
  {
    name: 'capabilities (drop all, add 4), no-new-privileges',
    spec: (p, b) => {
      const h = b.task.HostConfig!;
      return withHost(p, { CapDrop: h.CapDrop!, CapAdd: h.CapAdd!, SecurityOpt: h.SecurityOpt! });
    },
  },
  { name: 'tmpfs: /tmp, /var/tmp, /run', spec: (p, b) => withHost(p, { Tmpfs: b.task.HostConfig!.Tmpfs! }) },
  {
    name: 'read-only root, tmpfs workspace and home too (`docker.read_only_root`)',
    spec: (p, b) => withHost(p, { ReadonlyRootfs: true, Tmpfs: b.readOnly.HostConfig!.Tmpfs! }),
  },
  {
    name: 'limits: memory (no swap), cpu quota, pids',
    spec: (p, b) => {
      const h = b.task.HostConfig!;
      return withHost(p, { Memory: h.Memory!, MemorySwap: h.MemorySwap!, NanoCpus: h.NanoCpus!, PidsLimit: h.PidsLimit! });
    },
  },
  { name: "cgroup parent (the tenant's)", spec: (p, b) => withHost(p, { CgroupParent: b.task.HostConfig!.CgroupParent! }) },
  { name: 'init (docker-init as PID 1)', spec: (p) => withHost(p, { Init: true }) },
  {
    name: "user 0:0, workdir, environment, Berth's labels",
    spec: (p, b) => ({ ...p, User: b.task.User!, WorkingDir: b.task.WorkingDir!, Env: b.task.Env!, Labels: b.task.Labels! }),
  },
  { name: "Berth's whole spec", spec: (_p, b) => b.task },
  {
    name: "Berth's whole spec on the default bridge",
    spec: (_p, b) => ({ ...b.task, HostConfig: { ...b.task.HostConfig, NetworkMode: 'bridge' } }),
  },
];

/** What one variant measured over the cycles. */
export interface VariantResult {
  readonly name: string;
  /** The median of its rounds' p50s. */
  readonly p50Ms: number;
  /** The median over its pairs of its round's p50 over the plain spec's round's beside it. */
  readonly ratio: number;
  /** The same for the engine's CPU time in the round (dockerd and containerd, with the children they reaped). */
  readonly cpuRatio: number;
  /** The engine's CPU time per container, median over its rounds, ms. */
  readonly cpuMs: number;
  readonly createMs: number;
  readonly startMs: number;
  readonly errors: number;
}

/**
 * The pairs of cycle `cycle`: each variant but the plain one (0) beside a
 * plain round, round-robin with the first one moving along by one each
 * cycle, and the plain round first in even cycles, second in odd ones.
 */
export function cyclePairs(variants: number, cycle: number): [number, number][] {
  const others = variants - 1;
  return Array.from({ length: others }, (_, i): [number, number] => {
    const v = 1 + ((i + cycle) % others);
    return cycle % 2 === 0 ? [0, v] : [v, 0];
  });
}

/** The median of `values` less the ones that are not numbers (failed rounds); NaN when none is left. */
export function medianOf(values: readonly number[]): number {
  const finite = values.filter((v) => Number.isFinite(v));
  return finite.length > 0 ? median(finite) : NaN;
}

/** The markdown table of the results. */
export function ablationTable(results: readonly VariantResult[]): string {
  const ms = (v: number) => (Number.isFinite(v) ? `${Math.round(v)}` : '–');
  const times = (v: number) => (Number.isFinite(v) ? v.toFixed(2) : '–');
  const lines = [
    '| variant | p50 (ms) | × plain (paired) | engine CPU per container (ms) | CPU × plain (paired) | create p50 (ms) | start p50 (ms) |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...results.map(
      (r) =>
        `| ${r.name}${r.errors > 0 ? ` (${r.errors} failed)` : ''} | ${ms(r.p50Ms)} | ${times(r.ratio)} | ${ms(r.cpuMs)} | ${times(r.cpuRatio)} | ${ms(r.createMs)} | ${ms(r.startMs)} |`,
    ),
  ];
  return lines.join('\n');
}

/** CPU time, ms, of the processes `pids` and the children they reaped (0 for one that is gone). */
function cpuMsOf(pids: readonly number[]): number {
  return pids.reduce((total, pid) => total + (processCpuMs(pid, { reaped: true }) ?? 0), 0);
}

/** The engine's processes: dockerd and containerd, by name. */
function enginePids(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const comm = (() => {
      try {
        return readFileSync(`/proc/${entry}/comm`, 'utf8').trim();
      } catch {
        return '';
      }
    })();
    if (comm === 'dockerd' || comm === 'containerd') pids.push(Number(entry));
  }
  return pids;
}

/** What the ablation makes on the engine besides containers and volumes: the network, the cgroup parent, host directories. */
class Fixture {
  readonly network = `bench-ablation-${process.pid}`;
  readonly plainNetwork = `bench-ablation-plain-${process.pid}`;
  readonly cgroupTop = `bench-ablation-${process.pid}`;
  dirs: BenchHostDir[] = [];
  constructor(readonly docker: Docker) {}

  async make(tasks: number): Promise<void> {
    await this.docker.createNetwork({
      Name: this.network,
      Driver: 'bridge',
      CheckDuplicate: true,
      // As Berth's own (network-policy.ts networkCreateOptions), under another bridge name.
      Options: {
        'com.docker.network.bridge.name': `bab${process.pid}`.slice(0, 15),
        'com.docker.network.bridge.enable_icc': 'false',
        'com.docker.network.bridge.enable_ip_masquerade': 'true',
      },
      Labels: benchLabels({}),
    });
    await this.docker.createNetwork({ Name: this.plainNetwork, CheckDuplicate: true, Labels: benchLabels({}) });
    for (let i = 0; i < tasks; i++) this.dirs.push(await benchHostDir());
  }

  async remove(): Promise<void> {
    await removeEngineLeftovers(this.docker);
    for (const n of [this.network, this.plainNetwork]) await this.docker.getNetwork(n).remove().catch(() => undefined);
    await Promise.all(this.dirs.map((d) => d.remove()));
    // cgroupfs leaves the parents Docker made for CgroupParent: every controller's (v1) or the one tree's (v2), deepest first.
    const controllers = readdirSync('/sys/fs/cgroup', { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => `${d.name}/`);
    for (const controller of ['', ...controllers]) {
      const top = `/sys/fs/cgroup/${controller}${this.cgroupTop}`;
      await rmdir(`${top}/t0`).catch(() => undefined);
      await rmdir(top).catch(() => undefined);
    }
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { tasks: { type: 'string', default: '8' }, cycles: { type: 'string', default: '3' } } });
  const tasks = Number(values.tasks);
  const cycles = Number(values.cycles);
  const docker = await dockerClient();
  const fixture = new Fixture(docker);
  const stop = () => {
    void fixture.remove().finally(() => process.exit(130));
  };
  process.once('SIGINT', stop).once('SIGTERM', stop);
  try {
    await fixture.make(tasks);
    // The bench server's config (new-docker-tasks.ts), and where a task of its would be placed.
    const config = (persistent: boolean, readOnly: boolean) =>
      parseConfig({ terminal: { container_persistent: persistent, container_memory: 256 }, docker: { read_only_root: readOnly } });
    // As TaskNames.cgroupParent: a slice under systemd's driver, a path under cgroupfs.
    const driver = ((await docker.info()) as { CgroupDriver?: string }).CgroupDriver;
    const cgroupParent = driver === 'systemd' ? `benchablation${process.pid}.slice` : `/${fixture.cgroupTop}/t0`;
    const placement: TaskPlacement = { network: fixture.network, cgroupParent, uid: 10_000 };
    const berth = fixture.dirs.map((d, i): BerthSpecs => {
      const name = `bench-ablation-${process.pid}-${i}`;
      return {
        plainNetwork: fixture.plainNetwork,
        task: taskSpecRunningTrue(config(false, false), placement, name, d.path),
        persistent: taskSpecRunningTrue(config(true, false), placement, name, d.path),
        readOnly: taskSpecRunningTrue(config(false, true), placement, name, d.path),
      };
    });
    const plain = berth.map((b) => runningTrue({ name: b.task.name!, Image: SANDBOX_IMAGE, HostConfig: {} }));
    const specs = VARIANTS.map((v) => plain.map((p, i) => v.spec(p, berth[i]!)));
    const load = [loadavg()[0]!];
    process.stderr.write(`${tasks} at once, ${cycles} cycles of ${VARIANTS.length - 1} pairs; load ${load[0]!.toFixed(2)}\n`);
    const engine = enginePids();
    const p50s: number[][] = VARIANTS.map(() => []);
    const cpus: number[][] = VARIANTS.map(() => []);
    const ratios: number[][] = VARIANTS.map(() => []);
    const cpuRatios: number[][] = VARIANTS.map(() => []);
    const steps: EngineSteps[][] = VARIANTS.map(() => []);
    const errors = VARIANTS.map(() => 0);
    const round = async (v: number): Promise<{ p50: number; cpu: number }> => {
      const cpu0 = cpuMsOf(engine);
      const r = await engineRound(docker, specs[v]!, steps[v]);
      const cpu = (cpuMsOf(engine) - cpu0) / tasks;
      errors[v]! += r.errors;
      if (r.firstError) process.stderr.write(`${VARIANTS[v]!.name}: ${r.firstError}\n`);
      const p50 = r.errors === 0 ? median(r.latenciesMs) : NaN;
      p50s[v]!.push(p50);
      cpus[v]!.push(cpu);
      return { p50, cpu };
    };
    for (let c = 0; c < cycles; c++) {
      for (const pair of cyclePairs(VARIANTS.length, c)) {
        const [first, second] = [await round(pair[0]), await round(pair[1])];
        const [plain, other, v] = pair[0] === 0 ? [first, second, pair[1]] : [second, first, pair[0]];
        ratios[v]!.push(other.p50 / plain.p50);
        cpuRatios[v]!.push(other.cpu / plain.cpu);
        process.stderr.write(`cycle ${c + 1}: ${VARIANTS[v]!.name}: p50 ${Math.round(other.p50)} vs ${Math.round(plain.p50)} ms\n`);
      }
      load.push(loadavg()[0]!);
    }
    const results = VARIANTS.map((v, i): VariantResult => ({
      name: v.name,
      p50Ms: medianOf(p50s[i]!),
      ratio: i === 0 ? 1 : medianOf(ratios[i]!),
      cpuMs: medianOf(cpus[i]!),
      cpuRatio: i === 0 ? 1 : medianOf(cpuRatios[i]!),
      createMs: medianOf(steps[i]!.map((s) => s.createMs)),
      startMs: medianOf(steps[i]!.map((s) => s.startMs)),
      errors: errors[i]!,
    }));
    process.stdout.write(`${ablationTable(results)}\n\n`);
    process.stdout.write(
      `${tasks} containers at once per round, ${cycles} cycles, image ${SANDBOX_IMAGE}, label ${BENCH_LABEL}; ` +
        `load average (1 min) per cycle: ${load.map((l) => l.toFixed(2)).join(', ')}\n`,
    );
  } finally {
    await fixture.remove();
  }
}

if (process.argv[1]?.endsWith('engine-ablation.js')) {
  main().catch((err: unknown) => {
    process.stderr.write(`${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  });
}
