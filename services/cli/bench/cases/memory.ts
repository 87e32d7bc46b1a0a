/**
 * Resident memory of the executor and the dispatcher, each as its own
 * `bin/berth executor` / `bin/berth dispatcher` process (so /proc tells them
 * apart): just started; idle (no live tasks, after one round of 50 tasks
 * came and went, so idle and loaded readings share their compiled code and
 * heap history); with 50 live tasks on the local backend; and the difference
 * per task. The baseline is a bare Node process, the floor of any Node
 * service. Both servers run with the image's Node flags (server-node-flags.ts).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createChannel, createClient, type Channel } from 'nice-grpc';
import { DispatcherDefinition, type DispatcherClient } from '../../../gen/berth/v1/dispatcher.js';
import type { BenchCase, BenchContext, BenchMode } from '../bench-case.js';
import { benchServerEnv } from '../bench-server-process.js';
import { checkTerminalResult, unmeasured } from '../case-helpers.js';
import { median } from '../stats.js';
import { rssKiB, startListeningChild, type ListeningChild } from '../listening-child.js';
import { SERVER_NODE_FLAGS } from '../../server-node-flags.js';

/** RSS is read this many times, this far apart, and the median kept: a GC in between moves one reading only. */
const READINGS = 5;
const READING_GAP_MS = 200;

async function settledRssKiB(pid: number, readings: number): Promise<number> {
  const values: number[] = [];
  for (let i = 0; i < readings; i++) {
    await sleep(READING_GAP_MS);
    values.push(rssKiB(pid));
  }
  return median(values);
}

const MIB = 1024;

export default function cases(mode: BenchMode): BenchCase[] {
  // Smoke only proves the case works; it does not need the full count.
  const liveTasks = mode === 'smoke' ? 5 : 50;
  const readings = mode === 'smoke' ? 1 : READINGS;
  let scratch: string | undefined;
  let executor: ListeningChild | undefined;
  let dispatcher: ListeningChild | undefined;
  let bareNode: ListeningChild | undefined;
  let channel: Channel | undefined;
  let client: DispatcherClient | undefined;
  let ctx: BenchContext | undefined;
  let startedExec = 0;
  let startedDisp = 0;

  /** Starts `liveTasks` tasks (one command each), runs `whileLive`, then ends them. */
  const liveTaskCycle = async (whileLive: () => Promise<void>) => {
    const ids = Array.from({ length: liveTasks }, (_, i) => `bench-mem-${i}`);
    await Promise.all(
      ids.map((taskId) =>
        unmeasured(ctx!, `starting ${taskId}`, async () => {
          const r = await client!.callTool({ name: 'terminal', argumentsJson: '{"command":"true"}', taskId, sessionId: '' });
          checkTerminalResult(r.resultJson);
        }),
      ),
    );
    await whileLive();
    await Promise.all(ids.map((taskId) => unmeasured(ctx!, `ending ${taskId}`, () => client!.endTask({ taskId }))));
  };

  return [
    {
      kind: 'gauge',
      name: `executor and dispatcher RSS, idle and with ${liveTasks} live tasks`,
      baselineName: 'bare node process',
      gauges: [
        { key: 'executor RSS, just started', unit: 'MiB', baselineKey: 'bare node RSS' },
        { key: 'dispatcher RSS, just started', unit: 'MiB', baselineKey: 'bare node RSS' },
        { key: 'executor RSS, idle', unit: 'MiB', baselineKey: 'bare node RSS' },
        { key: 'dispatcher RSS, idle', unit: 'MiB', baselineKey: 'bare node RSS' },
        { key: `executor RSS, ${liveTasks} live tasks`, unit: 'MiB', baselineKey: 'bare node RSS' },
        { key: `dispatcher RSS, ${liveTasks} live tasks`, unit: 'MiB', baselineKey: 'bare node RSS' },
        { key: 'executor RSS per live task', unit: 'KiB' },
        { key: 'dispatcher RSS per live task', unit: 'KiB' },
      ],
      async setup(context) {
        ctx = context;
        scratch = mkdtempSync(join(tmpdir(), 'berth-bench-mem-'));
        const secret = randomBytes(16).toString('hex');
        const bin = join(context.repoRoot, 'bin', 'berth');
        const env = benchServerEnv(scratch);
        executor = await startListeningChild({
          name: 'berth executor',
          args: [...SERVER_NODE_FLAGS, bin, 'executor', '--backend', 'local', '--port', '0', '--log-level', 'warn'],
          env: { ...env, BERTH_EXECUTOR_SECRET: secret },
          cwd: scratch,
        });
        const configPath = join(scratch, 'config.yaml');
        writeFileSync(
          configPath,
          JSON.stringify({ executors: [{ address: executor.address, backend: 'local' }], executor: { shared_secret: secret } }),
        );
        dispatcher = await startListeningChild({
          name: 'berth dispatcher',
          args: [...SERVER_NODE_FLAGS, bin, 'dispatcher', '--config', configPath, '--port', '0', '--log-level', 'warn'],
          env,
          cwd: scratch,
        });
        bareNode = await startListeningChild({
          name: 'bare node',
          args: ['-e', "process.stdout.write('serving on -\\n'); setInterval(() => {}, 1 << 30)"],
          cwd: scratch,
        });
        channel = createChannel(dispatcher.address);
        client = createClient(DispatcherDefinition, channel);
        [startedExec, startedDisp] = await Promise.all([
          settledRssKiB(executor.pid, readings),
          settledRssKiB(dispatcher.pid, readings),
        ]);
        // One full cycle first (tasks created, used, ended), so that idle and loaded readings share the
        // same code paths compiled and the same heap history, and differ only by the live tasks.
        await liveTaskCycle(async () => {});
      },
      async runA() {
        const [idleExec, idleDisp] = await Promise.all([
          settledRssKiB(executor!.pid, readings),
          settledRssKiB(dispatcher!.pid, readings),
        ]);
        let liveExec = 0;
        let liveDisp = 0;
        await liveTaskCycle(async () => {
          [liveExec, liveDisp] = await Promise.all([
            settledRssKiB(executor!.pid, readings),
            settledRssKiB(dispatcher!.pid, readings),
          ]);
        });
        return {
          'executor RSS, just started': startedExec / MIB,
          'dispatcher RSS, just started': startedDisp / MIB,
          'executor RSS, idle': idleExec / MIB,
          'dispatcher RSS, idle': idleDisp / MIB,
          [`executor RSS, ${liveTasks} live tasks`]: liveExec / MIB,
          [`dispatcher RSS, ${liveTasks} live tasks`]: liveDisp / MIB,
          'executor RSS per live task': (liveExec - idleExec) / liveTasks,
          'dispatcher RSS per live task': (liveDisp - idleDisp) / liveTasks,
        };
      },
      async runB() {
        return { 'bare node RSS': rssKiB(bareNode!.pid) / MIB };
      },
      async teardown() {
        channel?.close();
        await Promise.all([executor?.stop(), dispatcher?.stop(), bareNode?.stop()]);
        if (scratch !== undefined) rmSync(scratch, { recursive: true, force: true });
      },
    },
  ];
}
