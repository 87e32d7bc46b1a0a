/** What the benchmarks ran on, and from which commit; recorded beside every result. */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { availableParallelism, loadavg, release, totalmem } from 'node:os';

export interface MachineInfo {
  /** Logical CPUs this process may use (`nproc`). */
  readonly nproc: number;
  readonly cpuModel: string;
  readonly memoryGiB: number;
  readonly kernel: string;
  readonly node: string;
  /** Docker engine version, when the run used Docker. */
  docker?: string;
  /** 1-minute load average when the run started and ended: how busy the machine was besides us. */
  loadAverage?: { readonly start: number; readonly end: number };
}

/** The 1-minute load average, one decimal. */
export function loadAverage1m(): number {
  return Math.round((loadavg()[0] ?? 0) * 10) / 10;
}

export interface SourceInfo {
  readonly sha: string;
  /** `git describe --always --dirty`: says whether uncommitted changes were measured. */
  readonly describe: string;
}

function cpuModel(): string {
  try {
    const m = /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'));
    return m?.[1]?.trim() ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

export function machineInfo(): MachineInfo {
  return {
    nproc: availableParallelism(),
    cpuModel: cpuModel(),
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    kernel: release(),
    node: process.version,
  };
}

function git(repoRoot: string, args: string[]): string {
  try {
    return execFileSync('git', args, { cwd: repoRoot, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return '';
  }
}

export function sourceInfo(repoRoot: string): SourceInfo {
  return {
    sha: git(repoRoot, ['rev-parse', '--short=8', 'HEAD']) || 'nogit',
    describe: git(repoRoot, ['describe', '--always', '--dirty']) || 'nogit',
  };
}

export function dockerVersion(): string | undefined {
  try {
    return execFileSync('docker', ['version', '--format', '{{.Server.Version}}'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
      timeout: 10_000,
    }).trim();
  } catch {
    return undefined;
  }
}
