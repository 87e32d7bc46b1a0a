/**
 * The bidi Session stream as a client sees it: several tool calls in flight
 * on one stream, each one an async iterator of its live output, approval
 * requests to answer and, last, its result.
 */
import type { Metadata } from 'nice-grpc';
import { Status } from '../common/nice-grpc-common-cjs.js';
import { AsyncQueue } from '../common/async-queue.js';
import type { CallToolRequest, DispatcherClient, SessionClientMessage } from '../gen/berth/v1/dispatcher.js';
import { BerthError, statusFromName, toBerthError } from './errors.js';
import { toBackgroundEvent, type BackgroundEvent } from './task-events.js';

/** An approval choice the server offers: `once`, `session`, `always` or `deny`. */
export type ApprovalChoice = 'once' | 'session' | 'always' | 'deny';

/** A command of this call that needs a person's approval before it runs. */
export interface ApprovalPrompt {
  readonly approvalId: string;
  readonly command: string;
  /** The danger found, e.g. `recursive delete`. */
  readonly description: string;
  readonly patternKey: string;
  readonly choices: readonly ApprovalChoice[];
  /** The server denies when no answer comes within this many seconds. */
  readonly timeoutSeconds: number;
}

/** Live output of the call: raw text as produced (may hold ANSI escapes); the result is authoritative. */
export interface OutputEvent {
  readonly type: 'output';
  readonly callId: string;
  readonly text: string;
}

/** The server asks about a command; answer with {@link ApprovalEvent.answer}, or not at all (its timeout denies). */
export interface ApprovalEvent {
  readonly type: 'approval';
  readonly callId: string;
  readonly request: ApprovalPrompt;
  /** Sends the answer; ignored once the call has finished. */
  answer(choice: ApprovalChoice): void;
}

/** The call's result: the last event of a run. */
export interface ResultEvent {
  readonly type: 'result';
  readonly callId: string;
  /** The result string, as the model sees it. */
  readonly resultJson: string;
  /** `resultJson` parsed, or the string itself when it is not JSON. */
  readonly result: unknown;
}

/** What a run yields, in order: output and approval events, then one result. */
export type SessionEvent = OutputEvent | ApprovalEvent | ResultEvent;

/** One tool call on a Session stream; iterate it to follow the call. */
export interface SessionRun extends AsyncIterable<SessionEvent> {
  readonly callId: string;
  /** Resolves with the result event, draining events nobody iterated. */
  result(): Promise<ResultEvent>;
}

type RunItem = SessionEvent | { readonly type: 'failure'; readonly error: unknown };

/** Parses a result string; keeps the text when it is not JSON. */
export function parseResult(resultJson: string): unknown {
  try {
    return JSON.parse(resultJson) as unknown;
  } catch {
    // Servers before the hint moved into the JSON (as upstream's #90322 did) put a note after
    // a truncated search_files object ("\n\n[Hint: Results truncated. ...]"): the object is the result.
    const hint = resultJson.lastIndexOf(TRAILING_HINT);
    if (hint > 0) {
      try {
        return JSON.parse(resultJson.slice(0, hint)) as unknown;
      } catch {
        // not a JSON object followed by a hint: the text is the result
      }
    }
    return resultJson;
  }
}

const TRAILING_HINT = '\n\n[Hint: ';

/**
 * One Session stream, calls addressed by full request (task and session id
 * per call). {@link BerthSession} fixes them for one task; the CLI uses this
 * directly to switch tasks on one stream.
 */
export class SessionStream {
  readonly #requests = new AsyncQueue<SessionClientMessage>();
  readonly #runs = new Map<string, AsyncQueue<RunItem>>();
  readonly #events = new AsyncQueue<BackgroundEvent>();
  #eventsTaken = false;
  /** Subscriptions asked for and not yet in place, by task id. */
  readonly #pendingSubscriptions = new Map<string, Array<{ resolve: (v: { lastId: string }) => void; reject: (e: unknown) => void }>>();
  readonly #abort = new AbortController();
  readonly #done: Promise<void>;
  #failure: unknown;
  #closed = false;
  #nextId = 1;

