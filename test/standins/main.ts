/**
 * Starts one stand-in control plane (a test double for a cloud provider):
 * `npm run standin -- NAME [options]`. Each stand-in prints
 * `listening on PORT` once it serves, runs until SIGTERM and removes what it
 * started on exit. Each is loaded only when named.
 */
const STANDINS: Readonly<Record<string, () => Promise<{ main(argv: readonly string[]): Promise<void> }>>> = {
  modal: () => import('./modal/modal-standin.js'),
};

async function run(argv: readonly string[]): Promise<void> {
  const [name, ...rest] = argv;
  const load = name !== undefined && Object.hasOwn(STANDINS, name) ? STANDINS[name] : undefined;
  if (!load) {
    process.stderr.write(`usage: npm run standin -- <${Object.keys(STANDINS).join('|')}> [--port N]\n`);
    process.exitCode = 2;
    return;
  }
  await (await load()).main(rest);
}

run(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
});
