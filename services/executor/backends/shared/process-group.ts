/**
 * Process groups in a sandbox reached without the exec agent (an ssh
 * channel, `apptainer exec`, `docker exec`): the script that kills one, and
 * the signal numbers for exits reported by signal name.
 */

/** Signal numbers on Linux, for an exit reported as a signal name (`TERM` or `SIGTERM`). */
const LINUX_SIGNALS: Readonly<Record<string, number>> = {
  HUP: 1,
  INT: 2,
  QUIT: 3,
  ILL: 4,
  ABRT: 6,
  FPE: 8,
  KILL: 9,
  USR1: 10,
  SEGV: 11,
  USR2: 12,
  PIPE: 13,
  ALRM: 14,
  TERM: 15,
};

/** The Linux number of signal `name` (with or without `SIG`); undefined when unknown. */
export function signalNumber(name: string): number | undefined {
  const bare = name.startsWith('SIG') ? name.slice(3) : name;
  return Object.hasOwn(LINUX_SIGNALS, bare) ? LINUX_SIGNALS[bare] : undefined;
}

/** What a shell reports for a process ended by signal `name`: 128 + n (128 for a signal not in the table, or none). */
export function signalExitCode(name: string | null | undefined): number {
  return 128 + (name ? (signalNumber(name) ?? 0) : 0);
}

/**
 * bash: kills process group `$1`: SIGTERM, up to `graceMs` (in 50 ms steps)
 * for it to go, then SIGKILL, then a short wait so callers see it gone.
 * With a file name in `$2`, a group that had to be SIGKILLed gets that exit
 * file written with 137 (its own wrapper could not write it), so pollers see
 * the end. Exits 0 whether or not anything was left to kill.
 */
export function killGroupScript(graceMs: number): string {
  const steps = Math.max(1, Math.ceil(graceMs / 50));
  return [
    'p=$1',
    'kill -TERM -- -$p 2>/dev/null || exit 0',
    `for ((i = 0; i < ${steps}; i++)); do sleep 0.05; kill -0 -- -$p 2>/dev/null || exit 0; done`,
    'kill -KILL -- -$p 2>/dev/null',
    'for ((i = 0; i < 40; i++)); do kill -0 -- -$p 2>/dev/null || break; sleep 0.01; done',
    `if [ -n "$2" ] && [ ! -e "$2" ]; then printf '137\\n' > "$2"; fi`,
    'exit 0',
  ].join('\n');
}

/** Refuses group ids that would hit init or every process (0, 1, negative). */
export function assertKillableGroup(pgid: number): void {
  if (!Number.isInteger(pgid) || pgid <= 1) throw new Error(`refusing to kill process group ${pgid}`);
}

/** argv that kills group `pgid` (see {@link killGroupScript}), for a transport that takes argv. */
export function killGroupArgv(pgid: number, graceMs: number, exitFile?: string): string[] {
  assertKillableGroup(pgid);
  return ['bash', '-c', killGroupScript(graceMs), 'berth', String(pgid), ...(exitFile ? [exitFile] : [])];
}
