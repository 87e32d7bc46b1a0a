/**
 * A trivial command on a warm modal task (its sandbox running, its exec
 * agent up), through the whole stack, against the Modal SDK's own exec of
 * `true` on the same sandbox (one exec per command, which is what a backend
 * without the agent would pay).
 *
 * Modal here is the stand-in (a test double of Modal's control plane, backed
 * by the local Docker engine; found through test-doubles.ts):
 * these are stand-in figures, not Modal's cloud, where every exec also
 * crosses the network to Modal's command router. Target: the agent path at
 * least 2× faster than the SDK's exec (p50).
 */
import type { Sandbox } from 'modal';
import { sandboxName } from '../../../executor/backends/modal/modal-backend.js';
import type { BenchCase } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { runTerminal, unmeasured } from '../case-helpers.js';
import { formatMs } from '../stats.js';
import { startStandin, type StartedStandin } from '../test-doubles.js';

const TASK = 'bench-modal-warm';
const IMAGE = 'berth-sandbox:latest';
const CREDENTIALS = { MODAL_TOKEN_ID: 'ak-bench', MODAL_TOKEN_SECRET: 'as-bench' };

export default function cases(): BenchCase[] {
  let standin: StartedStandin | undefined;
  let server: BenchServer | undefined;
  let sandbox: Sandbox | undefined;
  const saved: Record<string, string | undefined> = {};
  return [
    {
      kind: 'latency',
      name: 'terminal `true`, modal backend (Modal stand-in), warm task',
      baselineName: "the Modal SDK's own exec of `true` on the same sandbox (one exec per command)",
      plan: { quick: { pairs: 100, minPairs: 20, budgetMs: 15_000 } },
      targets: [
        {
          target: "terminal on a warm modal task: ≥ 2× faster than the SDK's per-command exec (p50, stand-in)",
          judge: (r) => {
            const speedup = r.latency!.b.p50 / r.latency!.a.p50;
            return { measured: `${speedup.toFixed(1)}× (${formatMs(r.latency!.a.p50)} vs ${formatMs(r.latency!.b.p50)})`, met: speedup >= 2 };
          },
        },
      ],
      async setup(ctx) {
        const missing = (await ctx.backendMissing('modal')) ?? (await ctx.dockerUnavailable());
        if (missing !== undefined) return { skip: missing };
        const started = await startStandin('modal', ctx.repoRoot, CREDENTIALS);
        if ('skip' in started) return started;
        standin = started;
        // The bench server inherits this process's environment: the SDK's own settings point it at the stand-in.
        const sdkEnv = { MODAL_SERVER_URL: `http://127.0.0.1:${started.port}`, ...CREDENTIALS };
        for (const [name, value] of Object.entries(sdkEnv)) {
          saved[name] = process.env[name];
          process.env[name] = value;
        }
        const s = await ctx.server({ backend: 'modal', config: { terminal: { modal_image: IMAGE, container_persistent: false } } });
        server = s;
        await unmeasured(ctx, "creating the modal task's sandbox", () => runTerminal(s, TASK, 'true'));
        const { ModalClient } = await import('modal');
        const silent = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
        const client = new ModalClient({ logger: silent });
        sandbox = await client.sandboxes.fromName('berth', sandboxName({ tenant: 'default', taskId: TASK }));
        await (await sandbox.exec(['true'])).wait();
        return undefined;
      },
      runA: () => runTerminal(server!, TASK, 'true'),
      runB: async () => {
        const code = await (await sandbox!.exec(['true'])).wait();
        if (code !== 0) throw new Error(`the SDK's exec of true exited ${code}`);
      },
      async teardown() {
        sandbox?.detach();
        await server?.endTask(TASK).catch(() => undefined);
        for (const [name, value] of Object.entries(saved)) {
          if (value === undefined) delete process.env[name];
          else process.env[name] = value;
        }
        await standin?.stop();
      },
    },
  ];
}
