/**
 * A trivial command on a warm daytona task, through the whole stack, against
 * the SDK's own per-command exec (`sandbox.process.executeCommand('true')`)
 * on the same sandbox. Both run against the Daytona stand-in (a test double
 * of Daytona's API on the local Docker engine, found through
 * test-doubles.ts), so these are stand-in figures: they compare the
 * agent path with per-command exec through the same control plane double,
 * and say nothing about Daytona's own latency.
 */
import type { Daytona, Sandbox } from '@daytonaio/sdk';
import type { BenchCase } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { runTerminal, unmeasured } from '../case-helpers.js';
import { SANDBOX_IMAGE } from '../docker-helpers.js';
import { startStandin, type StartedStandin } from '../test-doubles.js';

const TASK = 'bench-daytona-warm';
const API_KEY = 'bench-standin-key';

export default function cases(): BenchCase[] {
  let standIn: StartedStandin | undefined;
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
        const s = await startStandin('daytona', ctx.repoRoot, { DAYTONA_STANDIN_API_KEY: API_KEY });
        if ('skip' in s) return s;
        standIn = s;
        const apiUrl = `http://127.0.0.1:${s.port}/api`;
        const env = { DAYTONA_API_KEY: API_KEY, DAYTONA_API_URL: apiUrl, DAYTONA_TARGET: 'stand-in' };
        const srv = await ctx.server({
          backend: 'daytona',
          config: { terminal: { daytona_image: SANDBOX_IMAGE, container_persistent: false } },
          env,
        });
        server = srv;
        await unmeasured(ctx, "creating the daytona task's sandbox", () => runTerminal(srv, TASK, 'true'));
        const sdk = await import('@daytonaio/sdk');
        const { sandboxName } = await import('../../../executor/backends/daytona/daytona-backend.js');
        client = new sdk.Daytona({ apiKey: API_KEY, apiUrl, target: 'stand-in' });
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
        await standIn?.stop();
      },
    },
  ];
}
