/**
 * Starts the Modal stand-in (a test double of Modal's control plane) as a
 * user would, `node dist/test/standins/main.js modal --port 0` (what
 * `npm run standin -- modal` runs), waits for its `listening on PORT` line
 * and stops it with SIGTERM. The environment a client needs to reach it
 * through the SDK's own settings is in {@link StandinProcess.env}.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import Dockerode from 'dockerode';

const MAIN = fileURLToPath(new URL('../standins/main.js', import.meta.url));

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

export async function startModalStandin(extraArgs: readonly string[] = []): Promise<StandinProcess> {
  const child = spawn(process.execPath, [MAIN, 'modal', '--port', '0', ...extraArgs], {
    env: { ...process.env, MODAL_TOKEN_ID: STANDIN_TOKEN_ID, MODAL_TOKEN_SECRET: STANDIN_TOKEN_SECRET },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    stderr = (stderr + d).slice(-256 * 1024);
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the Modal stand-in did not listen within 30 s; stderr:\n${stderr}`));
    }, 30_000);
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = /listening on (\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`the Modal stand-in exited (${signal ?? code}) before listening; stderr:\n${stderr}`));
    });
  });
  return {
    port,
    child,
    env: { MODAL_SERVER_URL: `http://127.0.0.1:${port}`, MODAL_TOKEN_ID: STANDIN_TOKEN_ID, MODAL_TOKEN_SECRET: STANDIN_TOKEN_SECRET },
    stderr: () => stderr,
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
