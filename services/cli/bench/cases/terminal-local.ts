/**
 * A trivial command through the whole stack on the local backend (client →
 * dispatcher → executor → shell-state runner → bash), against spawning
 * `bash -c true` directly from the client process.
 */
import type { BenchCase } from '../bench-case.js';
import type { BenchServer } from '../bench-server-process.js';
import { runTerminal, spawnBash, unmeasured } from '../case-helpers.js';

export default function cases(): BenchCase[] {
  let server: BenchServer | undefined;
  const task = 'bench-terminal-local';
  return [
    {
      kind: 'latency',
      name: 'terminal `true`, local backend',
      baselineName: "spawn('bash', ['-c', 'true'])",
      async setup(ctx) {
        const s = await ctx.server();
        server = s;
        await unmeasured(ctx, 'warming the local task', () => runTerminal(s, task, 'true'));
      },
      runA: () => runTerminal(server!, task, 'true'),
      runB: () => spawnBash('true'),
      async teardown() {
        await server?.endTask(task);
      },
    },
  ];
}
