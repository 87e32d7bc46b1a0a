/**
 * A client of the bidi Session stream for the CLI: runs tool calls, passes
 * their live output on, and hands approval requests to a callback (the
 * terminal prompt) whose answer goes back on the stream. Calls are matched to
 * results by call id, so several can be in flight.
 */
import type { Metadata } from 'nice-grpc';
import { AsyncQueue } from '../common/async-queue.js';
import type {
  ApprovalRequest,
  DispatcherClient,
  SessionClientMessage,
  SessionToolResult,
} from '../gen/berth/v1/dispatcher.js';

/** The call failed as a call (not as a tool): carries the gRPC status name the server gave. */
export class SessionCallError extends Error {
  readonly status: string;
  readonly details: string;
  constructor(status: string, details: string) {
    super(`${status}: ${details}`);
    this.name = 'SessionCallError';
    this.status = status;
    this.details = details;
  }
}

export interface CallRequest {
  readonly name: string;
  readonly argumentsJson: string;
  readonly taskId: string;
  readonly sessionId: string;
}

export interface SessionHandlers {
  /**
   * Asked for each approval request; resolves with a choice to send, or
   * undefined to send nothing (the server's timeout then decides). `signal`
   * aborts when the call ended meanwhile.
   */
  readonly onApproval: (request: ApprovalRequest, signal: AbortSignal) => Promise<string | undefined>;
  readonly onOutput?: (callId: string, text: string) => void;
}

interface InFlight {
  readonly resolve: (resultJson: string) => void;
  readonly reject: (err: unknown) => void;
  readonly prompts: AbortController;
}

export class SessionConnection {
  readonly #requests = new AsyncQueue<SessionClientMessage>();
  readonly #calls = new Map<string, InFlight>();
  readonly #handlers: SessionHandlers;
  readonly #done: Promise<void>;
  #failure: unknown;
  #nextId = 1;

  constructor(client: DispatcherClient, handlers: SessionHandlers, options: { metadata?: Metadata; signal?: AbortSignal } = {}) {
    this.#handlers = handlers;
    const responses = client.session(this.#requests, {
      ...(options.metadata === undefined ? {} : { metadata: options.metadata }),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    });
    this.#done = (async () => {
      try {
        for await (const m of responses) {
          const msg = m.message;
          if (msg?.$case === 'output') handlers.onOutput?.(msg.value.callId, msg.value.text);
          else if (msg?.$case === 'result') this.#settle(msg.value.callId, msg.value);
          else if (msg?.$case === 'approvalRequest') void this.#approve(msg.value);
        }
        this.#failAll(new Error('the server ended the session before answering'));
      } catch (err) {
        this.#failAll(err);
      }
    })();
  }

  #settle(callId: string, result: SessionToolResult): void {
    const call = this.#calls.get(callId);
    if (call === undefined) return;
    this.#calls.delete(callId);
    call.prompts.abort();
    if (result.errorStatus === '') {
      call.resolve(result.resultJson);
      return;
    }
    let details = result.resultJson;
    try {
      details = String((JSON.parse(result.resultJson) as { error?: unknown }).error ?? details);
    } catch {
      // keep the raw text
    }
    call.reject(new SessionCallError(result.errorStatus, details));
  }

  #failAll(err: unknown): void {
    this.#failure ??= err;
    for (const [id, call] of this.#calls) {
      this.#calls.delete(id);
      call.prompts.abort();
      call.reject(err);
    }
  }

  async #approve(request: ApprovalRequest): Promise<void> {
    const call = this.#calls.get(request.callId);
    const signal = call?.prompts.signal ?? AbortSignal.abort();
    let choice: string | undefined;
    try {
      choice = await this.#handlers.onApproval(request, signal);
    } catch {
      choice = 'deny';
    }
    if (choice !== undefined && !signal.aborted) {
      this.#requests.push({ message: { $case: 'approvalAnswer', value: { approvalId: request.approvalId, choice } } });
    }
  }

  /** Runs one call; resolves with its result JSON, rejects when the stream fails. */
  call(request: CallRequest): Promise<string> {
    if (this.#failure !== undefined) return Promise.reject(this.#failure as Error);
    const callId = `c${this.#nextId++}`;
    return new Promise<string>((resolve, reject) => {
      this.#calls.set(callId, { resolve, reject, prompts: new AbortController() });
      this.#requests.push({ message: { $case: 'call', value: { callId, request } } });
    });
  }

  /** Puts the session in or out of yolo mode. */
  setYolo(sessionId: string, yolo: boolean): void {
    this.#requests.push({ message: { $case: 'settings', value: { sessionId, yolo } } });
  }

  /** Stops sending and waits for the stream to end. */
  async close(): Promise<void> {
    this.#requests.close();
    await this.#done;
  }
}
