/**
 * `berth doctor`: does the configured backend work on this host? It starts
 * the backend as an executor would, runs a command in a throwaway task,
 * releases it, and prints one line per finding: `ok`, `warn` (works, but
 * weaker or slower than it could be; the backend's own start-up warnings
 * land here) or `fail` (with the backend's message, which says what to do).
 * No server is needed and nothing is left behind.
 */
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import type { BerthConfig } from '../common/config.js';
import { createLogger } from '../common/logging.js';
import type { Backend, DiagnosticFinding, TaskKey } from '../executor/backend.js';
import { createBackend } from '../executor/backends/create-backend.js';
import { TaskEnvironments } from '../executor/task-environment.js';
import { checkSuspension, lifecycleFindings } from './doctor-lifecycle.js';

export type Finding = DiagnosticFinding;
export type Verdict = Finding['verdict'];

/** Runs the checks; `report` gets each finding as it is made. */
export async function runDoctor(config: BerthConfig, report: (finding: Finding) => void): Promise<Finding[]> {
  const findings: Finding[] = [];
  const say = (verdict: Verdict, text: string) => {
    const finding = { verdict, text };
    findings.push(finding);
    report(finding);
  };
  // The backend's warnings (a limit it cannot apply, a flag that weakens the sandbox, ...) are findings too.
  const warnings: string[] = [];
  const logger = createLogger(
    'warn',
    new Writable({
      write(chunk: Buffer, _encoding, callback) {
        try {
          const record = JSON.parse(chunk.toString()) as { level?: number; msg?: string; err?: unknown };
          if ((record.level ?? 0) >= 40 && record.msg) {
            const detail = typeof record.err === 'string' ? `: ${record.err}` : '';
            warnings.push(`${record.msg}${detail}`);
          }
        } catch {
          // not a log record
        }
        callback();
      },
    }),
  );
  const name = config.terminal.backend;
  let backend: Backend;
  try {
    backend = await createBackend(config, logger);
  } catch (err) {
    say('fail', `the ${name} backend does not start: ${message(err)}`);
    return findings;
  }
  say('ok', `the ${name} backend starts`);
  const envs = new TaskEnvironments({ backend, logger, lifetimeSeconds: 0 });
  const key: TaskKey = { tenant: 'berth-doctor', taskId: `doctor-${randomBytes(4).toString('hex')}` };
  try {
    let started = performance.now();
    const first = await envs.exec(key, { command: 'echo "berth-doctor-$((6 * 7))"; id -u', timeoutMs: 120_000 });
    const firstMs = performance.now() - started;
    const [marker, uid] = first.output.trim().split('\n');
    if (first.exitCode !== 0 || marker !== 'berth-doctor-42') {
      say('fail', `a command in a new task did not run as expected (exit ${first.exitCode}): ${first.output.trim().slice(0, 500)}`);
      return findings;
    }
    say('ok', `a new task runs a command (${firstMs.toFixed(0)} ms, as uid ${uid})`);
    started = performance.now();
    const warm = await envs.exec(key, { command: 'true', timeoutMs: 60_000 });
    const warmMs = performance.now() - started;
    say(warm.exitCode === 0 ? 'ok' : 'fail', `the same task runs the next command (${warmMs.toFixed(1)} ms, exit ${warm.exitCode})`);
    for (const f of lifecycleFindings(backend.capabilities)) say(f.verdict, f.text);
    for (const f of await checkSuspension(envs, key)) say(f.verdict, f.text);
    // What only the backend can tell: how commands reach its sandbox, whether its limits and network policy hold.
    for (const f of (await backend.diagnose?.(key, 'live')) ?? []) say(f.verdict, f.text);
  } catch (err) {
    say('fail', `a command in a new task failed: ${message(err)}`);
  } finally {
    await envs.closeAll().catch((err: unknown) => say('warn', `releasing the doctor's task failed: ${message(err)}`));
    // Whether release did its work, once the backend removed what only a throwaway task leaves behind.
    const released = await Promise.resolve(backend.diagnose?.(key, 'released')).catch((err: unknown): Finding[] => [
      { verdict: 'warn', text: `checking the doctor's released task failed: ${message(err)}` },
    ]);
    for (const f of released ?? []) say(f.verdict, f.text);
    await backend.close().catch(() => undefined);
    for (const text of new Set(warnings)) say('warn', text);
  }
  return findings;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** `ok    text` lines, aligned. */
export function formatFinding(finding: Finding): string {
  return `${finding.verdict.padEnd(5)} ${finding.text}\n`;
}
