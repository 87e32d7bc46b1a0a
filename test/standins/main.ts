/**
 * `npm run standin -- NAME --port N`: starts one stand-in control plane (a
 * test double of a cloud sandbox provider, backed by the local Docker
 * engine), prints `listening on PORT` (and then the label its containers
 * carry), and runs until SIGTERM or SIGINT, removing the containers it
 * made. Each provider's stand-in is loaded only when asked for.
 */
import { parseArgs } from 'node:util';

/** A started stand-in; `label`: the `key=value` label on every container it makes. */
interface StandIn {
  readonly port: number;
  readonly label: string;
  close(): Promise<void>;
}

const STANDINS: Readonly<Record<string, (port: number) => Promise<StandIn>>> = {
  daytona: async (port) => {
    const { startDaytonaStandIn, STANDIN_LABEL } = await import('./daytona/main.js');
    const standIn = await startDaytonaStandIn(port);
    return { port: standIn.port, label: `${STANDIN_LABEL}=${standIn.instance}`, close: () => standIn.close() };
  },
};

async function main(): Promise<void> {
  const { positionals, values } = parseArgs({
    allowPositionals: true,
    options: { port: { type: 'string', default: '0' } },
  });
  const name = positionals[0] ?? '';
  const start = Object.hasOwn(STANDINS, name) ? STANDINS[name] : undefined;
  if (!start || positionals.length !== 1) {
    process.stderr.write(`usage: npm run standin -- ${Object.keys(STANDINS).join('|')} [--port N]\n`);
    process.exit(2);
  }
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    process.stderr.write(`--port must be a port number, not ${values.port}\n`);
    process.exit(2);
  }
  const standIn = await start(port);
  process.stdout.write(`listening on ${standIn.port}\ncontainers labelled ${standIn.label}\n`);
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    standIn.close().then(
      () => process.exit(0),
      (err: unknown) => {
        process.stderr.write(`stand-in cleanup failed: ${String(err)}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

await main();
