/**
 * Background processes of one task: started, their output kept in a rolling
 * buffer, ended, killed; finished ones stay listed for a while so their
 * output can still be read. The `process` tool's actions over them, and the
 * shapes of their results (spec §3), are in process-tool-actions.ts.
 */
import { randomBytes } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import { ResourceExhaustedError } from '../common/errors.js';
import type { Logger } from '../common/logging.js';
import { effectiveHeartbeatSeconds, type ProcessNotification } from '../common/process-notification.js';
import type { TaskProcessRequest } from '../common/task-client.js';
import type { BackgroundHandle } from './backend.js';
import { ProcessNotifier } from './process-notifier.js';
import { completionOutput, outputTail, type Session, type SessionView, type TerminationSource } from './process-session.js';
import { runProcessAction, type ProcessActionHost } from './process-tool-actions.js';
import { ProcessWatch, type WatchLimits } from './process-watch.js';
import { WatchBreaker } from './watch-breaker.js';

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

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Background processes of one task. */
export class ProcessRegistry {
  readonly #launch: ProcessLauncher;
  readonly #maxProcesses: number;
  readonly #bufferChars: number;
  readonly #finishedTtlMs: number;
  readonly #watchLimits: WatchLimits;
  readonly #notifier: ProcessNotifier;
  readonly #now: () => number;
  readonly #idSuffix: () => string;
  readonly #logger: Logger | undefined;
  readonly #sessions = new Map<string, Session>();
  readonly #view: SessionView;
  readonly #actions: ProcessActionHost;

  constructor(options: ProcessRegistryOptions) {
    this.#launch = options.launch;
    this.#maxProcesses = options.maxProcesses ?? 64;
    this.#bufferChars = options.bufferChars ?? 200_000;
    this.#finishedTtlMs = options.finishedTtlMs ?? 1_800_000;
    this.#watchLimits = options.watch ?? {};
    this.#now = options.now ?? Date.now;
    this.#idSuffix = options.idSuffix ?? (() => randomBytes(6).toString('hex'));
    this.#logger = options.logger;
    this.#view = {
      now: this.#now,
      ownerTaskId: options.ownerTaskId ?? '',
      logOutputChars: options.logOutputChars ?? 50_000,
    };
    this.#actions = {
      view: this.#view,
      sessions: this.#sessions,
      defaultWaitMs: options.defaultWaitMs ?? 180_000,
      maxWaitMs: options.maxWaitMs ?? 180_000,
      prune: () => this.#prune(),
      kill: (session, source) => this.#kill(session, source),
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
  async handle(request: TaskProcessRequest, signal?: AbortSignal): Promise<string> {
    const result = await runProcessAction(this.#actions, request, signal);
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
