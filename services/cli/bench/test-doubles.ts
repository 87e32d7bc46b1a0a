/**
 * The test doubles some cases measure against: the Modal and Daytona
 * stand-ins and the apptainer double. They live with the tests, not in the
 * product, so the bench never looks for them by path; whoever runs it names
 * them in two variables (`make bench` and the test runner's bench tier name
 * the checkout's own):
 *
 * - `BERTH_BENCH_STANDINS`: a Node.js script that, run as
 *   `node SCRIPT NAME --port 0`, starts the stand-in of provider NAME,
 *   prints `listening on PORT` once it serves, and removes what it started
 *   on SIGTERM (the checkout's: `dist/test/standins/main.js`, what
 *   `npm run standin` runs).
 * - `BERTH_BENCH_APPTAINER`: an apptainer-compatible CLI for the
 *   singularity case (the checkout's: `test/fixtures/apptainer-double/apptainer`).
 *
 * A case whose double is not named, or not there, is skipped and says which
 * variable to set. (The ssh case's sshd is the bench's own: sshd-container.ts.)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Skip } from './bench-case.js';

export const STANDINS_ENV = 'BERTH_BENCH_STANDINS';
export const APPTAINER_ENV = 'BERTH_BENCH_APPTAINER';

/** How long a stand-in may take to listen. */
const STANDIN_START_TIMEOUT_MS = 30_000;

/** A stand-in running as a child process. */
export interface StartedStandin {
  readonly port: number;
  /** Stops it (it removes the containers it started) and waits for it to exit. */
  stop(): Promise<void>;
}

/** The file a variable names, resolved against `cwd`; a skip naming the variable when it is unset or missing. */
function namedFile(variable: string, what: string, cwd: string): string | Skip {
  const value = process.env[variable];
  if (!value) return { skip: `${what} is not named: set ${variable} (make bench names the checkout's)` };
  const file = resolve(cwd, value);
  return existsSync(file) ? file : { skip: `${what} is not there: ${variable}=${value} (built with the tests: make build)` };
}

/** The apptainer-compatible CLI the singularity case drives, or why there is none. */
export function apptainerDouble(cwd: string): string | Skip {
  return namedFile(APPTAINER_ENV, 'the apptainer test double', cwd);
}

/**
 * Starts the stand-in of `provider` on a free port, with `env` added to its
 * environment and `args` to its command line (the kubernetes stand-in's
 * `--kubeconfig PATH`); a skip when no stand-in is named.
 */
export async function startStandin(
  provider: string,
  cwd: string,
  env: Readonly<Record<string, string>> = {},
  args: readonly string[] = [],
): Promise<StartedStandin | Skip> {
  const script = namedFile(STANDINS_ENV, `the ${provider} stand-in`, cwd);
  if (typeof script !== 'string') return script;
  const child = spawn(process.execPath, [script, provider, '--port', '0', ...args], {
    cwd,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const port = await new Promise<number>((resolvePort, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      child.kill('SIGTERM');
      reject(new Error(`the ${provider} stand-in did not start: ${out}`));
    }, STANDIN_START_TIMEOUT_MS);
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
      const m = /listening on (\d+)\n/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolvePort(Number(m[1]));
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the ${provider} stand-in exited with ${code} before listening: ${out}`));
    });
  });
  return { port, stop: () => stopChild(child) };
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}
