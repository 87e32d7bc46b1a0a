/**
 * A trivial command on a warm daytona task, through the whole stack, against
 * the SDK's own per-command exec (`sandbox.process.executeCommand('true')`)
 * on the same sandbox. Both run against the Daytona stand-in (a test double
 * of Daytona's API on the local Docker engine, built with the tests into
 * dist/test/standins/), so these are stand-in figures: they compare the
 * agent path with per-command exec through the same control plane double,
 * and say nothing about Daytona's own latency.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Daytona, Sandbox } from '@daytonaio/sdk';
import type { BenchCase } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { runTerminal, unmeasured } from '../case-helpers.js';
import { SANDBOX_IMAGE } from '../docker-helpers.js';

const TASK = 'bench-daytona-warm';
const API_KEY = 'bench-standin-key';

interface StandIn {
  readonly child: ChildProcess;
  readonly apiUrl: string;
}

/** Starts `npm run standin -- daytona` (its compiled entry) on a free port. */
function startStandIn(main: string): Promise<StandIn> {
  const child = spawn(process.execPath, [main, 'daytona', '--port', '0'], {
    env: { ...process.env, DAYTONA_STANDIN_API_KEY: API_KEY },
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      child.kill('SIGTERM');
      reject(new Error(`the Daytona stand-in did not start: ${out}`));
    }, 30_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      const m = /listening on (\d+)\n/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ child, apiUrl: `http://127.0.0.1:${m[1]}/api` });
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the Daytona stand-in exited with ${code}: ${out}`));
    });
  });
}

async function stopStandIn(standIn: StandIn | undefined): Promise<void> {
  if (!standIn || standIn.child.exitCode !== null) return;
  const exited = new Promise((resolve) => standIn.child.once('exit', resolve));
  standIn.child.kill('SIGTERM');
  await exited;
}

export default function cases(): BenchCase[] {
  let standIn: StandIn | undefined;
  let server: BenchServer | undefined;
  let client: Daytona | undefined;
  let sandbox: Sandbox | undefined;
  return [
    {
      kind: 'latency',
      name: 'terminal `true`, daytona backend (stand-in), warm task',
      baselineName: "the SDK's per-command exec of `true` on the same sandbox (stand-in)",
      async setup(ctx) {
        const missing = (await ctx.backendMissing('daytona')) ?? (await ctx.dockerUnavailable());
        if (missing !== undefined) return { skip: missing };
        const main = join(ctx.repoRoot, 'dist', 'test', 'standins', 'main.js');
        if (!existsSync(main)) return { skip: 'the Daytona stand-in is not built (dist/test/standins/main.js; npm run build)' };
        const s = await startStandIn(main);
        standIn = s;
        const env = { DAYTONA_API_KEY: API_KEY, DAYTONA_API_URL: s.apiUrl, DAYTONA_TARGET: 'stand-in' };
        const srv = await ctx.server({
          backend: 'daytona',
          config: { terminal: { daytona_image: SANDBOX_IMAGE, container_persistent: false } },
          env,
        });
        server = srv;
        await unmeasured(ctx, "creating the daytona task's sandbox", () => runTerminal(srv, TASK, 'true'));
        const sdk = await import('@daytonaio/sdk');
        const { sandboxName } = await import('../../../executor/backends/daytona/daytona-backend.js');
        client = new sdk.Daytona({ apiKey: API_KEY, apiUrl: s.apiUrl, target: 'stand-in' });
        sandbox = await client.get(sandboxName({ tenant: 'default', taskId: TASK }));
        await sandbox.process.executeCommand('true');
        return undefined;
      },
      runA: () => runTerminal(server!, TASK, 'true'),
      runB: async () => {
        const r = await sandbox!.process.executeCommand('true');
        if (r.exitCode !== 0) throw new Error(`executeCommand true exited ${r.exitCode}`);
      },
      async teardown() {
        await server?.endTask(TASK).catch(() => undefined);
        await client?.[Symbol.asyncDispose]().catch(() => undefined);
        // The bench server stays up for the context to stop; the stand-in removes its containers now.
        await stopStandIn(standIn);
      },
    },
  ];
}
