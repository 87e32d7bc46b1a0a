/**
 * Which of Berth's container settings cost the Docker engine's start:
 * N containers at once running `true` through the Engine API
 * (engine-start.ts), first with a plain spec (what `docker run IMAGE true`
 * asks for), then with one of Berth's settings added at a time, each taken
 * from the spec container-spec.ts builds for a bench server's task, then
 * with Berth's whole spec. The variants run round-robin, the first one
 * moving along each cycle, so a load that drifts meets each alike; each
 * variant's p50 is divided by the plain spec's of the same cycle, and the
 * report gives the median of those ratios. No Berth server runs: the
 * engine alone.
 *
 * Usage: node dist/services/cli/bench/engine-ablation.js [--tasks N] [--cycles C]
 *
 * It makes (and removes at the end, or on SIGINT/SIGTERM) a bridge network
 * with Berth's options, a cgroup parent, host directories; every container
 * and volume carries its labels (engine-start.ts).
 */
import { rmdir } from 'node:fs/promises';
import { readdirSync } from 'node:fs';
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
  readonly p50Ms: number;
  /** The median over cycles of this variant's p50 over the plain spec's p50 in the same cycle. */
  readonly ratio: number;
  readonly createMs: number;
  readonly startMs: number;
  readonly errors: number;
}

/** The order of the variants in cycle `cycle`: round-robin, the first one moving along by one each cycle. */
export function cycleOrder(variants: number, cycle: number): number[] {
  return Array.from({ length: variants }, (_, i) => (i + cycle) % variants);
}

/** Per variant, from each cycle's p50 (ms, by variant, NaN where a round failed): the median p50 and the median ratio to variant 0's. */
export function summarizeCycles(p50s: readonly (readonly number[])[]): { p50Ms: number; ratio: number }[] {
  const variants = p50s[0]?.length ?? 0;
  return Array.from({ length: variants }, (_, v) => {
    const own = p50s.map((c) => c[v]!).filter((x) => Number.isFinite(x));
    const ratios = p50s.map((c) => c[v]! / c[0]!).filter((x) => Number.isFinite(x));
    return { p50Ms: own.length > 0 ? median(own) : NaN, ratio: ratios.length > 0 ? median(ratios) : NaN };
  });
}

/** The markdown table of the results. */
export function ablationTable(results: readonly VariantResult[]): string {
  const ms = (v: number) => (Number.isFinite(v) ? `${Math.round(v)}` : '–');
  const lines = [
    '| variant | p50 (ms) | × plain | create p50 (ms) | start p50 (ms) |',
    '| --- | ---: | ---: | ---: | ---: |',
    ...results.map(
      (r) =>
        `| ${r.name}${r.errors > 0 ? ` (${r.errors} failed)` : ''} | ${ms(r.p50Ms)} | ${Number.isFinite(r.ratio) ? r.ratio.toFixed(2) : '–'} | ${ms(r.createMs)} | ${ms(r.startMs)} |`,
    ),
  ];
  return lines.join('\n');
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
    // cgroupfs leaves the parents Docker made for CgroupParent: every controller's, deepest first.
    for (const controller of readdirSync('/sys/fs/cgroup', { withFileTypes: true }).filter((d) => d.isDirectory())) {
      const top = `/sys/fs/cgroup/${controller.name}/${this.cgroupTop}`;
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
    const placement: TaskPlacement = { network: fixture.network, cgroupParent: `/${fixture.cgroupTop}/t0`, uid: 10_000 };
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
    process.stderr.write(`${tasks} at once, ${cycles} cycles of ${VARIANTS.length} variants; load ${load[0]!.toFixed(2)}\n`);
    const p50s: number[][] = [];
    const steps: EngineSteps[][] = VARIANTS.map(() => []);
    const errors = VARIANTS.map(() => 0);
    for (let c = 0; c < cycles; c++) {
      const cycle: number[] = VARIANTS.map(() => NaN);
      for (const v of cycleOrder(VARIANTS.length, c)) {
        const round = await engineRound(docker, specs[v]!, steps[v]);
        errors[v]! += round.errors;
        if (round.firstError) process.stderr.write(`${VARIANTS[v]!.name}: ${round.firstError}\n`);
        cycle[v] = round.errors === 0 ? median(round.latenciesMs) : NaN;
        process.stderr.write(`cycle ${c + 1}: ${VARIANTS[v]!.name}: p50 ${Math.round(cycle[v]!)} ms\n`);
      }
      p50s.push(cycle);
      load.push(loadavg()[0]!);
    }
    const summary = summarizeCycles(p50s);
    const results = VARIANTS.map((v, i): VariantResult => ({
      name: v.name,
      ...summary[i]!,
      createMs: steps[i]!.length > 0 ? median(steps[i]!.map((s) => s.createMs)) : NaN,
      startMs: steps[i]!.length > 0 ? median(steps[i]!.map((s) => s.startMs)) : NaN,
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
