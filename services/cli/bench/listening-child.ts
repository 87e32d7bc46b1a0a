/**
 * Node child processes that print "serving on ADDR" when ready (`bin/berth
 * serve|executor|dispatcher`, the bench server): start one, wait for that
 * line, stop it, and read its memory from /proc. Tests and the bench share it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';

export interface ListeningChild {
  readonly name: string;
  readonly child: ChildProcess;
  readonly pid: number;
  readonly address: string;
  /** What the child wrote to stdout up to and including its "serving on" line. */
  readonly startupOutput: string;
  /** What the child wrote to stderr so far (the last `stderrKeepBytes`). */
  stderr(): string;
  /** Resolves with the exit code once the child exits (null when a signal ended it). */
  readonly exited: Promise<number | null>;
  /**
   * Sends `signal` (default SIGTERM), then SIGKILL after `graceMs` (default
   * 5 s); resolves with the exit code once the process is gone.
   */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<number | null>;
}

export interface ListeningChildOptions {
  /** For error messages. */
  readonly name: string;
  /** Arguments to node. */
  readonly args: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
  readonly startTimeoutMs?: number;
  /** How much of stderr to keep (default 64 KiB; tests that read a server's whole log pass Infinity). */
  readonly stderrKeepBytes?: number;
}

export async function startListeningChild(options: ListeningChildOptions): Promise<ListeningChild> {
  const keep = options.stderrKeepBytes ?? 64 * 1024;
  const child = spawn(process.execPath, [...options.args], {
    cwd: options.cwd,
    env: options.env ?? process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    stderr += d;
    if (stderr.length > keep) stderr = stderr.slice(-keep);
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let startupOutput = '';
  const address = await new Promise<string>((resolve, reject) => {
    const timeoutMs = options.startTimeoutMs ?? 30_000;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${options.name} did not start within ${timeoutMs} ms; stderr:\n${stderr}`));
    }, timeoutMs);
    const onData = (d: string) => {
      startupOutput += d;
      // The whole line: after the address it may say more (berth serve: where new tasks start).
      const m = /serving on (\S+)[^\n]*\n/.exec(startupOutput);
      if (m) {
        clearTimeout(timer);
        child.stdout!.off('data', onData);
        startupOutput = startupOutput.slice(0, m.index + m[0].length);
        resolve(m[1]!);
      }
    };
    child.stdout!.setEncoding('utf8').on('data', onData);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${options.name} exited (${signal ?? code}) before listening; stderr:\n${stderr}`));
    });
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
  // Keep draining stdout so a chatty child never blocks on a full pipe.
  child.stdout!.resume();
  let stopping: Promise<number | null> | undefined;
  return {
    name: options.name,
    child,
    pid: child.pid!,
    address,
    startupOutput,
    stderr: () => stderr,
    exited,
    stop(signal = 'SIGTERM', graceMs = 5000) {
      stopping ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null) return exited;
        child.kill(signal);
        const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
        const code = await exited;
        clearTimeout(timer);
        return code;
      })();
      return stopping;
    },
  };
}

/** Resident set size of a process in KiB (VmRSS from /proc/PID/status). */
/**
 * CPU time (user + system) a process has used, in ms, from /proc/PID/stat
 * (clock ticks of 10 ms); with `reaped`, also that of the children it has
 * waited for. Undefined when there is no such process (or no /proc).
 */
export function processCpuMs(pid: number, { reaped = false }: { reaped?: boolean } = {}): number | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // After the command name (which may hold spaces, in parentheses) come fields 3...: utime, stime, cutime, cstime are 14-17.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = (reaped ? [11, 12, 13, 14] : [11, 12]).reduce((t, i) => t + Number(fields[i]), 0);
  return ticks * (1000 / CLOCK_TICKS_PER_S);
}

/** USER_HZ, 100 on every Linux architecture Node runs on. */
const CLOCK_TICKS_PER_S = 100;

export function rssKiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  if (!m) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]);
}
