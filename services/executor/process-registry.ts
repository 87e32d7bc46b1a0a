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
import { effectiveHeartbeatSeconds, type ProcessNotification } from '../common/process-notification.js';
import type { BackgroundHandle } from './backend.js';
import { ProcessNotifier } from './process-notifier.js';
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
import { ProcessWatch, type WatchLimits } from './process-watch.js';
import { WatchBreaker } from './watch-breaker.js';

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
  /**
   * Keep a stdin pipe open until `close` (commands that read piped input to
   * its end, such as `gh auth login --with-token`). Without it, and without
   * a PTY, stdin is at end of input from the start.
   */
  readonly pipeStdin?: boolean;
  readonly notifyOnComplete?: boolean;
  readonly watchPatterns?: readonly string[];
  /** Report output every so many seconds while it runs (at least 60; 0 or absent: never). */
  readonly heartbeatSeconds?: number;
  /** Shown by `list`; a Berth task's processes still end with the task (EndTask). */
  readonly persistOnRelease?: boolean;
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
 * Reported to {@link ProcessRegistryOptions.onEvent} for the agent, in
 * upstream's shapes (common/process-notification.ts): a completion only for
 * a process with notify-on-complete whose end the model has not already
 * taken (its own `kill`, or a `wait` that was waiting when it ended); watch
 * matches and summaries within the rate limits; heartbeats.
 */
export type ProcessEvent = ProcessNotification;

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
  /** Watch-pattern rate limits per process (upstream's defaults). */
  readonly watch?: WatchLimits;
  /**
   * The breaker over watch matches of many processes; share one between
   * the registries of a tenant. Absent: one of this registry's own.
   */
  readonly watchBreaker?: WatchBreaker;
  /** How often heartbeats are checked for being due; default 5,000 ms (upstream's tick). */
  readonly heartbeatTickMs?: number;
  /** Clock, for tests. */
  readonly now?: () => number;
  /** The part of a new id after `proc_` (default 12 random hex digits), for tests. */
  readonly idSuffix?: () => string;
  readonly onEvent?: (event: ProcessEvent) => void;
  readonly logger?: Logger;
}

const WAIT_INTERRUPTED_NOTE = 'User sent a new message -- wait interrupted';

/** Upstream's answer to write, submit or close when the process has no stdin (anymore). */
const STDIN_UNAVAILABLE = 'Process stdin not available (non-local backend or stdin closed)';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Seconds as the caller wrote them (whole seconds print without a fraction). */
function seconds(ms: number): number {
  return ms / 1000;
}

/** Background processes of one task. */
export class ProcessRegistry {
  readonly #launch: ProcessLauncher;
  readonly #maxProcesses: number;
  readonly #bufferChars: number;
  readonly #finishedTtlMs: number;
  readonly #defaultWaitMs: number;
  readonly #maxWaitMs: number;
  readonly #watchLimits: WatchLimits;
  readonly #notifier: ProcessNotifier;
  readonly #now: () => number;
  readonly #idSuffix: () => string;
  readonly #logger: Logger | undefined;
  readonly #sessions = new Map<string, Session>();
  readonly #view: SessionView;

