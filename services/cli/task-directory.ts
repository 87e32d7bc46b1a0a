/**
 * Where a new task's commands start, said in `berth serve`'s start-up line.
 * On the local backend it is Hermes's rule: `terminal.cwd`, else the
 * directory the server was started in; other backends start in their
 * sandbox's own directory, a backend package where it says.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TerminalConfig } from '../common/config.js';

/** The directory (or a description of it) new tasks of this backend start in. */
export function newTaskDirectory(terminal: Pick<TerminalConfig, 'backend' | 'cwd' | 'ssh_host'>, launchDir: string): string {
  switch (terminal.backend) {
    case 'local':
      return resolve(launchDir, terminal.cwd || '.');
    case 'modal':
      return terminal.cwd || "the image's working directory, in each task's sandbox";
    case 'docker':
    case 'singularity':
      return "/workspace, in each task's sandbox";
    case 'ssh':
      return `~/.berth/tasks/<task>/work on ${terminal.ssh_host}`;
    case 'daytona':
      return "the sandbox's working directory, in each task's sandbox";
    case 'kubernetes':
      return "/workspace, in each task's pod";
    default:
      return `where the ${terminal.backend} backend starts its tasks`;
  }
}

/** This installation's root: the directory holding its package.json, three levels above the compiled file. */
const INSTALL_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/**
 * True when new local tasks would start inside Berth's own source checkout
 * (`make run` or `bin/berth serve` from the repository): agents' commands
 * would then change Berth's own files.
 */
export function startsInBerthCheckout(terminal: Pick<TerminalConfig, 'backend' | 'cwd' | 'ssh_host'>, launchDir: string, root = INSTALL_ROOT): boolean {
  if (terminal.backend !== 'local' || !existsSync(resolve(root, '.git'))) return false;
  const start = newTaskDirectory(terminal, launchDir);
  const base = resolve(root);
  return start === base || start.startsWith(`${base}/`);
}
