/**
 * Starts one of the stand-ins (test doubles, test/standins/) as
 * `npm run standin -- NAME` does, in a process of its own, and waits for the
 * lines it prints once it serves.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** dist/test/standins/main.js, the `standin` npm script. */
export const STANDIN_MAIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../standins/main.js');

export interface StartedStandin {
  readonly child: ChildProcess;
  /** What `ready` matched in its stdout. */
  readonly match: RegExpExecArray;
  /** Resolves with the exit code once it has exited. */
  readonly exited: Promise<number | null>;
  /** The last 256 KiB of its stderr. */
  stderr(): string;
}

/**
 * Spawns `main.js NAME --port 0 ...args` with `env` and resolves once its
 * stdout matches `ready`; kills it and rejects, with its stderr, when it
 * exits first or does not get there within `timeoutMs`.
 */
export async function spawnStandin(
  name: string,
  args: readonly string[],
  ready: RegExp,
  env: NodeJS.ProcessEnv = process.env,
  timeoutMs = 60_000,
): Promise<StartedStandin> {
  const child = spawn(process.execPath, [STANDIN_MAIN, name, '--port', '0', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    stderr = (stderr + d).slice(-256 * 1024);
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const match = await new Promise<RegExpExecArray>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the ${name} stand-in did not start within ${timeoutMs / 1000} s; stderr:\n${stderr}`));
    }, timeoutMs);
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const m = ready.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m);
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`the ${name} stand-in exited with ${code} before it served; stderr:\n${stderr}`));
    });
  });
  return { child, match, exited, stderr: () => stderr };
}