  constructor(rpc: Pick<DispatcherClient, 'session'>, options: { readonly metadata?: Metadata; readonly signal?: AbortSignal } = {}) {
    // Forwarded by hand: on Node 20 a signal from AbortSignal.any() can be collected while the call still needs it.
    const outer = options.signal;
    const forward = () => this.#abort.abort(outer?.reason);
    if (outer?.aborted) forward();
    else outer?.addEventListener('abort', forward, { once: true });
    const responses = rpc.session(this.#requests, {
      ...(options.metadata === undefined ? {} : { metadata: options.metadata }),
      signal: this.#abort.signal,
    });
    this.#done = (async () => {
      try {
        for await (const m of responses) {
          const msg = m.message;
          if (msg === undefined) continue;
          if (msg.$case === 'event') {
            this.#events.push(toBackgroundEvent(msg.value));
            continue;
          }
          if (msg.$case === 'eventsReady') {
            this.#eventsReady(msg.value);
            continue;
          }
          const run = this.#runs.get(msg.value.callId);
          if (run === undefined) continue;
          if (msg.$case === 'output') run.push({ type: 'output', callId: msg.value.callId, text: msg.value.text });
          else if (msg.$case === 'approvalRequest') run.push(this.#approvalEvent(msg.value));
          else if (msg.$case === 'result') {
            this.#runs.delete(msg.value.callId);
            const { callId, resultJson, errorStatus } = msg.value;
            if (errorStatus === '') run.push({ type: 'result', callId, resultJson, result: parseResult(resultJson) });
            else {
              const details = parseResult(resultJson) as { error?: unknown } | string;
              const text = typeof details === 'object' && details !== null && typeof details.error === 'string' ? details.error : resultJson;
              run.push({ type: 'failure', error: new BerthError(statusFromName(errorStatus), text) });
            }
            run.close();
          }
        }
        this.#failAll(new BerthError(Status.UNAVAILABLE, 'the server ended the session before answering'));
      } catch (err) {
        this.#failAll(toBerthError(err));
      } finally {
        outer?.removeEventListener('abort', forward);
        this.#events.close();
        for (const waiters of this.#pendingSubscriptions.values()) {
          for (const w of waiters) w.reject(new BerthError(Status.UNAVAILABLE, 'the session ended before the subscription was made'));
        }
        this.#pendingSubscriptions.clear();
      }
    })();
  }

  #eventsReady(value: { taskId: string; lastId: string; error: string }): void {
    const waiters = this.#pendingSubscriptions.get(value.taskId) ?? [];
    this.#pendingSubscriptions.delete(value.taskId);
    if (value.error !== '') {
      const error = new BerthError(Status.FAILED_PRECONDITION, value.error);
      for (const w of waiters) w.reject(error);
      this.#events.push({ taskId: value.taskId, id: '', type: 'events_error', event: { error: value.error }, text: value.error });
      return;
    }
    for (const w of waiters) w.resolve({ lastId: value.lastId });
  }

  /**
   * Background-process events of the tasks this session follows, in order,
   * until the session ends: it follows every task it calls (from its first
   * call there), and those given to {@link SessionStream.subscribeEvents}.
   * Iterate it once; events queue until then.
   */
  events(): AsyncIterable<BackgroundEvent> {
    if (this.#eventsTaken) throw new Error("a session's events can be iterated once");
    this.#eventsTaken = true;
    return this.#events;
  }

  /**
   * Follows a task's events from after `after` (the last id seen before a
   * reconnection; '' for every event the server keeps). Resolves once the
   * server has the subscription.
   */
  subscribeEvents(taskId: string, after = ''): Promise<{ lastId: string }> {
    const id = taskId === '' ? 'default' : taskId;
    const promise = new Promise<{ lastId: string }>((resolve, reject) => {
      const waiters = this.#pendingSubscriptions.get(id) ?? [];
      waiters.push({ resolve, reject });
      this.#pendingSubscriptions.set(id, waiters);
    });
    this.#requests.push({ message: { $case: 'subscribeEvents', value: { taskId, after } } });
    return promise;
  }

  #approvalEvent(value: {
    approvalId: string;
    callId: string;
    command: string;
    description: string;
    patternKey: string;
    choices: string[];
    timeoutSeconds: number;
  }): ApprovalEvent {
    const choices = (value.choices.length > 0 ? value.choices : ['once', 'session', 'always', 'deny']) as ApprovalChoice[];
    return {
      type: 'approval',
      callId: value.callId,
      request: {
        approvalId: value.approvalId,
        command: value.command,
        description: value.description,
        patternKey: value.patternKey,
        choices,
        timeoutSeconds: value.timeoutSeconds,
      },
      answer: (choice) => {
        if (!this.#runs.has(value.callId)) return;
        this.#requests.push({ message: { $case: 'approvalAnswer', value: { approvalId: value.approvalId, choice } } });
      },
    };
  }

  #failAll(err: unknown): void {
    this.#failure ??= err;
    for (const [id, run] of this.#runs) {
      this.#runs.delete(id);
      run.push({ type: 'failure', error: err });
      run.close();
    }
  }

  /** Starts one call. Its events queue until iterated, so a slow consumer loses nothing. */
  start(request: CallToolRequest): SessionRun {
    const callId = `c${this.#nextId++}`;
    const queue = new AsyncQueue<RunItem>();
    const failure = this.#closed
      ? new BerthError(Status.FAILED_PRECONDITION, 'this session is closed; open a new one with task.session()')
      : this.#failure;
    if (failure !== undefined) {
      queue.push({ type: 'failure', error: failure });
      queue.close();
    } else {
      this.#runs.set(callId, queue);
      this.#requests.push({ message: { $case: 'call', value: { callId, request } } });
    }
    let taken = false;
    const iterate = async function* (): AsyncGenerator<SessionEvent> {
      if (taken) throw new Error('a session run can be iterated once');
      taken = true;
      for await (const item of queue) {
        if (item.type === 'failure') throw item.error;
        yield item;
      }
    };
    return {
      callId,
      [Symbol.asyncIterator]: iterate,
      async result() {
        for await (const event of iterate()) if (event.type === 'result') return event;
        throw new BerthError(Status.UNAVAILABLE, 'the session ended before the result arrived');
      },
    };
  }

  /** Puts a session id in or out of yolo mode (needs `approvals.allow_yolo`). */
  setYolo(sessionId: string, yolo: boolean): void {
    this.#requests.push({ message: { $case: 'settings', value: { sessionId, yolo } } });
  }

  /** Stops the task's running foreground work; its calls end with their interrupted results. */
  interrupt(taskId: string): void {
    this.#requests.push({ message: { $case: 'interrupt', value: { taskId } } });
  }

  /** Stops sending and waits for calls in flight to finish and the stream to end. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#requests.close();
    await this.#done;
  }

  /** Cancels the stream at once: the server aborts every call still running on it. */
  async abort(): Promise<void> {
    this.#closed = true;
    this.#abort.abort();
    this.#requests.close();
    await this.#done;
  }
}

