/**
 * `berth bench`: the side-by-side performance harness. The harness and its
 * cases (bench/) are loaded only when this command runs, so `berth serve`
 * never loads them. It measures a source checkout: it writes its reports
 * into bench-results/ and builds the sshd fixture's image from source. Cases
 * that measure against a test double find it as bench/test-doubles.ts says.
 */
import { parseArgs } from 'node:util';
import { COMMAND_HELP } from './command-help.js';
import { describeParseError } from './usage.js';

export class BenchUsageError extends Error {}

/** Exit status: 0 ok, 1 a case failed, 2 usage. */
export async function cmdBench(argv: string[]): Promise<number> {
  let values: { quick?: boolean; smoke?: boolean; only?: string[]; compare?: string; json?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        quick: { type: 'boolean' },
        smoke: { type: 'boolean' },
        only: { type: 'string', multiple: true },
        compare: { type: 'string' },
        json: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    throw new BenchUsageError(describeParseError('bench', err as Error & { code?: string }, ['quick', 'smoke', 'only', 'compare', 'json', 'help']));
  }
  if (values.help) {
    process.stdout.write(COMMAND_HELP.bench ?? '');
    return 0;
  }
  if (values.quick && values.smoke) throw new BenchUsageError('--quick and --smoke cannot be combined');
  const harness = await import('./bench/run-bench.js').catch((err: unknown) => {
    throw new Error(`the bench harness is not built here (${(err as Error).message}); run 'make build' in a source checkout`);
  });
  const only = (values.only ?? []).flatMap((o) => o.split(',')).map((s) => s.trim()).filter(Boolean);
  const mode = values.smoke ? 'smoke' : values.quick ? 'quick' : 'full';
  try {
    return await harness.runBench({
      mode,
      only,
      ...(values.compare === undefined ? {} : { compare: values.compare }),
      ...(values.json === undefined ? {} : { json: values.json }),
      command: ['bin/berth bench', ...argv].join(' '),
    });
  } catch (err) {
    if (err instanceof harness.BenchUsageError) throw new BenchUsageError(err.message);
    throw err;
  }
}
