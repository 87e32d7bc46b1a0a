/**
 * The `process` tool's actions over a task's background processes (spec §3,
 * at upstream's current result shapes); the registry (process-registry.ts)
 * holds the processes. Reading never consumes output: poll, wait and kill
 * answer with a tail of the buffer.
 *
 * Every action returns the tool's result as an object, sent as JSON. Shapes (keys in
 * this order; "tail N" = the last N characters of the buffer, ANSI stripped):
 *
 * - list: `{"processes":[{"session_id","command"(first 200 chars),"cwd","pid","owner_task_id","started_at"
 *   (local time, seconds),"uptime_seconds","status":"running"|"exited","output_preview"(tail 200)}]}`, each
 *   entry plus `"watch_patterns","watch_hit"` while watching, `"notify_on_complete":true`,
 *   `"persist_on_release":true` and, once exited, `"exit_code","exited_at"(seconds since the epoch),"completion_reason"`.
 * - poll: `{"session_id","command","status","pid","uptime_seconds","output_preview"(tail 1,000)}`, once
 *   exited plus `"exit_code","completion_reason","termination_source"`.
 * - log: `{"session_id","command","status","output","total_lines","showing":"N lines"}`: `limit` lines
 *   (default 200) from line `offset` (a Python slice `lines[offset:offset+limit]`; absent = the last
 *   `limit` lines).
 * - wait: exited `{"status":"exited","command","exit_code","completion_reason","termination_source","output"(tail 2,000)}`
 *   plus `"output_cut"` (characters of the buffer before that tail) when there were any;
 *   timed out `{"status":"timeout","command","output"(tail 1,000),"process_running":true,"timeout_note"}`;
 *   interrupted `{"status":"interrupted","command","output"(tail 1,000),"note"}`. The wait is capped
 *   (default 180 s, also the default wait); a clamped request adds or prefixes `"timeout_note"`. A timeout
 *   of zero or less: `{"status":"error","error":"timeout must be positive (got T)"}`.
 * - kill: `{"status":"killed","session_id","completion_reason":"killed","termination_source":"process.kill","output"(tail 2,000)}`
 *   (+ `"output_cut"`); on an exited process the wait-exited shape with `"status":"already_exited"`.
 * - write / submit: `{"status":"ok","bytes_written"}` (characters); close: `{"status":"ok","message":"stdin closed"}`
 *   (`"EOF sent"` under a PTY); on an exited process `{"status":"already_exited","error":"Process has already finished"}`;
 *   stdin closed or never open: `{"status":"error","error":"Process stdin not available (non-local backend or stdin closed)"}`.
 *   As upstream, a process starts with its stdin at end of input (a program reading it to the end finishes at once)
 *   unless it runs under a PTY, or `pipeStdin` asks for a pipe that stays open until `close`.
 * - handoff: `{"error":"handoff is only available to a running subagent with a live parent; you are not one."}`.
 * - ids: the exact id, else a unique prefix (`proc_` optional, at least 4 characters after it); unknown,
 *   ambiguous or too short: `{"status":"not_found","error":"No process with ID X"}`. Missing id:
 *   `{"error":"session_id is required for ACTION"}`; unknown action:
 *   `{"error":"Unknown process action: A. Use: list, poll, log, wait, kill, write, submit, close, handoff"}`.
 */
import {
  HANDOFF_UNAVAILABLE_ERROR,
  PROCESS_ACTIONS,
  nonPositiveTimeoutError,
  unknownProcessActionError,
  type ProcessAction,
} from '../common/process-actions.js';
import type { TaskProcessRequest } from '../common/task-client.js';
import {
  completionOutput,
  exitSnapshot,
  listEntry,
  logResult,
  outputTail,
  pollResult,
  RUNNING_TAIL_CHARS,
  uptimeSeconds,
  type Session,
  type SessionView,
  type TerminationSource,
} from './process-session.js';

/** Characters after `proc_` a prefix needs before it can name a process (git-style short ids). */
export const MIN_SESSION_PREFIX_CHARS = 4;

/** What the actions need of the registry that holds the processes. */
export interface ProcessActionHost {
  readonly view: SessionView;
  /** Every tracked process by id, running and finished. */
  readonly sessions: ReadonlyMap<string, Session>;
  /** `wait` without a timeout. */
  readonly defaultWaitMs: number;
  /** Longest `wait`; longer requests are clamped. */
  readonly maxWaitMs: number;
  /** Forgets finished processes past their time. */
  prune(): void;
  /** Stops a running process and waits for its end to be recorded. */
  kill(session: Session, source: TerminationSource): Promise<void>;
}

const WAIT_INTERRUPTED_NOTE = 'User sent a new message -- wait interrupted';

/** Upstream's answer to write, submit or close when the process has no stdin (anymore). */
const STDIN_UNAVAILABLE = 'Process stdin not available (non-local backend or stdin closed)';

/** Seconds as the caller wrote them (whole seconds print without a fraction). */
function seconds(ms: number): number {
  return ms / 1000;
}

