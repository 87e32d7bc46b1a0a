/**
 * `npm run standin -- NAME [options]`: starts one stand-in control plane (a
 * test double of a cloud sandbox provider or of a Kubernetes API server,
 * backed by the local Docker engine), prints `listening on PORT` once it serves, and runs until SIGTERM
 * or SIGINT, removing what it started. Each provider's stand-in is loaded
 * only when named.
 */
import { parseArgs } from 'node:util';

const STANDINS: Readonly<Record<string, (argv: readonly string[]) => Promise<void>>> = {
  daytona: runDaytona,
  kubernetes: async (argv) => (await import('./kubernetes/main.js')).main(argv),
  modal: async (argv) => (await import('./modal/modal-standin.js')).main(argv),
};

/** The Daytona stand-in: `--port N`; also prints the label its containers carry. */
async function runDaytona(argv: readonly string[]): Promise<void> {
  const { values } = parseArgs({ args: [...argv], options: { port: { type: 'string', default: '0' } } });
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port must be a port number, not ${values.port}`);
  const { startDaytonaStandIn, STANDIN_LABEL } = await import('./daytona/main.js');
  const standIn = await startDaytonaStandIn(port);
  process.stdout.write(`listening on ${standIn.port}\ncontainers labelled ${STANDIN_LABEL}=${standIn.instance}\n`);
  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  await standIn.close();
}

async function run(argv: readonly string[]): Promise<void> {
  const [name, ...rest] = argv;
  const start = name !== undefined && Object.hasOwn(STANDINS, name) ? STANDINS[name] : undefined;
  if (!start) {
    process.stderr.write(`usage: npm run standin -- <${Object.keys(STANDINS).join('|')}> [--port N]   (test doubles, not the real services)\n`);
    process.exitCode = 2;
    return;
  }
  await start(rest);
}

run(process.argv.slice(2)).then(
  () => process.exit(),
  (err: unknown) => {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
