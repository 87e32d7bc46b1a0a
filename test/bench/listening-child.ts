/**
 * Node child processes that print "serving on ADDR" when ready (`bin/berth
 * serve|executor|dispatcher`, the bench server), and their memory from /proc.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';

export interface ListeningChild {
  readonly name: string;
  readonly child: ChildProcess;
  readonly pid: number;
  readonly address: string;
  /** What the child wrote to stderr so far (last 64 KiB). */
  stderr(): string;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once the process is gone. */
  stop(graceMs?: number): Promise<void>;
}

export interface ListeningChildOptions {
  /** For error messages. */
  readonly name: string;
  /** Arguments to node. */
  readonly args: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
  readonly startTimeoutMs?: number;
}

const STDERR_KEEP = 64 * 1024;

export async function startListeningChild(options: ListeningChildOptions): Promise<ListeningChild> {
  const child = spawn(process.execPath, [...options.args], {
    cwd: options.cwd,
    env: options.env ?? process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    stderr = (stderr + d).slice(-STDERR_KEEP);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const address = await new Promise<string>((resolve, reject) => {
    let stdout = '';
    const timeoutMs = options.startTimeoutMs ?? 30_000;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${options.name} did not start within ${timeoutMs} ms; stderr:\n${stderr}`));
    }, timeoutMs);
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
      const m = /serving on (\S+)/.exec(stdout);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
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
  let stopping: Promise<void> | undefined;
  return {
    name: options.name,
    child,
    pid: child.pid!,
    address,
    stderr: () => stderr,
    stop(graceMs = 5000) {
      stopping ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
        await exited;
        clearTimeout(timer);
      })();
      return stopping;
    },
  };
}

/** Resident set size of a process in KiB (VmRSS from /proc/PID/status). */
export function rssKiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  if (!m) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(m[1]);
}
