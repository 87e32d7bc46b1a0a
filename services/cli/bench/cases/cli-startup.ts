/**
 * Start-up of the `berth` command, beside `node -e 0` started the same way:
 * `berth --help`, and `berth call` with no server listening (what each call
 * of a CI script pays before it reaches the server). A script making a
 * hundred calls pays this a hundred times.
 */
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import type { BenchCase, Target } from '../bench-case.js';
import { runProcess } from '../case-helpers.js';
import { formatRatio } from '../stats.js';

/** The CLI's exit status when the server cannot be reached (call-outcome.ts's table). */
const EXIT_UNREACHABLE = 6;

/** A loopback port nothing listens on: one the system handed out and that was closed again. */
function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** Runs `node ARGS` and resolves when it exits with `expected`; anything else fails the case. */
function runNode(args: readonly string[], expected: number): Promise<void> {
  if (expected === 0) return runProcess(process.execPath, args);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.once('error', reject);
    child.once('close', (code) => {
      if (code === expected) resolve();
      else reject(new Error(`node ${args.join(' ')} exited ${code}, not ${expected}: ${stderr.trim().slice(0, 300)}`));
    });
  });
}

const atMostTwiceNode: Target = {
  target: 'start-up ≤ 2× `node -e 0`',
  judge: (r) => ({ measured: `${formatRatio(r.latency!.ratioP50)} (p50)`, met: r.latency!.ratioP50 <= 2 }),
};

export default function cases(): BenchCase[] {
  let bin = '';
  let port = 0;
  const plan = { quick: { pairs: 20, minPairs: 10 }, full: { pairs: 40, minPairs: 20 } };
  return [
    {
      kind: 'latency',
      name: '`berth --help`',
      baselineName: '`node -e 0`',
      targets: [atMostTwiceNode],
      plan,
      async setup(ctx) {
        bin = join(ctx.repoRoot, 'bin', 'berth');
      },
      runA: () => runNode([bin, '--help'], 0),
      runB: () => runNode(['-e', '0'], 0),
      async teardown() {},
    },
    {
      kind: 'latency',
      name: '`berth call terminal`, no server listening',
      baselineName: '`node -e 0`',
      targets: [atMostTwiceNode],
      plan,
      async setup(ctx) {
        bin = join(ctx.repoRoot, 'bin', 'berth');
        port = await closedPort();
      },
      runA: () => runNode([bin, 'call', 'terminal', '{"command":"true"}', '--server', `127.0.0.1:${port}`], EXIT_UNREACHABLE),
      runB: () => runNode(['-e', '0'], 0),
      async teardown() {},
    },
  ];
}
