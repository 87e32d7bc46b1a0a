/**
 * The CLI's use of the client's Session stream: runs tool calls, passes their
 * live output on, and hands approval requests to a callback (the terminal
 * prompt) whose answer goes back on the stream. Calls carry their own task
 * and session ids, so `berth shell` can switch tasks on one stream.
 */
import type { Metadata } from 'nice-grpc-common';
import { SessionStream, type ApprovalChoice, type ApprovalEvent } from '../client/session.js';
import type { BackgroundEvent } from '../client/task-events.js';
import type { ApprovalRequest, DispatcherClient } from '../gen/berth/v1/dispatcher.js';

export { BerthError as SessionCallError } from '../client/errors.js';

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
  /** Background-process events of the tasks this stream has called. */
  readonly onEvent?: (event: BackgroundEvent) => void;
}

export class SessionConnection {
  readonly #stream: SessionStream;
  readonly #handlers: SessionHandlers;

  constructor(client: Pick<DispatcherClient, 'session'>, handlers: SessionHandlers, options: { metadata?: Metadata; signal?: AbortSignal } = {}) {
    this.#handlers = handlers;
    const stream = new SessionStream(client, options);
    this.#stream = stream;
    const onEvent = handlers.onEvent;
    if (onEvent !== undefined) {
      void (async () => {
        for await (const event of stream.events()) onEvent(event);
      })();
    }
  }

  async #approve(event: ApprovalEvent, signal: AbortSignal): Promise<void> {
    const { request } = event;
    let choice: string | undefined;
    try {
      choice = await this.#handlers.onApproval({ ...request, callId: event.callId, choices: [...request.choices] }, signal);
    } catch {
      choice = 'deny';
    }
    if (choice !== undefined && !signal.aborted) event.answer(choice as ApprovalChoice);
  }

  /** Runs one call; resolves with its result JSON, rejects when the call or the stream fails. */
  async call(request: CallRequest): Promise<string> {
    const prompts = new AbortController();
    try {
      for await (const event of this.#stream.start(request)) {
        if (event.type === 'output') this.#handlers.onOutput?.(event.callId, event.text);
        else if (event.type === 'approval') void this.#approve(event, prompts.signal);
        else return event.resultJson;
      }
      throw new Error('the server ended the session before answering');
    } finally {
      prompts.abort();
    }
  }

  /** Puts the session in or out of yolo mode. */
  setYolo(sessionId: string, yolo: boolean): void {
    this.#stream.setYolo(sessionId, yolo);
  }

  /** Stops sending and waits for the stream to end. */
  close(): Promise<void> {
    return this.#stream.close();
  }
}