/** Runs one `process` tool action; `signal` interrupts `wait`. */
export async function runProcessAction(
  host: ProcessActionHost,
  request: TaskProcessRequest,
  signal: AbortSignal | undefined,
): Promise<Record<string, unknown>> {
  const action = request.action;
  if (!(PROCESS_ACTIONS as readonly string[]).includes(action)) return { error: unknownProcessActionError(action) };
  host.prune();
  if (action === 'list') return { processes: [...host.sessions.values()].map((s) => listEntry(host.view, s)) };
  const id = request.sessionId;
  if (!id) return { error: `session_id is required for ${action}` };
  if (action === 'handoff') return { error: HANDOFF_UNAVAILABLE_ERROR };
  // Upstream rejects a bad wait timeout before it looks the process up.
  if (action === 'wait' && request.timeoutMs !== undefined && request.timeoutMs <= 0) {
    return { status: 'error', error: nonPositiveTimeoutError(seconds(request.timeoutMs)) };
  }
  const session = findSession(host.sessions, id);
  if (!session) return { status: 'not_found', error: `No process with ID ${id}` };
  switch (action as Exclude<ProcessAction, 'list' | 'handoff'>) {
    case 'poll':
      return pollResult(host.view, session);
    case 'log':
      return logResult(host.view, session, request.offset, request.limit);
    case 'wait':
      return wait(host, session, request.timeoutMs, signal);
    case 'kill':
      return killAction(host, session);
    case 'write':
      return write(session, request.data ?? '');
    case 'submit':
      return write(session, `${request.data ?? ''}\n`);
    case 'close':
      return close(session);
  }
}

/**
 * The exact id first; else a unique prefix, like git short hashes: `proc_` is
 * added when missing and at least {@link MIN_SESSION_PREFIX_CHARS} characters
 * must follow it. Ambiguous or shorter prefixes find nothing rather than a guess.
 */
function findSession(sessions: ReadonlyMap<string, Session>, id: string): Session | undefined {
  const exact = sessions.get(id);
  if (exact) return exact;
  const trimmed = id.trim();
  if (trimmed === '') return undefined;
  const query = trimmed.startsWith('proc_') ? trimmed : `proc_${trimmed}`;
  if (query.length - 'proc_'.length < MIN_SESSION_PREFIX_CHARS) return undefined;
  let found: Session | undefined;
  for (const [sessionId, session] of sessions) {
    if (!sessionId.startsWith(query)) continue;
    if (found) return undefined;
    found = session;
  }
  return found;
}

async function wait(
  host: ProcessActionHost,
  session: Session,
  timeoutMs: number | undefined,
  signal: AbortSignal | undefined,
): Promise<Record<string, unknown>> {
  const effectiveMs = Math.min(timeoutMs ?? host.defaultWaitMs, host.maxWaitMs);
  const clampNote =
    timeoutMs !== undefined && timeoutMs > host.maxWaitMs
      ? `Requested wait of ${seconds(timeoutMs)}s was clamped to configured limit of ${seconds(host.maxWaitMs)}s`
      : undefined;
  const withClampNote = (result: Record<string, unknown>) => (clampNote ? { ...result, timeout_note: clampNote } : result);

  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  session.waiters += 1;
  const outcome = await Promise.race<'exited' | 'timeout' | 'interrupted'>([
    session.exited.then(() => 'exited' as const),
    new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), effectiveMs);
    }),
    new Promise<'interrupted'>((resolve) => {
      if (signal?.aborted) resolve('interrupted');
      onAbort = () => resolve('interrupted');
      signal?.addEventListener('abort', onAbort, { once: true });
    }),
  ]);
  session.waiters -= 1;
  clearTimeout(timer);
  if (onAbort) signal?.removeEventListener('abort', onAbort);

  // An exit wins over a timeout or interrupt that raced it: the result is what the model needs.
  if (session.finishedAtMs !== undefined) return withClampNote(exitSnapshot(session, 'exited'));
  if (outcome === 'interrupted') {
    return withClampNote({
      status: 'interrupted',
      command: session.command,
      output: outputTail(session, RUNNING_TAIL_CHARS),
      note: WAIT_INTERRUPTED_NOTE,
    });
  }
  const note =
    `Wait window of ${seconds(effectiveMs)}s elapsed — the process is still running. This is not an error.` +
    ` Uptime: ${uptimeSeconds(host.view, session)}s.` +
    (session.notifyOnComplete
      ? ' notify_on_complete is set: you will be notified on exit — do more work instead of waiting again.'
      : ' Poll again later or use terminal(background=true, notify_on_complete=true) next time for automatic notification.');
  return {
    status: 'timeout',
    command: session.command,
    output: outputTail(session, RUNNING_TAIL_CHARS),
    process_running: true,
    timeout_note: clampNote ? `${clampNote}. ${note}` : note,
  };
}

async function killAction(host: ProcessActionHost, session: Session): Promise<Record<string, unknown>> {
  if (session.finishedAtMs !== undefined) return exitSnapshot(session, 'already_exited');
  // The model asked for this end and gets its output here: no completion notice besides.
  session.completionConsumed = true;
  await host.kill(session, 'process.kill');
  return {
    status: 'killed',
    session_id: session.id,
    completion_reason: session.completionReason,
    termination_source: session.terminationSource,
    ...completionOutput(session),
  };
}

async function write(session: Session, data: string): Promise<Record<string, unknown>> {
  if (session.finishedAtMs !== undefined) return { status: 'already_exited', error: 'Process has already finished' };
  if (session.stdinClosed || !session.handle) return { status: 'error', error: STDIN_UNAVAILABLE };
  try {
    await session.handle.write(data);
    // Characters (code points), as upstream's len(data) counts them.
    return { status: 'ok', bytes_written: [...data].length };
  } catch (err) {
    return { status: 'error', error: err instanceof Error ? err.message : String(err) };
  }
}

async function close(session: Session): Promise<Record<string, unknown>> {
  if (session.finishedAtMs !== undefined) return { status: 'already_exited', error: 'Process has already finished' };
  if (session.stdinNeverOpen) return { status: 'error', error: STDIN_UNAVAILABLE };
  if (!session.stdinClosed) {
    session.stdinClosed = true;
    try {
      await session.handle?.closeStdin();
    } catch (err) {
      return { status: 'error', error: err instanceof Error ? err.message : String(err) };
    }
  }
  return { status: 'ok', message: session.pty ? 'EOF sent' : 'stdin closed' };
}
