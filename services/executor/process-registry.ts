/**
 * Background processes of one task and the `process` tool's actions over
 * them (spec §3). Each process keeps a rolling output buffer; finished ones
 * stay listed for a while so their output can still be read.
 *
 * Every action returns the tool's result as a JSON string. Shapes (keys in
 * this order; `exit_code` is null while running):
 *
 * - list: `{"processes":[{"session_id","command","cwd","pid","status","started_at","uptime_seconds","exit_code","output_preview"}]}`
 *   (`command` cut to 200 chars, `output_preview` the last 200 chars, `status` "running" | "exited").
 * - poll: `{"session_id","command","status","pid","uptime_seconds","exit_code","output"}` where `output` is
 *   what arrived since the last poll or wait (head/tail-truncated to 20,000 chars), plus
 *   `"missed_chars"` when output rolled out of the buffer before it was read.
 * - log: `{"session_id","status","exit_code","output","total_lines","offset","showing"}`: `limit` lines
 *   (default 200) from line `offset` (0-based; negative counts from the end; absent = the last `limit` lines),
 *   plus `"dropped_chars"` when the start of the output rolled out of the buffer.
 * - wait: `{"session_id","status":"exited","exit_code","output"}`, or `"status":"timeout"` /
 *   `"status":"interrupted"` with `"timeout_note"` / `"note"`; the wait is capped (default 180 s,
 *   at most 600 s) and a clamped request adds `"timeout_note"`.
 * - kill: `{"session_id","status":"killed","exit_code":-15}` or `{"session_id","status":"already_exited","exit_code"}`.
 * - write / submit: `{"session_id","status":"ok","bytes_written"}`; close: `{"session_id","status":"ok","stdin":"closed"}`.
 * - on an exited process, write/submit/close give `{"session_id","status":"already_exited","exit_code","error"}`;
 *   on a write failure `{"session_id","status":"error","error"}`.
 * - unknown id: `{"status":"not_found","error":"No process with ID X. ..."}`; missing id:
 *   `{"error":"session_id is required for ACTION"}`; unknown action:
 *   `{"error":"Unknown process action: A. Use: list, poll, log, wait, kill, write, submit, close"}`.
 */
import { randomBytes } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import { ResourceExhaustedError } from '../common/errors.js';
import type { Logger } from '../common/logging.js';
import type { BackgroundHandle } from './backend.js';
import { stripAnsi, truncateOutput } from './output.js';

/** The actions the `process` tool accepts, in the order the error message lists them. */
export const PROCESS_ACTIONS = ['list', 'poll', 'log', 'wait', 'kill', 'write', 'submit', 'close'] as const;
export type ProcessAction = (typeof PROCESS_ACTIONS)[number];

/** Exit code reported for a process stopped with the `kill` action (SIGTERM). */
export const KILLED_EXIT_CODE = -15;

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
  /** Processes per task, running and finished; default 64. */
  readonly maxProcesses?: number;
  /** Rolling buffer per process; default 200,000 characters. */
  readonly bufferChars?: number;
  /** How long finished processes stay listed; default 1,800,000 ms (30 min). */
  readonly finishedTtlMs?: number;
  /** `wait` without a timeout; default 180,000 ms. */
  readonly defaultWaitMs?: number;
  /** Longest `wait`; longer requests are clamped; default 600,000 ms. */
  readonly maxWaitMs?: number;
  /** Cap on `output` of poll and wait; default 20,000 characters. */
  readonly readOutputChars?: number;
  /** Cap on `output` of log; default 50,000 characters. */
  readonly logOutputChars?: number;
  /** Watch-pattern matches reported per process before watching stops; default 8. */
  readonly maxWatchHits?: number;
  /** Clock, for tests. */
  readonly now?: () => number;
  readonly onEvent?: (event: ProcessEvent) => void;
  readonly logger?: Logger;
}

const ACTIONS_NEEDING_SESSION = new Set<string>(PROCESS_ACTIONS.filter((a) => a !== 'list'));

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
  killRequested: boolean;
  stdinClosed: boolean;
  readonly decoder: StringDecoder;
  /** The last `bufferChars` characters of output. */
  output: string;
  /** Characters ever appended; `totalChars - output.length` have rolled out. */
  totalChars: number;
  /** Absolute character position up to which poll/wait have returned output. */
  readCursor: number;
  watchCarry: string;
  watchHits: number;
  readonly exited: Promise<void>;
  markExited: () => void;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Background processes of one task. */
export class ProcessRegistry {
  readonly #launch: ProcessLauncher;
  readonly #maxProcesses: number;
  readonly #bufferChars: number;
  readonly #finishedTtlMs: number;
  readonly #defaultWaitMs: number;
  readonly #maxWaitMs: number;
  readonly #readOutputChars: number;
  readonly #logOutputChars: number;
  readonly #maxWatchHits: number;
  readonly #now: () => number;
  readonly #onEvent: ((event: ProcessEvent) => void) | undefined;
  readonly #logger: Logger | undefined;
  readonly #sessions = new Map<string, Session>();

