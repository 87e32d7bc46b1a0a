/**
 * Background processes of one task and the `process` tool's actions over
 * them (spec §3, at upstream's current result shapes). Each process keeps a
 * rolling output buffer; finished ones stay listed for a while so their
 * output can still be read. Reading never consumes output: poll, wait and
 * kill answer with a tail of the buffer.
 *
 * Every action returns the tool's result as a JSON string. Shapes (keys in
 * this order; "tail N" = the last N characters of the buffer, ANSI stripped):
 *
 * - list: `{"processes":[{"session_id","command"(first 200 chars),"cwd","pid","owner_task_id","started_at"
 *   (local time, seconds),"uptime_seconds","status":"running"|"exited","output_preview"(tail 200)}]}`, each
 *   entry plus `"watch_patterns","watch_hit"` while watching, `"notify_on_complete":true` and, once
 *   exited, `"exit_code"`.
 * - poll: `{"session_id","command","status","pid","uptime_seconds","output_preview"(tail 1,000)}`, once
 *   exited plus `"exit_code","completion_reason","termination_source"`.
 * - log: `{"session_id","command","status","output","total_lines","showing":"N lines"}`: `limit` lines
 *   (default 200) from line `offset` (a Python slice `lines[offset:offset+limit]`; absent = the last
 *   `limit` lines).
 * - wait: exited `{"status":"exited","command","exit_code","completion_reason","termination_source","output"(tail 2,000)}`;
 *   timed out `{"status":"timeout","command","output"(tail 1,000),"process_running":true,"timeout_note"}`;
 *   interrupted `{"status":"interrupted","command","output"(tail 1,000),"note"}`. The wait is capped
 *   (default 180 s, also the default wait); a clamped request adds or prefixes `"timeout_note"`. A timeout
 *   of zero or less: `{"status":"error","error":"timeout must be positive (got T)"}`.
 * - kill: `{"status":"killed","session_id","completion_reason":"killed","termination_source":"process.kill","output"(tail 2,000)}`;
 *   on an exited process the wait-exited shape with `"status":"already_exited"`.
 * - write / submit: `{"status":"ok","bytes_written"}` (characters); close: `{"status":"ok","message":"stdin closed"}`
 *   (`"EOF sent"` under a PTY); on an exited process `{"status":"already_exited","error":"Process has already finished"}`;
 *   stdin closed: `{"status":"error","error":"Process stdin not available (non-local backend or stdin closed)"}`.
 * - handoff: `{"error":"handoff is only available to a running subagent with a live parent; you are not one."}`.
 * - ids: the exact id, else a unique prefix (`proc_` optional, at least 4 characters after it); unknown,
 *   ambiguous or too short: `{"status":"not_found","error":"No process with ID X"}`. Missing id:
 *   `{"error":"session_id is required for ACTION"}`; unknown action:
 *   `{"error":"Unknown process action: A. Use: list, poll, log, wait, kill, write, submit, close, handoff"}`.
 */
import { randomBytes } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import { ResourceExhaustedError } from '../common/errors.js';
import type { Logger } from '../common/logging.js';
import {
  HANDOFF_UNAVAILABLE_ERROR,
  PROCESS_ACTIONS,
  nonPositiveTimeoutError,
  unknownProcessActionError,
  type ProcessAction,
} from '../common/process-actions.js';
import type { BackgroundHandle } from './backend.js';
import { stripAnsi, truncateOutput } from './output.js';

/** Exit code reported for a process stopped with the `kill` action (SIGTERM). */
export const KILLED_EXIT_CODE = -15;

/** Characters after `proc_` a prefix needs before it can name a process (git-style short ids). */
export const MIN_SESSION_PREFIX_CHARS = 4;

/** What the registry asks of whoever actually starts processes (the shell-state runner). */
export interface ProcessLaunchOptions {
  readonly command: string;
  readonly workdir?: string;
  readonly pty?: boolean;
  readonly onOutput: (chunk: Buffer) => void;
  readonly onExit: (exitCode: number) => void;
}

export type ProcessLauncher = (options: ProcessLaunchOptions) => Promise<BackgroundHandle>;

