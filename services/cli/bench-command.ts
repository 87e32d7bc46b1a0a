/**
 * `berth bench`: the side-by-side performance harness. The harness and its
 * cases (bench/) are loaded only when this command runs, so `berth serve`
 * never loads them. It measures a source checkout: it writes its reports
 * into test/bench/results/ and builds the sshd fixture's image from source.
 */
import { parseArgs } from 'node:util';

export const BENCH_HELP = `  berth bench [--quick] [--only NAME[,NAME]] [--smoke]
      Measure Berth beside baselines (bare gRPC, bash, docker exec, ...),
      interleaved on this machine; write test/bench/results/<date>-<sha>.
      {json,md,svg}. --quick: a two-minute budget (its minimum work takes
      longer on a busy machine); --only: suites (case file names) or parts
      of case names; --smoke: each case a few times, no files, non-zero only
      if a case fails (run by 'make test'). Needs a source checkout.
      Also 'make bench [BENCH_FLAGS=--quick]'.`;

export class BenchUsageError extends Error {}

/** Exit status: 0 ok, 1 a case failed, 2 usage. */
export async function cmdBench(argv: string[]): Promise<number> {
  let values: { quick?: boolean; smoke?: boolean; only?: string[]; help?: boolean };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        quick: { type: 'boolean' },
        smoke: { type: 'boolean' },
        only: { type: 'string', multiple: true },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    throw new BenchUsageError((err as Error).message);
  }
  if (values.help) {
    process.stdout.write(`Usage:\n${BENCH_HELP}\n`);
    return 0;
  }
  if (values.quick && values.smoke) throw new BenchUsageError('--quick and --smoke cannot be combined');
  const harness = await import('./bench/run-bench.js').catch((err: unknown) => {
    throw new Error(`the bench harness is not built here (${(err as Error).message}); run 'make build' in a source checkout`);
  });
  const only = (values.only ?? []).flatMap((o) => o.split(',')).map((s) => s.trim()).filter(Boolean);
  const mode = values.smoke ? 'smoke' : values.quick ? 'quick' : 'full';
  try {
    return await harness.runBench({ mode, only, command: ['bin/berth bench', ...argv].join(' ') });
  } catch (err) {
    if (err instanceof harness.BenchUsageError) throw new BenchUsageError(err.message);
    throw err;
  }
}
