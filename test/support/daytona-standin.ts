/**
 * Runs the Daytona stand-in (a test double of Daytona's control plane and
 * toolbox, test/standins/daytona/) as `npm run standin` does: a separate
 * process on a free port, stopped with SIGTERM, which removes its
 * containers.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { silentLogger } from '../../services/common/logging.js';
import { DaytonaBackend, type DaytonaBackendOptions } from '../../services/executor/backends/daytona/daytona-backend.js';
import { SANDBOX_IMAGE } from './docker-fixtures.js';

const here = path.dirname(fileURLToPath(import.meta.url));
/** dist/test/standins/main.js, the `standin` npm script. */
export const STANDIN_MAIN = path.resolve(here, '../standins/main.js');
export const STANDIN_API_KEY = 'standin-test-key';

export interface RunningStandIn {
  /** What DAYTONA_API_URL is set to: http://127.0.0.1:PORT/api. */
  readonly apiUrl: string;
  readonly apiKey: string;
  readonly child: ChildProcess;
  /** `key=value`: the label on every container this stand-in makes. */
  readonly containerLabel: string;
  /** SIGTERM, then waits for the exit; resolves to the exit code. */
  stop(): Promise<number | null>;
}

/** `env` is added to the stand-in's environment (e.g. DOCKER_HOST, the engine its sandboxes are made on). */
export async function startDaytonaStandIn(env: Readonly<Record<string, string>> = {}): Promise<RunningStandIn> {
  const child = spawn(process.execPath, [STANDIN_MAIN, 'daytona', '--port', '0'], {
    env: { ...process.env, ...env, DAYTONA_STANDIN_API_KEY: STANDIN_API_KEY },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const started = await new Promise<{ port: number; label: string }>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`the Daytona stand-in did not start: ${out}`)), 30_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      const m = /listening on (\d+)\ncontainers labelled (\S+)\n/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({ port: Number(m[1]), label: m[2]! });
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`the Daytona stand-in exited with ${code}: ${out}`));
    });
  });
  return {
    apiUrl: `http://127.0.0.1:${started.port}/api`,
    containerLabel: started.label,
    apiKey: STANDIN_API_KEY,
    child,
    stop: async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
}

/** A daytona backend on the stand-in as the tests run it (the sandbox image, 1 CPU, 1 GiB, not persistent), with `extra` over it. */
export function startStandInBackend(standIn: RunningStandIn, extra: Partial<DaytonaBackendOptions> = {}): Promise<DaytonaBackend> {
  return DaytonaBackend.start({
    image: SANDBOX_IMAGE,
    persistent: false,
    cpus: 1,
    memoryMiB: 1024,
    env: { LANG: 'C.UTF-8' },
    network: () => ({}),
    apiKey: standIn.apiKey,
    apiUrl: standIn.apiUrl,
    target: 'stand-in',
    logger: silentLogger(),
    ...extra,
  });
}