  constructor(options: ProcessRegistryOptions) {
    this.#launch = options.launch;
    this.#maxProcesses = options.maxProcesses ?? 64;
    this.#bufferChars = options.bufferChars ?? 200_000;
    this.#finishedTtlMs = options.finishedTtlMs ?? 1_800_000;
    this.#defaultWaitMs = options.defaultWaitMs ?? 180_000;
    this.#maxWaitMs = options.maxWaitMs ?? 600_000;
    this.#readOutputChars = options.readOutputChars ?? 20_000;
    this.#logOutputChars = options.logOutputChars ?? 50_000;
    this.#maxWatchHits = options.maxWatchHits ?? 8;
    this.#now = options.now ?? Date.now;
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
      id: `proc_${randomBytes(6).toString('hex')}`,
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
      killRequested: false,
      stdinClosed: false,
      decoder: new StringDecoder('utf8'),
      output: '',
      totalChars: 0,
      readCursor: 0,
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
      [...this.#sessions.values()].filter((s) => s.finishedAtMs === undefined).map((s) => this.#kill(s)),
    );
  }

  async #dispatch(request: ProcessActionRequest, signal: AbortSignal | undefined): Promise<Record<string, unknown>> {
    const action = request.action;
    if (!(PROCESS_ACTIONS as readonly string[]).includes(action)) {
      return { error: `Unknown process action: ${action}. Use: ${PROCESS_ACTIONS.join(', ')}` };
    }
    this.#prune();
    if (action === 'list') return { processes: [...this.#sessions.values()].map((s) => this.#listEntry(s)) };
    const id = request.sessionId;
    if (ACTIONS_NEEDING_SESSION.has(action) && !id) return { error: `session_id is required for ${action}` };
    const session = id ? this.#sessions.get(id) : undefined;
    if (!session) {
      return {
        status: 'not_found',
        error: `No process with ID ${id ?? ''}. Use the list action to see this task's processes (finished ones are kept for ${Math.round(this.#finishedTtlMs / 60_000)} minutes).`,
      };
    }
    switch (action as Exclude<ProcessAction, 'list'>) {
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

  #status(session: Session): 'running' | 'exited' {
    return session.finishedAtMs === undefined ? 'running' : 'exited';
  }

  #uptimeSeconds(session: Session): number {
    return Math.max(0, Math.floor(((session.finishedAtMs ?? this.#now()) - session.startedAtMs) / 1000));
  }

  /** Output as the model should see it: ANSI stripped, PTY line endings normalised. */
  #clean(session: Session, text: string): string {
    const stripped = stripAnsi(text);
    return session.pty ? stripped.replaceAll('\r\n', '\n') : stripped;
  }

  #listEntry(session: Session): Record<string, unknown> {
    return {
      session_id: session.id,
      command: session.command.length > 200 ? `${session.command.slice(0, 200)}...` : session.command,
      cwd: session.cwd,
      pid: session.pid,
      status: this.#status(session),
      started_at: new Date(session.startedAtMs).toISOString(),
      uptime_seconds: this.#uptimeSeconds(session),
      exit_code: session.exitCode,
      output_preview: this.#clean(session, session.output.slice(-200)),
    };
  }

  /** Output since the last poll/wait; advances the read cursor. */
  #takeNewOutput(session: Session): { output: string; missedChars: number } {
    const dropped = session.totalChars - session.output.length;
    const from = Math.max(session.readCursor, dropped);
    const missedChars = from - session.readCursor;
    const text = session.output.slice(from - dropped);
    session.readCursor = session.totalChars;
    return { output: truncateOutput(this.#clean(session, text), this.#readOutputChars), missedChars };
  }

  #poll(session: Session): Record<string, unknown> {
    const { output, missedChars } = this.#takeNewOutput(session);
    return {
      session_id: session.id,
      command: session.command,
      status: this.#status(session),
      pid: session.pid,
      uptime_seconds: this.#uptimeSeconds(session),
      exit_code: session.exitCode,
      output,
      ...(missedChars > 0 ? { missed_chars: missedChars } : {}),
    };
  }

  #log(session: Session, offset: number | undefined, limit: number | undefined): Record<string, unknown> {
    const lines = this.#clean(session, session.output).split('\n');
    // A trailing newline ends the last line; it does not start an empty one.
    if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
    const total = lines.length;
    const count = Math.max(1, Math.floor(limit ?? 200));
    let start: number;
    if (offset === undefined) start = Math.max(0, total - count);
    else if (offset < 0) start = Math.max(0, total + Math.floor(offset));
    else start = Math.min(total, Math.floor(offset));
    const selected = lines.slice(start, start + count);
    const dropped = session.totalChars - session.output.length;
    return {
      session_id: session.id,
      status: this.#status(session),
      exit_code: session.exitCode,
      output: truncateOutput(selected.join('\n'), this.#logOutputChars),
      total_lines: total,
      offset: start,
      showing: `${selected.length} lines`,
      ...(dropped > 0 ? { dropped_chars: dropped } : {}),
    };
  }

  async #wait(session: Session, timeoutMs: number | undefined, signal: AbortSignal | undefined): Promise<Record<string, unknown>> {
    const requested = timeoutMs !== undefined && timeoutMs > 0 ? timeoutMs : undefined;
    const effective = Math.min(requested ?? this.#defaultWaitMs, this.#maxWaitMs);
    const clampNote =
      requested !== undefined && requested > this.#maxWaitMs
        ? `Requested wait of ${Math.round(requested / 1000)}s was clamped to the maximum of ${Math.round(this.#maxWaitMs / 1000)}s`
        : undefined;

    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const outcome = await Promise.race<'exited' | 'timeout' | 'interrupted'>([
      session.exited.then(() => 'exited' as const),
      new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), effective);
      }),
      new Promise<'interrupted'>((resolve) => {
        if (signal?.aborted) resolve('interrupted');
        onAbort = () => resolve('interrupted');
        signal?.addEventListener('abort', onAbort, { once: true });
      }),
    ]);
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);

    const { output } = this.#takeNewOutput(session);
    if (outcome === 'exited') {
      return {
        session_id: session.id,
        status: 'exited',
        exit_code: session.exitCode,
        output,
        ...(clampNote ? { timeout_note: clampNote } : {}),
      };
    }
    if (outcome === 'interrupted') {
      return {
        session_id: session.id,
        status: 'interrupted',
        output,
        note: 'Wait interrupted; the process is still running',
        ...(clampNote ? { timeout_note: clampNote } : {}),
      };
    }
    return {
      session_id: session.id,
      status: 'timeout',
      output,
      timeout_note: clampNote ?? `Waited ${Math.round(effective / 1000)}s, process still running`,
    };
  }

  async #killAction(session: Session): Promise<Record<string, unknown>> {
    if (session.finishedAtMs !== undefined) {
      return { session_id: session.id, status: 'already_exited', exit_code: session.exitCode };
    }
    await this.#kill(session);
    return { session_id: session.id, status: 'killed', exit_code: session.exitCode };
  }

  async #kill(session: Session): Promise<void> {
    session.killRequested = true;
    try {
      await session.handle?.kill();
    } catch (err) {
      this.#logger?.warn({ err, sessionId: session.id }, 'killing a background process failed');
    }
    // The backend reports the exit after the kill; do not hang if it never does.
    await Promise.race([session.exited, sleep(5000)]);
    if (session.finishedAtMs === undefined) this.#finish(session, KILLED_EXIT_CODE);
  }

  #alreadyExited(session: Session, what: string): Record<string, unknown> {
    return {
      session_id: session.id,
      status: 'already_exited',
      exit_code: session.exitCode,
      error: `Process has already finished; cannot ${what}`,
    };
  }

  async #write(session: Session, data: string): Promise<Record<string, unknown>> {
    if (session.finishedAtMs !== undefined) return this.#alreadyExited(session, 'write to its stdin');
    if (session.stdinClosed || !session.handle) {
      return { session_id: session.id, status: 'error', error: `stdin of ${session.id} is closed` };
    }
    try {
      await session.handle.write(data);
      return { session_id: session.id, status: 'ok', bytes_written: Buffer.byteLength(data) };
    } catch (err) {
      return { session_id: session.id, status: 'error', error: err instanceof Error ? err.message : String(err) };
    }
  }

  async #close(session: Session): Promise<Record<string, unknown>> {
    if (session.finishedAtMs !== undefined) return this.#alreadyExited(session, 'close its stdin');
    if (!session.stdinClosed) {
      session.stdinClosed = true;
      await session.handle?.closeStdin();
    }
    return { session_id: session.id, status: 'ok', stdin: 'closed' };
  }

  #append(session: Session, text: string): void {
    if (text.length === 0) return;
    session.output += text;
    session.totalChars += text.length;
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
    session.exitCode = session.killRequested ? KILLED_EXIT_CODE : code;
    session.finishedAtMs = this.#now();
    session.markExited();
    this.#emit({
      kind: 'completed',
      sessionId: session.id,
      command: session.command,
      exitCode: session.exitCode,
      notifyOnComplete: session.notifyOnComplete,
      outputTail: this.#clean(session, session.output.slice(-2000)),
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
          'Kill one with the process tool (action "kill") before starting another.',
      );
    }
    this.#sessions.delete(oldest.id);
  }
}
