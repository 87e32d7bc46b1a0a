/**
 * One background process as the `process` tool sees it (a session), and the
 * result shapes that show it: list entries, poll, log and the snapshot of a
 * finished process. Characters are counted as Python counts them (code
 * points) and lines split as `str.splitlines()` splits them, as upstream's
 * results do. Shapes: see process-tool-actions.ts.
 */
import type { StringDecoder } from 'node:string_decoder';
import type { BackgroundHandle } from './backend.js';
import { stripAnsi, truncateOutput } from './output.js';
import type { ProcessWatch } from './process-watch.js';

/** Why a process ended, as poll, wait and kill report it. */
export type CompletionReason = 'exited' | 'killed';

/** Who ended a killed process: the `kill` action, or the task's release killing everything. */
export type TerminationSource = '' | 'process.kill' | 'kill_all';

/** Tails of the buffer each result carries, in characters. */
const LIST_PREVIEW_CHARS = 200;
const POLL_PREVIEW_CHARS = 1000;
export const RUNNING_TAIL_CHARS = 1000;
export const EXIT_TAIL_CHARS = 2000;

/** Python's `str.splitlines()` separators: the log counts lines the way upstream does. */
const LINE_BREAK = /\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]/;

export interface Session {
  readonly id: string;
  readonly command: string;
  readonly cwd: string | null;
  readonly pty: boolean;
  readonly startedAtMs: number;
  /** Set at start, or later when watching is disabled (upstream promotes the process then). */
  notifyOnComplete: boolean;
  readonly watch: ProcessWatch;
  readonly persistOnRelease: boolean;
  /** 0: no heartbeats. */
  readonly heartbeatSeconds: number;
  heartbeatLastMs: number;
  heartbeatTotalAtLast: number;
  heartbeatSeq: number;
  /** Characters ever appended (the buffer keeps only the last `bufferChars`). */
  totalOutputChars: number;
  /** Waits in progress: one that sees the exit hands the model the completion. */
  waiters: number;
  /** The model already has the completion (its own kill, or a wait that saw the exit): no event. */
  completionConsumed: boolean;
  pid: number | null;
  handle: BackgroundHandle | undefined;
  finishedAtMs: number | undefined;
  exitCode: number | null;
  completionReason: CompletionReason;
  terminationSource: TerminationSource;
  /** Set when a kill starts, so the exit it causes is recorded as a kill. */
  killSource: TerminationSource | undefined;
  /** No stdin to write to: never had one (started at end of input), or `close` ended it. */
  stdinClosed: boolean;
  /** Started with stdin at end of input: `close` has nothing to close either. */
  readonly stdinNeverOpen: boolean;
  readonly decoder: StringDecoder;
  /** The last `bufferChars` characters of output. */
  output: string;
  readonly exited: Promise<void>;
  markExited: () => void;
}

/** What the results need besides the session. */
export interface SessionView {
  /** The clock. */
  readonly now: () => number;
  /** Shown by `list` as `owner_task_id`. */
  readonly ownerTaskId: string;
  /** Cap on `output` of log. */
  readonly logOutputChars: number;
}

/** `YYYY-MM-DDTHH:MM:SS` in this machine's local time (upstream's `time.strftime` format). */
function localTimestamp(ms: number): string {
  const d = new Date(ms);
  const two = (n: number) => String(n).padStart(2, '0');
  return (
    `${String(d.getFullYear()).padStart(4, '0')}-${two(d.getMonth() + 1)}-${two(d.getDate())}` +
    `T${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`
  );
}