export interface ProcessStartRequest {
  readonly command: string;
  /** Directory to start in for this process; the task cwd when absent. */
  readonly workdir?: string;
  /** Directory shown by `list` (the workdir, or the task cwd at start). */
  readonly cwd?: string;
  readonly pty?: boolean;
  readonly notifyOnComplete?: boolean;
  readonly watchPatterns?: readonly string[];
}

export interface ProcessActionRequest {
  readonly action: string;
  readonly sessionId?: string;
  readonly data?: string;
  readonly timeoutMs?: number;
  readonly offset?: number;
  readonly limit?: number;
}

/**
 * Reported to {@link ProcessRegistryOptions.onEvent} so the executor can
 * notify the agent. `completed` is sent for every process; consumers notify
 * only when `notifyOnComplete` is set.
 */
export type ProcessEvent =
  | {
      readonly kind: 'watch_match';
      readonly sessionId: string;
      readonly command: string;
      readonly pattern: string;
      /** The output line that contained the pattern (ANSI stripped, at most 500 chars). */
      readonly line: string;
      /** Matches reported so far for this process, this one included. */
      readonly hits: number;
    }
  | {
      readonly kind: 'completed';
      readonly sessionId: string;
      readonly command: string;
      readonly exitCode: number;
      readonly notifyOnComplete: boolean;
      /** The last 2,000 characters of output (ANSI stripped). */
      readonly outputTail: string;
    };

export interface ProcessRegistryOptions {
  readonly launch: ProcessLauncher;
  /** The task the processes belong to, shown by `list` as `owner_task_id`; default "". */
  readonly ownerTaskId?: string;
  /** Processes per task, running and finished; default 64. */
  readonly maxProcesses?: number;
  /** Rolling buffer per process; default 200,000 characters. */
  readonly bufferChars?: number;
  /** How long finished processes stay listed; default 1,800,000 ms (30 min). */
  readonly finishedTtlMs?: number;
  /** `wait` without a timeout; default 180,000 ms. */
  readonly defaultWaitMs?: number;
  /** Longest `wait`; longer requests are clamped; default 180,000 ms (upstream's TERMINAL_TIMEOUT). */
  readonly maxWaitMs?: number;
  /** Cap on `output` of log; default 50,000 characters. */
  readonly logOutputChars?: number;
  /** Watch-pattern matches reported per process before watching stops; default 8. */
  readonly maxWatchHits?: number;
  /** Clock, for tests. */
  readonly now?: () => number;
  /** The part of a new id after `proc_` (default 12 random hex digits), for tests. */
  readonly idSuffix?: () => string;
  readonly onEvent?: (event: ProcessEvent) => void;
  readonly logger?: Logger;
}

/** Why a process ended, as poll, wait and kill report it. */
type CompletionReason = 'exited' | 'killed';

/** Who ended a killed process: the `kill` action, or the task's release killing everything. */
type TerminationSource = '' | 'process.kill' | 'kill_all';

/** Tails of the buffer each result carries, in characters. */
const LIST_PREVIEW_CHARS = 200;
const POLL_PREVIEW_CHARS = 1000;
const RUNNING_TAIL_CHARS = 1000;
const EXIT_TAIL_CHARS = 2000;

const WAIT_INTERRUPTED_NOTE = 'User sent a new message -- wait interrupted';

/** Python's `str.splitlines()` separators: the log counts lines the way upstream does. */
const LINE_BREAK = /\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]/;

interface Session {
  readonly id: string;
  readonly command: string;
  readonly cwd: string | null;
  readonly pty: boolean;
  readonly startedAtMs: number;
  readonly notifyOnComplete: boolean;
  readonly watchPatterns: readonly string[];
  pid: number | null;
  handle: BackgroundHandle | undefined;
  finishedAtMs: number | undefined;
  exitCode: number | null;
  completionReason: CompletionReason;
  terminationSource: TerminationSource;
  /** Set when a kill starts, so the exit it causes is recorded as a kill. */
  killSource: TerminationSource | undefined;
  stdinClosed: boolean;
  readonly decoder: StringDecoder;
  /** The last `bufferChars` characters of output. */
  output: string;
  watchCarry: string;
  watchHits: number;
  readonly exited: Promise<void>;
  markExited: () => void;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

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

/** Seconds as the caller wrote them (whole seconds print without a fraction). */
function seconds(ms: number): number {
  return ms / 1000;
}

/** Background processes of one task. */
export class ProcessRegistry {
  readonly #launch: ProcessLauncher;
  readonly #ownerTaskId: string;
  readonly #maxProcesses: number;
  readonly #bufferChars: number;
  readonly #finishedTtlMs: number;
  readonly #defaultWaitMs: number;
  readonly #maxWaitMs: number;
  readonly #logOutputChars: number;
  readonly #maxWatchHits: number;
  readonly #now: () => number;
  readonly #idSuffix: () => string;
  readonly #onEvent: ((event: ProcessEvent) => void) | undefined;
  readonly #logger: Logger | undefined;
  readonly #sessions = new Map<string, Session>();

