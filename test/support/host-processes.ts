/**
 * Host processes by command line, read from /proc: how tests on the local
 * backend see whether a command they started is still running.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

/** Pids whose command line contains `needle` (arguments joined by spaces). */
export function pidsRunning(needle: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0').join(' ');
    } catch {
      continue; // gone meanwhile
    }
    if (cmdline.includes(needle) && Number(entry) !== process.pid) pids.push(Number(entry));
  }
  return pids;
}

/** Waits until `check` holds, polling; throws `what` when `timeoutMs` passes first. */
export async function waitUntil(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** A `sleep` argument no other process on the host has: find it with {@link pidsRunning}. */
export function uniqueSleepSeconds(wholeSeconds: number): string {
  return `${wholeSeconds}.${String(Math.floor(Math.random() * 1e9)).padStart(9, '0')}7`;
}
