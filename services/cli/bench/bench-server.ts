/**
 * Child-process entry of the benchmarks: what `berth serve` runs (a
 * dispatcher and one executor in the same process, see services/cli/serve.ts), plus
 * `bench_noop`, a tool that does nothing, registered on this dispatcher only.
 * It gives the dispatch path's own cost without any tool's cost. Production
 * servers never register it, so it appears in no listing.
 *
 * Usage: node bench-server.js --backend NAME --log FILE [--config FILE] [--shell-timing]
 * (`--shell-timing`: each command's script logs its own timings in the task's
 * state dir, for the call-breakdown case; see ShellStateRunnerOptions.timing.)
 * Prints "bench server serving on ADDR" when ready; SIGTERM stops it.
 */
import { parseArgs } from 'node:util';
import { loadConfig } from '../../common/config-load.js';
import { createLogger, logFileDestination } from '../../common/logging.js';
import { startServe } from '../serve.js';
import { NOOP_RESULT, NOOP_TOOL } from './noop-tool.js';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      backend: { type: 'string' },
      log: { type: 'string' },
      config: { type: 'string' },
      'shell-timing': { type: 'boolean' },
    },
    strict: true,
  });
  const env = { ...process.env, TERMINAL_ENV: values.backend ?? 'local' };
  const config = loadConfig(values.config, env);
  // Info level like a default `berth serve`, so per-call logging is part of what is measured,
  // written the way `berth serve` writes stderr; into a file so that no reader of a pipe competes for the CPU.
  const logger = createLogger(config.log_level, logFileDestination(values.log ?? '/dev/null'));
  const runner = values['shell-timing'] === true ? { runner: { timing: true } } : {};
  const serve = await startServe({ config, logger, host: '127.0.0.1', port: 0, ...runner });
  const { dispatcher } = serve;
  dispatcher.dispatcher.registry.register({
    name: NOOP_TOOL,
    toolset: 'bench',
    schema: { name: NOOP_TOOL, description: 'Does nothing (benchmarks only).', parameters: { type: 'object', properties: {} } },
    handler: () => NOOP_RESULT,
  });
  process.stdout.write(`bench server serving on ${dispatcher.address}\n`);
  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  await serve.close(500);
  process.exit(0);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench server failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
