/**
 * A module-load hook for a child Node process: preloaded with `--import
 * moduleLogImport()`, it records each ES module the loader loads (through a
 * module.register load hook) and each CommonJS module required, and writes
 * the list to $BERTH_MODULE_LOG when the process exits. Tests use it to
 * hold what a command or a server loads, and when.
 */

const MODULE_LOG_HOOK = `
import Module, { register } from 'node:module';
import { MessageChannel } from 'node:worker_threads';
import { writeFileSync } from 'node:fs';
const seen = new Set();
const { port1, port2 } = new MessageChannel();
port1.on('message', (url) => seen.add(url));
port1.unref();
register('data:text/javascript,' + encodeURIComponent(\`
let port;
export function initialize(data) { port = data.port; }
export async function load(url, context, next) { port.postMessage(url); return next(url, context); }
\`), { data: { port: port2 }, transferList: [port2] });
const load = Module._load;
Module._load = function (request, parent, isMain) {
  try { seen.add(Module._resolveFilename(request, parent, isMain)); } catch {}
  return load.apply(this, arguments);
};
process.on('exit', () => writeFileSync(process.env.BERTH_MODULE_LOG, [...seen].join('\\n')));
`;

/** The argument of `--import` that preloads the hook. */
export const MODULE_LOG_IMPORT = `data:text/javascript,${encodeURIComponent(MODULE_LOG_HOOK)}`;

/** The package a module file belongs to (`@scope/name` or `name`), or undefined for Berth's own and node's. */
export function packageOf(moduleId: string): string | undefined {
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(moduleId);
  return m?.[1];
}
