/**
 * Exec semantics on top of a process a {@link SandboxChannel} started, the
 * same for every backend that reaches its sandbox through one (docker's
 * agent socket or docker exec, singularity's agent over `apptainer exec`):
 * the deadline (124 / 130) kills the process group through the channel, a
 * foreground exit is 128+n for a signal, a background one -n; and the short
 * setup command a backend runs on a new channel before the task uses it.
 */
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type { BackgroundHandle, BackgroundOptions, ExecOptions, ExecResult } from '../../backend.js';
import { backgroundExitCode, foregroundExitCode } from './agent/agent-protocol.js';
import { ExecDeadline } from './exec-deadline.js';
import { deliverExit, deliverOutput } from './guards.js';
import { SandboxLostError, type ProcessExit, type SandboxChannel, type SandboxProcess, type SpawnOptions } from './sandbox-channel.js';

/** How a foreground command ended: its exit, or the loss of the sandbox (or its channel) under it. */
export type ForegroundOutcome =
  | { readonly exit: ProcessExit; readonly result: ExecResult }
  | { readonly exit?: undefined; readonly lost: SandboxLostError; readonly deadline: ExecDeadline };

/**
 * Waits for a started foreground command under `options`' timeout and
 * interrupt; either kills its process group (SIGTERM, SIGKILL after
 * `killGraceMs`) and the result says 124 or 130. Other errors are thrown.
 * While it runs, its kill is in `running` (for an environment that kills
 * what still runs when it is released).
 */
export async function awaitForeground(
  proc: SandboxProcess,
  options: ExecOptions,
  killGraceMs: number,
  running?: Set<() => Promise<void>>,
): Promise<ForegroundOutcome> {
  let killing: Promise<void> | undefined;
  const kill = () => (killing ??= proc.kill(options.killGraceMs ?? killGraceMs).catch(() => undefined));
  const deadline = new ExecDeadline(options, () => void kill());
  running?.add(kill);
  try {
    const exit = await proc.exited;
    if (killing) await killing;
    return { exit, result: deadline.result(foregroundExitCode(exit.code, exit.signal)) };
  } catch (err) {
    if (!(err instanceof SandboxLostError)) throw err;
    if (killing) await killing;
    return { lost: err, deadline };
  } finally {
    deadline.dispose();
    running?.delete(kill);
  }
}

/** How long `kill()` of a background handle waits for the exit to be reported after the group is gone. */
const EXIT_REPORT_WAIT_MS = 2000;

/**
 * The handle of a started background process: its exit reaches
 * `options.onExit` once (-9 when the sandbox or channel went away with it),
 * and writes after the exit are refused.
 */
export function backgroundHandle(
  proc: SandboxProcess,
  options: BackgroundOptions,
  killGraceMs: number,
  logger: Logger | undefined,
): BackgroundHandle {
  let exited = false;
  const exitReported = proc.exited
    .then(
      (e) => backgroundExitCode(e.code, e.signal),
      // The sandbox (or the channel to it) went away: the process is gone from our view.
      () => -9,
    )
    .then((code) => {
      exited = true;
      deliverExit(options.onExit, code, logger);
    });
  return {
    pid: proc.pid,
    write: (data) => (exited ? Promise.reject(new FailedPreconditionError('the process has exited')) : proc.write(data)),
    closeStdin: () => (exited ? Promise.resolve() : proc.closeStdin().catch(() => undefined)),
    kill: async () => {
      if (!exited) await proc.kill(killGraceMs).catch(() => undefined);
      await Promise.race([exitReported, new Promise((r) => setTimeout(r, EXIT_REPORT_WAIT_MS))]);
    },
  };
}

/** What a command asks of a channel: its script, cwd, env and PTY, its output to `options.onOutput`. */
export function spawnOptionsOf(
  options: ExecOptions | BackgroundOptions,
  cwd: string,
  logger: Logger | undefined,
  extra: Partial<SpawnOptions> = {},
): SpawnOptions {
  return {
    script: options.script,
    cwd,
    ...(options.env ? { env: options.env } : {}),
    ...(options.pty ? { pty: true } : {}),
    ...extra,
    onOutput: (chunk) => deliverOutput(options.onOutput, chunk, logger),
  };
}

/**
 * Runs a short setup command in `/` on `channel` (e.g. making the task's
 * state dir and reading `$HOME`): its output (at most 8 KiB), or, when it
 * exits non-zero, an error naming `where` (e.g. `the task's pod`) with the
 * exit and the output's start. Killed after a minute.
 */
export async function runSetupCommand(channel: SandboxChannel, script: string, where: string): Promise<string> {
  let out = '';
  const proc = await channel.spawn({
    script,
    cwd: '/',
    onOutput: (chunk) => {
      if (out.length < 8192) out += chunk.toString('utf8');
    },
  });
  const timer = setTimeout(() => void proc.kill(1000).catch(() => undefined), 60_000);
  try {
    const exit = await proc.exited;
    if (exit.code !== 0) throw new UnavailableError(`a setup command in ${where} failed (exit ${exit.code ?? exit.signal}): ${out.slice(0, 500)}`);
  } finally {
    clearTimeout(timer);
  }
  return out.slice(0, 8192);
}