  constructor(options: ProcessRegistryOptions) {
    this.#launch = options.launch;
    this.#ownerTaskId = options.ownerTaskId ?? '';
    this.#maxProcesses = options.maxProcesses ?? 64;
    this.#bufferChars = options.bufferChars ?? 200_000;
    this.#finishedTtlMs = options.finishedTtlMs ?? 1_800_000;
    this.#defaultWaitMs = options.defaultWaitMs ?? 180_000;
    this.#maxWaitMs = options.maxWaitMs ?? 180_000;
    this.#logOutputChars = options.logOutputChars ?? 50_000;
    this.#maxWatchHits = options.maxWatchHits ?? 8;
    this.#now = options.now ?? Date.now;
    this.#idSuffix = options.idSuffix ?? (() => randomBytes(6).toString('hex'));
    this.#onEvent = options.onEvent;
    this.#logger = options.logger;
  }

  /** True while any process is still running (keeps the task from being reaped). */
  hasRunning(): boolean {
    return [...this.#sessions.values()].some((s) => s.finishedAtMs === undefined);
  }

  /** Processes currently tracked (running and finished). */
  get size(): number {
    this.#prune();
    return this.#sessions.size;
  }

  /**
   * Starts a process. When the task is at its limit the oldest finished
   * process is forgotten; if all are running, rejects with ResourceExhaustedError.
   */
  async start(request: ProcessStartRequest): Promise<{ sessionId: string; pid: number }> {
    this.#makeRoom();
    let markExited = () => {};
    const exited = new Promise<void>((resolve) => (markExited = resolve));
    const session: Session = {
      id: this.#newId(),
      command: request.command,
      cwd: request.workdir ?? request.cwd ?? null,
      pty: request.pty ?? false,
      startedAtMs: this.#now(),
      notifyOnComplete: request.notifyOnComplete ?? false,
      watchPatterns: (request.watchPatterns ?? []).filter((p) => p.length > 0),
      pid: null,
      handle: undefined,
      finishedAtMs: undefined,
      exitCode: null,
      completionReason: 'exited',
      terminationSource: '',
      killSource: undefined,
      stdinClosed: false,
      decoder: new StringDecoder('utf8'),
      output: '',
      watchCarry: '',
      watchHits: 0,
      exited,
      markExited,
    };
    // Reserve the slot before the launch awaits, so concurrent starts respect the limit.
    this.#sessions.set(session.id, session);
    try {
      const handle = await this.#launch({
        command: request.command,
        ...(request.workdir !== undefined ? { workdir: request.workdir } : {}),
        ...(request.pty ? { pty: true } : {}),
        onOutput: (chunk) => this.#append(session, session.decoder.write(chunk)),
        onExit: (code) => this.#finish(session, code),
      });
      session.handle = handle;
      session.pid = handle.pid;
      return { sessionId: session.id, pid: handle.pid };
    } catch (err) {
      this.#sessions.delete(session.id);
      throw err;
    }
  }

  /** Runs a `process` tool action; returns the result JSON. `signal` interrupts `wait`. */
  async handle(request: ProcessActionRequest, signal?: AbortSignal): Promise<string> {
    const result = await this.#dispatch(request, signal);
    return JSON.stringify(result);
  }

