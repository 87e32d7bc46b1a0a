/**
 * `berth doctor`'s lines on what the backend can do with a task
 * environment's life (BackendCapabilities.lifecycle): one summary line, one
 * per note, and, where the backend can suspend, a suspension of the doctor's
 * task and the time its next command takes.
 */
import type { BackendCapabilities, DiagnosticFinding, TaskKey } from '../executor/backend.js';
import type { TaskEnvironments } from '../executor/task-environment.js';

const yesNo = (on: boolean | undefined) => (on ? 'yes' : 'no');

/** What the backend declares: snapshot, processes (in snapshots), suspend, and its notes. */
export function lifecycleFindings(capabilities: BackendCapabilities): DiagnosticFinding[] {
  const l = capabilities.lifecycle;
  const summary = `lifecycle of the ${capabilities.name} backend: snapshot ${yesNo(l?.snapshot)}, processes in snapshots ${yesNo(l?.processes)}, suspend ${yesNo(l?.suspend)}`;
  return [{ verdict: 'ok', text: summary }, ...(l?.notes ?? []).map((note) => ({ verdict: 'ok' as const, text: `lifecycle: ${note}` }))];
}

/** Suspends the doctor's task (which has run a command) and times the command that resumes it. */
export async function checkSuspension(envs: TaskEnvironments, key: TaskKey): Promise<DiagnosticFinding[]> {
  if (!envs.capabilities.lifecycle?.suspend) return [];
  let started = performance.now();
  const { suspended } = await envs.suspend(key);
  const suspendMs = performance.now() - started;
  if (!suspended) return [{ verdict: 'fail', text: 'the task could not be suspended (it had no environment)' }];
  started = performance.now();
  const r = await envs.exec(key, { command: 'echo resumed', timeoutMs: 120_000 });
  const resumeMs = performance.now() - started;
  const ok = r.exitCode === 0 && r.output.trim() === 'resumed';
  return [
    {
      verdict: ok ? 'ok' : 'fail',
      text: ok
        ? `a task suspends (${suspendMs.toFixed(0)} ms) and its next command resumes it (${resumeMs.toFixed(0)} ms)`
        : `the command after a suspension did not run as expected (exit ${r.exitCode}): ${r.output.trim().slice(0, 300)}`,
    },
  ];
}
