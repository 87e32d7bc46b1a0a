/**
 * Kernel counters that tell why a command in a container died: OOM kills
 * (memory limit) and refused forks (pids limit). Read from the container's
 * own cgroup files, cgroup v2 first, then v1. Pure parsing here; the
 * environment reads the files through its channel.
 */

export interface CgroupCounter {
  /** Candidate files: cgroup v2, then v1. */
  readonly paths: readonly string[];
  /** The line key whose number is the counter. */
  readonly key: string;
}

/** Processes killed by the OOM killer in the container's memory cgroup. */
export const OOM_KILLS: CgroupCounter = {
  paths: ['/sys/fs/cgroup/memory.events', '/sys/fs/cgroup/memory/memory.oom_control'],
  key: 'oom_kill',
};

/** Forks refused because the pids limit was reached. */
export const PIDS_LIMIT_HITS: CgroupCounter = {
  paths: ['/sys/fs/cgroup/pids.events', '/sys/fs/cgroup/pids/pids.events'],
  key: 'max',
};

/** The number after `key` on its own line (`oom_kill 3`), or undefined. */
export function parseCounter(text: string, key: string): number | undefined {
  for (const line of text.split('\n')) {
    const [name, value] = line.trim().split(/\s+/);
    if (name === key && value !== undefined && /^\d+$/.test(value)) return Number(value);
  }
  return undefined;
}
