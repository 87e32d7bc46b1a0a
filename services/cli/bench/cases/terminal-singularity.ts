/**
 * A trivial command on a warm singularity task, through the whole stack
 * (its exec agent already running in the task's instance), against
 * `apptainer exec instance://NAME true` on an instance of the same image:
 * what every command cost before the agent. Both go through the apptainer
 * test double (bubblewrap based, found through test-doubles.ts;
 * apptainer itself cannot be installed where Berth is measured), so the
 * baseline is the double's exec, not apptainer's: a real `apptainer exec`
 * starts its Go runtime and starter too and costs more, so the ratio here is
 * if anything unfavourable to Berth. Target: p50 ≤ 0.3× the baseline.
 */
import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { BenchCase, BenchContext } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { runProcess, runTerminal, unmeasured } from '../case-helpers.js';
import { formatMs } from '../stats.js';
import { apptainerDouble } from '../test-doubles.js';

const TASK = 'bench-singularity-warm';
const IMAGE = 'berth-sandbox:latest';
const BASELINE_INSTANCE = 'berth-bench-baseline';

/** Why the double cannot run here, or undefined. */
async function doubleUnavailable(ctx: BenchContext): Promise<string | undefined> {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) return 'the apptainer test double needs root (mount, nsenter)';
  for (const tool of ['bwrap', 'nsenter', 'unshare']) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) return `${tool} is not installed (the apptainer test double needs it)`;
  }
  const docker = await ctx.dockerUnavailable();
  if (docker !== undefined) return docker;
  if (spawnSync('docker', ['image', 'inspect', IMAGE], { stdio: 'ignore' }).status !== 0) return `the ${IMAGE} image is missing (make image)`;
  return undefined;
}

export default function cases(): BenchCase[] {
  let server: BenchServer | undefined;
  let scratch: string | undefined;
  let double = '';
  let doubleEnv: Record<string, string> = {};
  let instanceStarted = false;
  const run = promisify(execFile);
  const apptainer = (args: readonly string[]) => run(double, [...args], { env: { ...process.env, ...doubleEnv } });
  return [
    {
      kind: 'latency',
      name: 'terminal `true`, singularity backend (apptainer test double), warm task',
      baselineName: '`apptainer exec instance://NAME true` (test double), same image',
      plan: { quick: { pairs: 100, minPairs: 20, budgetMs: 15_000 } },
      targets: [
        {
          target: 'terminal on a warm singularity task: p50 ≤ 0.3× `apptainer exec` of the same command',
          judge: (r) => {
            const ratio = r.latency!.a.p50 / r.latency!.b.p50;
            return {
              measured: `${ratio.toFixed(2)}× (${formatMs(r.latency!.a.p50)} vs ${formatMs(r.latency!.b.p50)})`,
              met: ratio <= 0.3,
            };
          },
        },
      ],
      async setup(ctx) {
        const found = apptainerDouble(ctx.repoRoot);
        if (typeof found !== 'string') return found;
        double = found;
        const missing = (await ctx.backendMissing('singularity')) ?? (await doubleUnavailable(ctx));
        if (missing !== undefined) return { skip: missing };
        scratch = mkdtempSync(join(tmpdir(), 'berth-bench-singularity-'));
        // The exported root filesystem is shared with the tests' runs of the double (it takes seconds to make).
        doubleEnv = { APPTAINER_DOUBLE_STATE: join(scratch, 'double'), APPTAINER_DOUBLE_ROOTFS: process.env.APPTAINER_DOUBLE_ROOTFS ?? join(tmpdir(), 'berth-apptainer-double-rootfs') };
        const s = await ctx.server({
          backend: 'singularity',
          config: {
            terminal: { singularity_binary: double, singularity_image: `docker://${IMAGE}`, container_persistent: false },
          },
          env: doubleEnv,
        });
        server = s;
        await unmeasured(ctx, "starting the singularity task's instance and agent", () => runTerminal(s, TASK, 'true'));
        const sif = join(scratch, 'baseline.sif');
        await apptainer(['build', sif, `docker://${IMAGE}`]);
        await apptainer(['instance', 'start', '--containall', '--no-home', '--writable-tmpfs', sif, BASELINE_INSTANCE]);
        instanceStarted = true;
        await runProcess(double, ['exec', `instance://${BASELINE_INSTANCE}`, 'true'], { env: { ...process.env, ...doubleEnv } });
        return undefined;
      },
      runA: () => runTerminal(server!, TASK, 'true'),
      runB: () => runProcess(double, ['exec', `instance://${BASELINE_INSTANCE}`, 'true'], { env: { ...process.env, ...doubleEnv } }),
      async teardown() {
        if (instanceStarted) await apptainer(['instance', 'stop', BASELINE_INSTANCE]).catch(() => undefined);
        await server?.endTask(TASK).catch(() => undefined);
        if (scratch) rmSync(scratch, { recursive: true, force: true });
      },
    },
  ];
}
