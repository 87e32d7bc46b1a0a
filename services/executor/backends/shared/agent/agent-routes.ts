/**
 * Where the frames an exec agent sends go, by id: the request waiting for
 * its answer, the process whose start, output and exit they report, or the
 * relayed socket whose connections they carry. When the stream drops or the
 * channel is lost, the table says who is told and who is kept.
 */
import type { Logger } from '../../../../common/logging.js';
import { deliverOutput } from '../guards.js';
import type { RelayRoute } from './agent-link.js';
import { replyError } from './agent-op-error.js';
import type { Frame } from './agent-protocol.js';

interface Pending {
  readonly resolve: (frame: Frame) => void;
  readonly reject: (err: Error) => void;
}

/** A request waiting for its answer, with the timer that gives up on it. */
export interface PendingRequest extends Pending {
  readonly timer: NodeJS.Timeout;
}

interface ProcEntry {
  readonly onOutput: (chunk: Buffer) => void;
  readonly started: Pending;
  readonly exit: Pending;
  isStarted: boolean;
  /** Outlives a dropped stream (the agent keeps it running); a foreground process does not. */
  readonly background: boolean;
}

/** Frames the agent sends about a relayed socket's connections. */
const RELAY_EVENTS = new Set(['conn', 'cdata', 'cack', 'cend', 'cclosed']);

/** A deferred promise: the promise and how it settles. */
function deferred(): { promise: Promise<Frame> } & Pending {
  let resolve!: (frame: Frame) => void;
  let reject!: (err: Error) => void;
  const promise = new Promise<Frame>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // Nobody may be waiting on it yet when the connection drops (even while its spawn is being sent).
  promise.catch(() => undefined);
  return { promise, resolve, reject };
}

export class AgentRoutes {
  readonly #logger: Logger | undefined;
  readonly #pending = new Map<number, PendingRequest>();
  readonly #procs = new Map<number, ProcEntry>();
  readonly #relays = new Map<number, RelayRoute>();

  constructor(logger: Logger | undefined) {
    this.#logger = logger;
  }

  /** Requests and processes open. */
  get open(): number {
    return this.#pending.size + this.#procs.size;
  }

  /** Processes the agent still runs for the channel. */
  get processes(): number {
    return this.#procs.size;
  }

  /** Something waits for the agent: a request's answer or a process's start. */
  get waiting(): boolean {
    return this.#pending.size > 0 || [...this.#procs.values()].some((p) => !p.isStarted);
  }

  /** Ids of the processes the agent still runs for the channel. */
  processIds(): Set<number> {
    return new Set(this.#procs.keys());
  }

  addRequest(id: number, request: PendingRequest): void {
    this.#pending.set(id, request);
  }

  /** Forgets request `id` (it could not be sent) and stops its timer. */
  removeRequest(id: number): void {
    const request = this.#pending.get(id);
    if (request) clearTimeout(request.timer);
    this.#pending.delete(id);
  }

  /** Routes the frames of process `id`; the promises settle on its `started` and its `exit`. */
  addProcess(id: number, onOutput: (chunk: Buffer) => void, background: boolean): { started: Promise<Frame>; exit: Promise<Frame> } {
    const started = deferred();
    const exit = deferred();
    this.#procs.set(id, { onOutput, started, exit, isStarted: false, background });
    return { started: started.promise, exit: exit.promise };
  }

  /** Forgets process `id` (its spawn could not be sent). */
  removeProcess(id: number): void {
    this.#procs.delete(id);
  }

  /** Process `id` ended with the stream that carried it: its exit rejects with `err`. */
  endProcess(id: number, err: Error): void {
    this.#procs.get(id)?.exit.reject(err);
    this.#procs.delete(id);
  }

  /** Hands the relay frames of listener `id` to `relay` (undefined: to nobody any more). */
  route(id: number, relay: RelayRoute | undefined): void {
    if (relay) this.#relays.set(id, relay);
    else this.#relays.delete(id);
  }

  dispatch(frame: Frame): void {
    const { header } = frame;
    if (RELAY_EVENTS.has(header.op)) {
      const relay = this.#relays.get(header.id);
      if (relay) relay.dispatch(header, frame.body);
      else this.#logger?.debug({ op: header.op, id: header.id }, 'relay frame for an unknown socket');
      return;
    }
    const proc = this.#procs.get(header.id);
    if (proc) {
      switch (header.op) {
        case 'started':
          proc.isStarted = true;
          proc.started.resolve(frame);
          return;
        case 'out':
          deliverOutput(proc.onOutput, frame.body, this.#logger);
          return;
        case 'exit':
          this.#procs.delete(header.id);
          proc.exit.resolve(frame);
          return;
        case 'error':
          this.#procs.delete(header.id);
          proc.started.reject(replyError(header));
          return;
        default:
          this.#logger?.warn({ op: header.op }, 'unexpected frame for a process');
          return;
      }
    }
    const pending = this.#pending.get(header.id);
    if (!pending) {
      this.#logger?.debug({ op: header.op, id: header.id }, 'frame for an unknown request');
      return;
    }
    this.#pending.delete(header.id);
    clearTimeout(pending.timer);
    if (header.op === 'error') pending.reject(replyError(header));
    else pending.resolve(frame);
  }

  /**
   * The stream dropped and the agent is being looked for again: requests,
   * foreground processes and relayed connections fail with `err`; started
   * background processes are kept for the next stream.
   */
  dropStream(err: Error): void {
    this.#rejectRequests(err);
    for (const [id, proc] of this.#procs) {
      if (proc.background && proc.isStarted) continue;
      if (!proc.isStarted) proc.started.reject(err);
      proc.exit.reject(err);
      this.#procs.delete(id);
    }
    this.#closeRelays();
  }

  /** The channel is lost: everything routed fails with `err`. */
  failAll(err: Error): void {
    this.#rejectRequests(err);
    for (const proc of this.#procs.values()) {
      if (!proc.isStarted) proc.started.reject(err);
      proc.exit.reject(err);
    }
    this.#procs.clear();
    this.#closeRelays();
  }

  #rejectRequests(err: Error): void {
    for (const p of this.#pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    this.#pending.clear();
  }

  #closeRelays(): void {
    for (const relay of this.#relays.values()) relay.closeAll();
    this.#relays.clear();
  }
}
