/**
 * An executor in a process of its own, to be killed (SIGKILL) part-way
 * through something: a script (ES module) written into a directory the
 * test owns and run by this Node. It imports Berth's built modules by
 * {@link distModule} and prints marker lines on its stdout, which
 * {@link DoomedExecutor.output} collects.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** dist/, where the built services/ and test/ are. */
const DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** A module of the build (`services/...js`, `test/support/...js`) as a quoted file URL, for an import line of the script. */
export function distModule(relative: string): string {
  return JSON.stringify(pathToFileURL(path.join(DIST, relative)).href);
}

export interface DoomedExecutor {
  readonly child: ChildProcess;
  /** Everything it printed so far. */
  output(): string;
  /** Whether it has exited (killed or not). */
  exited(): boolean;
  /** SIGKILL, resolved once it is gone. */
  kill(): Promise<void>;
}

/** Writes `lines` as `<dir>/doomed-executor.mjs` and starts it with `env` added; it keeps running until killed. */
export async function startDoomedExecutor(dir: string, lines: readonly string[], env: Readonly<Record<string, string>> = {}): Promise<DoomedExecutor> {
  const script = path.join(dir, 'doomed-executor.mjs');
  await writeFile(script, [...lines, 'setInterval(() => {}, 1000);'].join('\n'));
  const child = spawn(process.execPath, [script], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    child,
    output: () => out,
    exited: () => child.exitCode !== null || child.signalCode !== null,
    kill: async () => {
      child.kill('SIGKILL');
      await gone;
    },
  };
}