/**
 * A Session stream bound to one task (from {@link BerthTask.session}). Runs
 * may overlap; close it when done, or use `await using`.
 */
export class BerthSession implements AsyncDisposable {
  readonly #stream: SessionStream;
  readonly #taskId: string;
  readonly #sessionId: string;

  /** @internal Created by {@link BerthTask.session}. */
  constructor(stream: SessionStream, taskId: string, sessionId: string) {
    this.#stream = stream;
    this.#taskId = taskId;
    this.#sessionId = sessionId;
  }

  /**
   * Starts a tool call and returns its events:
   *
   * ```ts
   * for await (const ev of session.run('terminal', { command: 'make' })) {
   *   if (ev.type === 'output') process.stdout.write(ev.text);
   *   else if (ev.type === 'approval') ev.answer('once');
   *   else console.log(ev.result);
   * }
   * ```
   *
   * The iterator throws {@link BerthError} when the call fails as a call.
   * `signal` interrupts the task's foreground work (the Interrupt message on
   * this stream), so the run still ends with the interrupted result.
   */
  run(tool: string, args: Record<string, unknown> = {}, options: { readonly signal?: AbortSignal; readonly sessionId?: string } = {}): SessionRun {
    const run = this.#stream.start({
      name: tool,
      argumentsJson: JSON.stringify(args),
      taskId: this.#taskId,
      sessionId: options.sessionId ?? this.#sessionId,
    });
    const signal = options.signal;
    if (signal === undefined) return run;
    const onAbort = () => this.#stream.interrupt(this.#taskId);
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    const inner = run[Symbol.asyncIterator].bind(run);
    const detach = () => signal.removeEventListener('abort', onAbort);
    return {
      callId: run.callId,
      [Symbol.asyncIterator]: async function* () {
        try {
          yield* { [Symbol.asyncIterator]: inner };
        } finally {
          detach();
        }
      },
      result: async () => {
        try {
          return await run.result();
        } finally {
          detach();
        }
      },
    };
  }

  /**
   * The task's background-process events on this stream (the session
   * follows its task from its first call; {@link BerthSession.subscribeEvents}
   * to follow it from before, or to resume after a reconnection).
   */
  events(): AsyncIterable<BackgroundEvent> {
    return this.#stream.events();
  }

  /** Follows the task's events after `after` ('' for every event kept); resolves once in place. */
  subscribeEvents(after = ''): Promise<{ lastId: string }> {
    return this.#stream.subscribeEvents(this.#taskId, after);
  }

  /** Runs this session's commands without approval prompts, or stops doing so; hardline blocks still apply. */
  setYolo(yolo: boolean): void {
    this.#stream.setYolo(this.#sessionId, yolo);
  }

  /** Stops the task's running foreground work. */
  interrupt(): void {
    this.#stream.interrupt(this.#taskId);
  }

  /** Waits for runs in flight, then ends the stream. Approval requests left unanswered are denied. */
  close(): Promise<void> {
    return this.#stream.close();
  }

  /** Ends the stream at once; the server aborts the runs still going (their commands are stopped). */
  abort(): Promise<void> {
    return this.#stream.abort();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
