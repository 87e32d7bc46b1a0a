/**
 * Starts the Modal stand-in (a test double of Modal's control plane) as a
 * user would, `node dist/test/standins/main.js modal --port 0` (what
 * `npm run standin -- modal` runs), waits for its `listening on PORT` line
 * and stops it with SIGTERM. The environment a client needs to reach it
 * through the SDK's own settings is in {@link StandinProcess.env}.
 */
import type { ChildProcess } from 'node:child_process';
import Dockerode from 'dockerode';
import { spawnStandin } from './standin-process.js';

export const STANDIN_TOKEN_ID = 'ak-standin-test';
export const STANDIN_TOKEN_SECRET = 'as-standin-test';

export interface StandinProcess {
  readonly port: number;
  readonly child: ChildProcess;
  /** MODAL_SERVER_URL and the credentials the stand-in accepts. */
  readonly env: Readonly<Record<string, string>>;
  stderr(): string;
  /** Ids of the containers (sandboxes) this stand-in has, running or not. */
  containers(): Promise<string[]>;
  /** SIGTERM; resolves with the exit code once it exited (it removes its containers first). */
  stop(): Promise<number | null>;
}

/** `env` is added to the stand-in's environment (e.g. DOCKER_HOST, the engine its sandboxes are made on). */
export async function startModalStandin(extraArgs: readonly string[] = [], env: Readonly<Record<string, string>> = {}): Promise<StandinProcess> {
  const { child, match, exited, stderr } = await spawnStandin('modal', extraArgs, /listening on (\d+)/, {
    ...process.env,
    ...env,
    MODAL_TOKEN_ID: STANDIN_TOKEN_ID,
    MODAL_TOKEN_SECRET: STANDIN_TOKEN_SECRET,
  }, 30_000);
  const port = Number(match[1]);
  return {
    port,
    child,
    env: { MODAL_SERVER_URL: `http://127.0.0.1:${port}`, MODAL_TOKEN_ID: STANDIN_TOKEN_ID, MODAL_TOKEN_SECRET: STANDIN_TOKEN_SECRET },
    stderr,
    containers: async () =>
      (await new Dockerode().listContainers({ all: true, filters: { label: [`berth.standin.port=${port}`] } })).map((c) => c.Id),
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}
