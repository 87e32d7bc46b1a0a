/** Operations several cases share: checked tool calls, baseline processes, load rounds. */
import { spawn, type SpawnOptions } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BenchContext, LoadRound } from './bench-case.js';
import type { BenchServer } from './bench-server-process.js';

/** Parses a terminal result and throws unless the command ran and exited 0. */
export function checkTerminalResult(resultJson: string): { output: string } {
  let parsed: { output?: unknown; exit_code?: unknown; error?: unknown };
  try {
    parsed = JSON.parse(resultJson) as typeof parsed;
  } catch {
    throw new Error(`terminal returned non-JSON: ${resultJson.slice(0, 200)}`);
  }
  if (parsed.exit_code !== 0 || (parsed.error !== null && parsed.error !== undefined)) {
    throw new Error(`terminal failed: ${resultJson.slice(0, 300)}`);
  }
  return { output: typeof parsed.output === 'string' ? parsed.output : '' };
}

/** Runs `command` with the terminal tool on `task` and checks it exited 0. */
export async function runTerminal(server: BenchServer, task: string, command: string): Promise<void> {
  checkTerminalResult(await server.call('terminal', { command }, task));
}

/** Runs a program to completion; rejects on a non-zero exit, with its stderr. */
export function runProcess(file: string, args: readonly string[], options: SpawnOptions = {}): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { stdio: ['ignore', 'ignore', 'pipe'], ...options });
    let stderr = '';
    child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.once('error', reject);
    child.once('close', (code, signal) => {
      if (code === 0) resolve();
      else reject(new Error(`${file} ${args.join(' ')} exited ${signal ?? code}: ${stderr.trim().slice(0, 300)}`));
    });
  });
}

/** The host baseline of a terminal call: `bash -c SCRIPT` spawned from this process. */
export function spawnBash(script: string): Promise<void> {
  return runProcess('bash', ['-c', script]);
}

/**
 * One load round: `tasks` workers at once, each running `callsPerTask` calls
 * one after another. Failed calls are counted, not thrown.
 */
export async function concurrentRound(
  tasks: number,
  callsPerTask: number,
  call: (task: number, index: number) => Promise<unknown>,
): Promise<LoadRound> {
  const latenciesMs: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  const startedMs = performance.now();
  await Promise.all(
    Array.from({ length: tasks }, async (_, task) => {
      for (let i = 0; i < callsPerTask; i++) {
        const t0 = performance.now();
        try {
          await call(task, i);
          latenciesMs.push(performance.now() - t0);
        } catch (err) {
          errors += 1;
          firstError ??= err instanceof Error ? err.message : String(err);
        }
      }
    }),
  );
  return {
    latenciesMs,
    elapsedMs: performance.now() - startedMs,
    errors,
    ...(firstError !== undefined ? { firstError } : {}),
  };
}

/**
 * Runs a step that is not measured (warming a task, cleaning up), retrying a
 * failure twice after a pause. A loaded machine can make one such call fail
 * (an executor's health check times out); that must not throw away the
 * measurements around it, but it is noted in the report.
 */
export async function unmeasured<T>(ctx: BenchContext, what: string, step: () => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await step();
    } catch (err) {
      if (attempt >= attempts) throw err;
      ctx.note(`${what} failed (${err instanceof Error ? err.message : String(err)}); retrying`);
      await sleep(1000 * attempt);
    }
  }
}