  /** Kills every running process (task release, shutdown). */
  async closeAll(): Promise<void> {
    await Promise.all(
      [...this.#sessions.values()].filter((s) => s.finishedAtMs === undefined).map((s) => this.#kill(s, 'kill_all')),
    );
  }

  /** A fresh id, unlike any tracked one. */
  #newId(): string {
    for (;;) {
      const id = `proc_${this.#idSuffix()}`;
      if (!this.#sessions.has(id)) return id;
    }
  }

  async #dispatch(request: ProcessActionRequest, signal: AbortSignal | undefined): Promise<Record<string, unknown>> {
    const action = request.action;
    if (!(PROCESS_ACTIONS as readonly string[]).includes(action)) return { error: unknownProcessActionError(action) };
    this.#prune();
    if (action === 'list') return { processes: [...this.#sessions.values()].map((s) => this.#listEntry(s)) };
    const id = request.sessionId;
    if (!id) return { error: `session_id is required for ${action}` };
    if (action === 'handoff') return { error: HANDOFF_UNAVAILABLE_ERROR };
    // Upstream rejects a bad wait timeout before it looks the process up.
    if (action === 'wait' && request.timeoutMs !== undefined && request.timeoutMs <= 0) {
      return { status: 'error', error: nonPositiveTimeoutError(seconds(request.timeoutMs)) };
    }
    const session = this.#find(id);
    if (!session) return { status: 'not_found', error: `No process with ID ${id}` };
    switch (action as Exclude<ProcessAction, 'list' | 'handoff'>) {
      case 'poll':
        return this.#poll(session);
      case 'log':
        return this.#log(session, request.offset, request.limit);
      case 'wait':
        return this.#wait(session, request.timeoutMs, signal);
      case 'kill':
        return this.#killAction(session);
      case 'write':
        return this.#write(session, request.data ?? '');
      case 'submit':
        return this.#write(session, `${request.data ?? ''}\n`);
      case 'close':
        return this.#close(session);
    }
  }

  /**
   * The exact id first; else a unique prefix, like git short hashes: `proc_` is
   * added when missing and at least {@link MIN_SESSION_PREFIX_CHARS} characters
   * must follow it. Ambiguous or shorter prefixes find nothing rather than a guess.
   */
  #find(id: string): Session | undefined {
    const exact = this.#sessions.get(id);
    if (exact) return exact;
    const trimmed = id.trim();
    if (trimmed === '') return undefined;
    const query = trimmed.startsWith('proc_') ? trimmed : `proc_${trimmed}`;
    if (query.length - 'proc_'.length < MIN_SESSION_PREFIX_CHARS) return undefined;
    let found: Session | undefined;
    for (const [sessionId, session] of this.#sessions) {
      if (!sessionId.startsWith(query)) continue;
      if (found) return undefined;
      found = session;
    }
    return found;
  }

  #status(session: Session): 'running' | 'exited' {
    return session.finishedAtMs === undefined ? 'running' : 'exited';
  }

  /** Seconds since start; like upstream it keeps counting after the process ended. */
  #uptimeSeconds(session: Session): number {
    return Math.max(0, Math.floor((this.#now() - session.startedAtMs) / 1000));
  }

  /** Output as the model should see it: ANSI stripped, PTY line endings normalised. */
  #clean(session: Session, text: string): string {
    const stripped = stripAnsi(text);
    return session.pty ? stripped.replaceAll('\r\n', '\n') : stripped;
  }

  /** The last `chars` characters of the buffer, cleaned. */
  #tail(session: Session, chars: number): string {
    return this.#clean(session, tailCodePoints(session.output, chars));
  }

