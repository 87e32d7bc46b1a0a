/**
 * Whether a docker snapshot could hold running processes on this host, for
 * `berth doctor` (docs/lifecycle.md, "Processes"). Under runc that is CRIU's
 * question: `criu check` is run and what it says is reported. Berth does not
 * checkpoint container memory with it in any case (Docker's checkpoint needs
 * the daemon's experimental mode), so the finding says what a snapshot holds
 * either way. Under gVisor, runsc's own checkpoint is not used either.
 */
import { execFile } from 'node:child_process';
import type { DiagnosticFinding } from '../../backend.js';

/** What `criu check` said: not installed, or its exit and the last line it printed. */
export interface CriuCheck {
  readonly installed: boolean;
  readonly passed: boolean;
  /** Its last non-empty output line (CRIU prints the reason last), at most 300 characters. */
  readonly detail: string;
}

const CRIU_CHECK_TIMEOUT_MS = 20_000;
const HOLDS = 'docker snapshots hold files and shell state, not running processes';

/** Runs `criu check` (CRIU needs root for it; as another user it fails and says so). */
export function runCriuCheck(criu = 'criu'): Promise<CriuCheck> {
  return new Promise((resolve) => {
    execFile(criu, ['check'], { timeout: CRIU_CHECK_TIMEOUT_MS, maxBuffer: 256 * 1024 }, (err, stdout, stderr) => {
      if ((err as NodeJS.ErrnoException | null)?.code === 'ENOENT') {
        resolve({ installed: false, passed: false, detail: '' });
        return;
      }
      const lines = `${stdout}\n${stderr}`.split('\n').map((l) => l.trim()).filter((l) => l !== '');
      const last = lines.at(-1) ?? (err ? err.message : '');
      resolve({ installed: true, passed: err === null, detail: last.slice(0, 300) });
    });
  });
}

/** The doctor's line on processes in snapshots, for the container runtime in use. Pure. */
export function checkpointFinding(runtime: string, check: CriuCheck | undefined): DiagnosticFinding {
  if (runtime === 'runsc') {
    return {
      verdict: 'ok',
      text: `processes in snapshots: gVisor's checkpoint is not used (docs/lifecycle.md says why): ${HOLDS}`,
    };
  }
  if (!check || !check.installed) {
    return { verdict: 'ok', text: `processes in snapshots: criu is not installed on this host: ${HOLDS}` };
  }
  if (!check.passed) {
    return { verdict: 'ok', text: `processes in snapshots: criu check fails on this host (${check.detail}): ${HOLDS}` };
  }
  return {
    verdict: 'ok',
    text: `processes in snapshots: criu check passes on this host, but Berth does not checkpoint container memory with it: ${HOLDS}`,
  };
}