  constructor(options: ProcessRegistryOptions) {
    this.#launch = options.launch;
    this.#maxProcesses = options.maxProcesses ?? 64;
    this.#bufferChars = options.bufferChars ?? 200_000;
    this.#finishedTtlMs = options.finishedTtlMs ?? 1_800_000;
    this.#defaultWaitMs = options.defaultWaitMs ?? 180_000;
    this.#maxWaitMs = options.maxWaitMs ?? 180_000;
    this.#watchLimits = options.watch ?? {};
    this.#now = options.now ?? Date.now;
    this.#idSuffix = options.idSuffix ?? (() => randomBytes(6).toString('hex'));
    this.#logger = options.logger;
    this.#view = {
      now: this.#now,
      ownerTaskId: options.ownerTaskId ?? '',
      logOutputChars: options.logOutputChars ?? 50_000,
    };
    this.#notifier = new ProcessNotifier({
      ownerTaskId: this.#view.ownerTaskId,
      breaker: options.watchBreaker ?? new WatchBreaker(),
      now: this.#now,
      onEvent: options.onEvent,
      logger: options.logger,
      heartbeatTickMs: options.heartbeatTickMs ?? 5000,
      processes: () => this.#sessions.values(),
      tail: (process, chars) => outputTail(process as Session, chars),
    });
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
    const pty = request.pty ?? false;
    const stdinNeverOpen = !pty && !request.pipeStdin;
    const startedAtMs = this.#now();
    const session: Session = {
      id: this.#newId(),
      command: request.command,
      cwd: request.workdir ?? request.cwd ?? null,
      pty,
      startedAtMs,
      notifyOnComplete: request.notifyOnComplete ?? false,
      watch: new ProcessWatch(request.watchPatterns ?? [], this.#watchLimits),
      persistOnRelease: request.persistOnRelease ?? false,
      heartbeatSeconds: effectiveHeartbeatSeconds(request.heartbeatSeconds ?? 0),
      heartbeatLastMs: startedAtMs,
      heartbeatTotalAtLast: 0,
      heartbeatSeq: 0,
      totalOutputChars: 0,
      waiters: 0,
      completionConsumed: false,
      pid: null,
      handle: undefined,
      finishedAtMs: undefined,
      exitCode: null,
      completionReason: 'exited',
      terminationSource: '',
      killSource: undefined,
      stdinClosed: stdinNeverOpen,
      stdinNeverOpen,
      decoder: new StringDecoder('utf8'),
      output: '',
      exited,
      markExited,
    };
    // Reserve the slot before the launch awaits, so concurrent starts respect the limit.
    this.#sessions.set(session.id, session);
    let handle: BackgroundHandle;
    try {
      handle = await this.#launch({
        command: request.command,
        ...(request.workdir !== undefined ? { workdir: request.workdir } : {}),
        ...(pty ? { pty: true } : {}),
        onOutput: (chunk) => this.#append(session, session.decoder.write(chunk)),
        onExit: (code) => this.#finish(session, code),
      });
    } catch (err) {
      this.#sessions.delete(session.id);
      throw err;
    }
    session.handle = handle;
    session.pid = handle.pid;
    if (stdinNeverOpen) {
      // Every backend gives a background process a stdin pipe; ending it at once is upstream's
      // stdin=DEVNULL: a program that reads its input to the end finishes instead of waiting forever.
      await handle.closeStdin().catch((err: unknown) => {
        this.#logger?.warn({ err, sessionId: session.id }, 'closing the stdin of a new background process failed');
      });
    }
    if (session.heartbeatSeconds > 0) this.#notifier.armHeartbeats();
    return { sessionId: session.id, pid: handle.pid };
  }

  /** True while a running process watches its output for patterns (the tenant's breaker speaks to these). */
  isWatching(): boolean {
    return [...this.#sessions.values()].some((s) => s.finishedAtMs === undefined && s.watch.active);
  }

  /** Runs a `process` tool action; returns the result JSON. `signal` interrupts `wait`. */
  async handle(request: ProcessActionRequest, signal?: AbortSignal): Promise<string> {
    const result = await this.#dispatch(request, signal);
    return JSON.stringify(result);
  }

  /** Kills every running process (task release, shutdown). */
  async closeAll(): Promise<void> {
    this.#notifier.stop();
    await Promise.all(
      [...this.#sessions.values()].filter((s) => s.finishedAtMs === undefined).map((s) => this.#kill(s, 'kill_all')),
    );
  }

  /**
   * For a suspension that may end every running process: from now on they
   * end as killed with the whole task's processes (`kill_all`). `kept()`
   * undoes that when the suspension kept them; `ended()` records those whose
   * end the environment can no longer report as ended now, and says how many
   * were running.
   */
  expectAllToEnd(): { kept(): void; ended(): number } {
    const running = [...this.#sessions.values()].filter((s) => s.finishedAtMs === undefined && s.killSource === undefined);
    for (const s of running) s.killSource = 'kill_all';
    return {
      kept: () => {
        for (const s of running) if (s.finishedAtMs === undefined) s.killSource = undefined;
      },
      ended: () => {
        for (const s of running) this.#finish(s, KILLED_EXIT_CODE);
        return running.length;
      },
    };
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
    if (action === 'list') return { processes: [...this.#sessions.values()].map((s) => listEntry(this.#view, s)) };
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
        return pollResult(this.#view, session);
      case 'log':
        return logResult(this.#view, session, request.offset, request.limit);
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

  async #wait(session: Session, timeoutMs: number | undefined, signal: AbortSignal | undefined): Promise<Record<string, unknown>> {
    const effectiveMs = Math.min(timeoutMs ?? this.#defaultWaitMs, this.#maxWaitMs);
    const clampNote =
      timeoutMs !== undefined && timeoutMs > this.#maxWaitMs
        ? `Requested wait of ${seconds(timeoutMs)}s was clamped to configured limit of ${seconds(this.#maxWaitMs)}s`
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
      ` Uptime: ${uptimeSeconds(this.#view, session)}s.` +
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

  async #killAction(session: Session): Promise<Record<string, unknown>> {
    if (session.finishedAtMs !== undefined) return exitSnapshot(session, 'already_exited');
    // The model asked for this end and gets its output here: no completion notice besides.
    session.completionConsumed = true;
    await this.#kill(session, 'process.kill');
    return {
      status: 'killed',
      session_id: session.id,
      completion_reason: session.completionReason,
      termination_source: session.terminationSource,
      ...completionOutput(session),
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
    if (session.stdinClosed || !session.handle) return { status: 'error', error: STDIN_UNAVAILABLE };
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

  #append(session: Session, text: string): void {
    if (text.length === 0) return;
    session.output += text;
    session.totalOutputChars += text.length;
    if (session.output.length > this.#bufferChars) session.output = session.output.slice(-this.#bufferChars);
    this.#notifier.output(session, text);
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
    // A wait in progress hands the model this end itself (upstream marks the completion consumed).
    if (session.waiters > 0) session.completionConsumed = true;
    session.markExited();
    this.#notifier.finished(session, completionOutput(session));
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