  #exitFields(session: Session): Record<string, unknown> {
    return {
      exit_code: session.exitCode,
      completion_reason: session.completionReason,
      termination_source: session.terminationSource,
    };
  }

  /** What wait and kill answer for a finished process: how it ended and the last 2,000 characters. */
  #exitSnapshot(session: Session, status: 'exited' | 'already_exited'): Record<string, unknown> {
    return { status, command: session.command, ...this.#exitFields(session), output: this.#tail(session, EXIT_TAIL_CHARS) };
  }

  #listEntry(session: Session): Record<string, unknown> {
    const watching = session.watchPatterns.length > 0 && session.watchHits < this.#maxWatchHits;
    return {
      session_id: session.id,
      command: headCodePoints(session.command, 200),
      cwd: session.cwd,
      pid: session.pid,
      owner_task_id: this.#ownerTaskId,
      started_at: localTimestamp(session.startedAtMs),
      uptime_seconds: this.#uptimeSeconds(session),
      status: this.#status(session),
      output_preview: this.#tail(session, LIST_PREVIEW_CHARS),
      ...(watching ? { watch_patterns: [...session.watchPatterns], watch_hit: session.watchHits > 0 } : {}),
      ...(session.notifyOnComplete ? { notify_on_complete: true } : {}),
      ...(session.finishedAtMs !== undefined ? { exit_code: session.exitCode } : {}),
    };
  }

  /** Status and the last 1,000 characters; reads nothing away, so polling twice shows the same tail. */
  #poll(session: Session): Record<string, unknown> {
    return {
      session_id: session.id,
      command: session.command,
      status: this.#status(session),
      pid: session.pid,
      uptime_seconds: this.#uptimeSeconds(session),
      output_preview: this.#tail(session, POLL_PREVIEW_CHARS),
      ...(session.finishedAtMs !== undefined ? this.#exitFields(session) : {}),
    };
  }

  #log(session: Session, offset: number | undefined, limit: number | undefined): Record<string, unknown> {
    const lines = splitLines(this.#clean(session, session.output));
    const count = limit ?? 200;
    // Python slice semantics, as upstream pages: no offset means the last `limit` lines,
    // an explicit 0 means the first; negative numbers count from the end.
    const start = offset === undefined && count > 0 ? -count : (offset ?? 0);
    const selected = offset === undefined && count > 0 ? lines.slice(start) : lines.slice(start, start + count);
    return {
      session_id: session.id,
      command: session.command,
      status: this.#status(session),
      output: truncateOutput(selected.join('\n'), this.#logOutputChars),
      total_lines: lines.length,
      showing: `${selected.length} lines`,
    };
  }

  async #wait(session: Session, timeoutMs: number | undefined, signal: AbortSignal | undefined): Promise<Record<string, unknown>> {
    const effectiveMs = Math.min(timeoutMs ?? this.#defaultWaitMs, this.#maxWaitMs);
    const clampNote =
      timeoutMs !== undefined && timeoutMs > this.#maxWaitMs
        ? `Requested wait of ${seconds(timeoutMs)}s was clamped to configured limit of ${seconds(this.#maxWaitMs)}s`
        : undefined;
    const withClampNote = (result: Record<string, unknown>) => (clampNote ? { ...result, timeout_note: clampNote } : result);

    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
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
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);

    // An exit wins over a timeout or interrupt that raced it: the result is what the model needs.
    if (session.finishedAtMs !== undefined) return withClampNote(this.#exitSnapshot(session, 'exited'));
    if (outcome === 'interrupted') {
      return withClampNote({
        status: 'interrupted',
        command: session.command,
        output: this.#tail(session, RUNNING_TAIL_CHARS),
        note: WAIT_INTERRUPTED_NOTE,
      });
    }
    const note =
      `Wait window of ${seconds(effectiveMs)}s elapsed — the process is still running. This is not an error.` +
      ` Uptime: ${this.#uptimeSeconds(session)}s.` +
      (session.notifyOnComplete
        ? ' notify_on_complete is set: you will be notified on exit — do more work instead of waiting again.'
        : ' Poll again later or use terminal(background=true, notify_on_complete=true) next time for automatic notification.');
    return {
      status: 'timeout',
      command: session.command,
      output: this.#tail(session, RUNNING_TAIL_CHARS),
      process_running: true,
      timeout_note: clampNote ? `${clampNote}. ${note}` : note,
    };
  }

  async #killAction(session: Session): Promise<Record<string, unknown>> {
    if (session.finishedAtMs !== undefined) return this.#exitSnapshot(session, 'already_exited');
    await this.#kill(session, 'process.kill');
    return {
      status: 'killed',
      session_id: session.id,
      completion_reason: session.completionReason,
      termination_source: session.terminationSource,
      output: this.#tail(session, EXIT_TAIL_CHARS),
    };
  }

  async #kill(session: Session, source: TerminationSource): Promise<void> {
    session.killSource ??= source;
    try {
      await session.handle?.kill();
    } catch (err) {
      this.#logger?.warn({ err, sessionId: session.id }, 'killing a background process failed');
    }
    // The backend reports the exit after the kill; do not hang if it never does.
    await Promise.race([session.exited, sleep(5000)]);
    if (session.finishedAtMs === undefined) this.#finish(session, KILLED_EXIT_CODE);
  }

  async #write(session: Session, data: string): Promise<Record<string, unknown>> {
    if (session.finishedAtMs !== undefined) return { status: 'already_exited', error: 'Process has already finished' };
    if (session.stdinClosed || !session.handle) {
      return { status: 'error', error: 'Process stdin not available (non-local backend or stdin closed)' };
    }
    try {
      await session.handle.write(data);
      // Characters (code points), as upstream's len(data) counts them.
      return { status: 'ok', bytes_written: [...data].length };
    } catch (err) {
      return { status: 'error', error: err instanceof Error ? err.message : String(err) };
    }
  }

  async #close(session: Session): Promise<Record<string, unknown>> {
    if (session.finishedAtMs !== undefined) return { status: 'already_exited', error: 'Process has already finished' };
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

  #append(session: Session, text: string): void {
    if (text.length === 0) return;
    session.output += text;
    if (session.output.length > this.#bufferChars) session.output = session.output.slice(-this.#bufferChars);
    this.#watch(session, text);
  }

  /** Reports the first watch pattern found in new output (a pattern split across chunks counts). */
  #watch(session: Session, text: string): void {
    if (session.watchPatterns.length === 0 || session.watchHits >= this.#maxWatchHits) return;
    const window = session.watchCarry + text;
    const carry = session.watchCarry.length;
    const longest = Math.max(...session.watchPatterns.map((p) => p.length));
    session.watchCarry = window.slice(-Math.max(0, longest - 1));
    for (const pattern of session.watchPatterns) {
      // Only matches that end in the new text; older ones were reported already.
      const at = window.indexOf(pattern, Math.max(0, carry - pattern.length + 1));
      if (at < 0) continue;
      session.watchHits += 1;
      // The line around the match comes from the buffer: the window may start mid-line.
      const source = session.output;
      const pos = source.length - (window.length - at);
      const [text, matchAt] = pos >= 0 ? [source, pos] : [window, at];
      const lineStart = text.lastIndexOf('\n', matchAt) + 1;
      const lineEnd = text.indexOf('\n', matchAt + pattern.length);
      const line = this.#clean(session, text.slice(lineStart, lineEnd < 0 ? undefined : lineEnd)).slice(0, 500);
      this.#emit({
        kind: 'watch_match',
        sessionId: session.id,
        command: session.command,
        pattern,
        line,
        hits: session.watchHits,
      });
      return;
    }
  }

  #finish(session: Session, code: number): void {
    if (session.finishedAtMs !== undefined) return;
    this.#append(session, session.decoder.end());
    if (session.killSource !== undefined) {
      session.exitCode = KILLED_EXIT_CODE;
      session.completionReason = 'killed';
      session.terminationSource = session.killSource;
    } else {
      session.exitCode = code;
    }
    session.finishedAtMs = this.#now();
    session.markExited();
    this.#emit({
      kind: 'completed',
      sessionId: session.id,
      command: session.command,
      exitCode: session.exitCode,
      notifyOnComplete: session.notifyOnComplete,
      outputTail: this.#tail(session, EXIT_TAIL_CHARS),
    });
  }

  #emit(event: ProcessEvent): void {
    if (!this.#onEvent) return;
    try {
      this.#onEvent(event);
    } catch (err) {
      this.#logger?.warn({ err, event: event.kind }, 'process event consumer threw');
    }
  }

  #prune(): void {
    const now = this.#now();
    for (const [id, s] of this.#sessions) {
      if (s.finishedAtMs !== undefined && now - s.finishedAtMs > this.#finishedTtlMs) this.#sessions.delete(id);
    }
  }

  #makeRoom(): void {
    this.#prune();
    if (this.#sessions.size < this.#maxProcesses) return;
    let oldest: Session | undefined;
    for (const s of this.#sessions.values()) {
      if (s.finishedAtMs !== undefined && (!oldest || s.finishedAtMs < (oldest.finishedAtMs ?? Infinity))) oldest = s;
    }
    if (!oldest) {
      throw new ResourceExhaustedError(
        `This task already has ${this.#maxProcesses} background processes running. ` +
          'Kill one with process_manage (action "kill") before starting another.',
      );
    }
    this.#sessions.delete(oldest.id);
  }
}