/** Python's `str.splitlines()`: no empty last line for a trailing break, none at all for "". */
function splitLines(text: string): string[] {
  if (text === '') return [];
  const lines = text.split(LINE_BREAK);
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff;
const isLowSurrogate = (code: number) => code >= 0xdc00 && code <= 0xdfff;

/** The first `n` characters as Python counts them (code points, so no pair is split). */
function headCodePoints(text: string, n: number): string {
  if (text.length <= n) return text;
  let end = 0;
  for (let count = 0; count < n && end < text.length; count++) {
    end += isHighSurrogate(text.charCodeAt(end)) && isLowSurrogate(text.charCodeAt(end + 1)) ? 2 : 1;
  }
  return text.slice(0, end);
}

/** The last `n` characters as Python counts them (code points, so no pair is split). */
function tailCodePoints(text: string, n: number): string {
  if (text.length <= n) return text;
  let start = text.length;
  for (let count = 0; count < n && start > 0; count++) {
    start -= isLowSurrogate(text.charCodeAt(start - 1)) && isHighSurrogate(text.charCodeAt(start - 2)) ? 2 : 1;
  }
  return text.slice(start);
}

function status(session: Session): 'running' | 'exited' {
  return session.finishedAtMs === undefined ? 'running' : 'exited';
}

/** Seconds since start; like upstream it keeps counting after the process ended. */
export function uptimeSeconds(view: SessionView, session: Session): number {
  return Math.max(0, Math.floor((view.now() - session.startedAtMs) / 1000));
}

/** Output as the model should see it: ANSI stripped, PTY line endings normalised. */
export function cleanOutput(session: Session, text: string): string {
  const stripped = stripAnsi(text);
  return session.pty ? stripped.replaceAll('\r\n', '\n') : stripped;
}

/** The last `chars` characters of the buffer, cleaned. */
export function outputTail(session: Session, chars: number): string {
  return cleanOutput(session, tailCodePoints(session.output, chars));
}

function exitFields(session: Session): Record<string, unknown> {
  return {
    exit_code: session.exitCode,
    completion_reason: session.completionReason,
    termination_source: session.terminationSource,
  };
}

/**
 * The last 2,000 characters, and `output_cut` (how many characters of the
 * buffer came before them) when there were more: upstream's
 * `_completion_output`, so a reader knows the output is not whole.
 */
export function completionOutput(session: Session): { output: string; output_cut?: number } {
  const output = outputTail(session, EXIT_TAIL_CHARS);
  const cut = [...session.output].length - EXIT_TAIL_CHARS;
  return cut > 0 ? { output, output_cut: cut } : { output };
}

/** What wait and kill answer for a finished process: how it ended and the last 2,000 characters. */
export function exitSnapshot(session: Session, status: 'exited' | 'already_exited'): Record<string, unknown> {
  return { status, command: session.command, ...exitFields(session), ...completionOutput(session) };
}

export function listEntry(view: SessionView, session: Session): Record<string, unknown> {
  const exited = session.finishedAtMs !== undefined;
  return {
    session_id: session.id,
    command: headCodePoints(session.command, 200),
    cwd: session.cwd,
    pid: session.pid,
    owner_task_id: view.ownerTaskId,
    started_at: localTimestamp(session.startedAtMs),
    uptime_seconds: uptimeSeconds(view, session),
    status: status(session),
    output_preview: outputTail(session, LIST_PREVIEW_CHARS),
    ...(session.watch.active ? { watch_patterns: [...session.watch.patterns], watch_hit: session.watch.hit } : {}),
    ...(session.notifyOnComplete ? { notify_on_complete: true } : {}),
    ...(session.persistOnRelease ? { persist_on_release: true } : {}),
    ...(exited
      ? { exit_code: session.exitCode, exited_at: (session.finishedAtMs ?? 0) / 1000, completion_reason: session.completionReason }
      : {}),
  };
}

/** Status and the last 1,000 characters; reads nothing away, so polling twice shows the same tail. */
export function pollResult(view: SessionView, session: Session): Record<string, unknown> {
  return {
    session_id: session.id,
    command: session.command,
    status: status(session),
    pid: session.pid,
    uptime_seconds: uptimeSeconds(view, session),
    output_preview: outputTail(session, POLL_PREVIEW_CHARS),
    ...(session.finishedAtMs !== undefined ? exitFields(session) : {}),
  };
}

export function logResult(view: SessionView, session: Session, offset: number | undefined, limit: number | undefined): Record<string, unknown> {
  const lines = splitLines(cleanOutput(session, session.output));
  const count = limit ?? 200;
  // Python slice semantics, as upstream pages: no offset means the last `limit` lines,
  // an explicit 0 means the first; negative numbers count from the end.
  const start = offset === undefined && count > 0 ? -count : (offset ?? 0);
  const selected = offset === undefined && count > 0 ? lines.slice(start) : lines.slice(start, start + count);
  return {
    session_id: session.id,
    command: session.command,
    status: status(session),
    output: truncateOutput(selected.join('\n'), view.logOutputChars),
    total_lines: lines.length,
    showing: `${selected.length} lines`,
  };
}
