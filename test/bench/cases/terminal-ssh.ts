/**
 * A trivial command on the ssh backend against the same command over a
 * plain ssh2 exec to the same sshd. Waits for the ssh backend and its sshd
 * fixture; until both are here it is skipped with the reason.
 */
import type { BenchCase } from '../bench-case.js';

export default function cases(): BenchCase[] {
  return [
    {
      kind: 'latency',
      name: 'terminal `true`, ssh backend, warm task',
      baselineName: 'ssh2 exec `true`, same sshd',
      async setup(ctx) {
        const missing = await ctx.backendMissing('ssh');
        if (missing !== undefined) return { skip: missing };
        return { skip: 'ssh backend present, but this case is not wired to its sshd fixture yet' };
      },
      async runA() {},
      async runB() {},
      async teardown() {},
    },
  ];
}
