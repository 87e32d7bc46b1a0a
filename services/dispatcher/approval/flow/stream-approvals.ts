/**
 * Approval requests over one bidi Session stream: each ask sends an
 * ApprovalRequest naming its call and waits for the ApprovalAnswer with the
 * same approval id. Several calls can wait at once; each answer settles only
 * its own request. When the stream can no longer carry answers (the client
 * half-closed or went away) every waiting ask, and every later one, ends as
 * `closed`, which the guard treats as a denial.
 */
import { isApprovalChoice, type ApprovalAsker, type ApprovalPrompt, type AskOutcome } from '../approval-types.js';

interface Waiter {
  readonly resolve: (outcome: AskOutcome) => void;
}

export type AnswerResult = 'answered' | 'unknown' | 'invalid-choice';

export class StreamApprovals {
  readonly #send: (callId: string, prompt: ApprovalPrompt) => void;
  readonly #waiting = new Map<string, Waiter>();
  #closed = false;

  /** `send` puts an ApprovalRequest for `callId` on the stream. */
  constructor(send: (callId: string, prompt: ApprovalPrompt) => void) {
    this.#send = send;
  }

  /** The asker for one call on this stream. */
  askerFor(callId: string): ApprovalAsker {
    return { ask: (prompt, signal) => this.#ask(callId, prompt, signal) };
  }

  #ask(callId: string, prompt: ApprovalPrompt, signal: AbortSignal): Promise<AskOutcome> {
    if (this.#closed) return Promise.resolve({ kind: 'closed' });
    if (signal.aborted) return Promise.reject(signal.reason as Error);
    return new Promise<AskOutcome>((resolve, reject) => {
      const onAbort = () => {
        this.#waiting.delete(prompt.approvalId);
        reject(signal.reason as Error);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.#waiting.set(prompt.approvalId, {
        resolve: (outcome) => {
          signal.removeEventListener('abort', onAbort);
          this.#waiting.delete(prompt.approvalId);
          resolve(outcome);
        },
      });
      this.#send(callId, prompt);
    });
  }

  /**
   * Delivers an answer. An unknown id (already timed out, or never asked) is
   * reported, not fatal: answers race with timeouts. A choice that is not one
   * of once/session/always/deny denies: an answer nobody can read is not consent.
   */
  answer(approvalId: string, choice: string): AnswerResult {
    const waiter = this.#waiting.get(approvalId);
    if (waiter === undefined) return 'unknown';
    const valid = isApprovalChoice(choice);
    waiter.resolve({ kind: 'answer', choice: valid ? choice : 'deny' });
    return valid ? 'answered' : 'invalid-choice';
  }

  /** Number of asks waiting for an answer. */
  get waiting(): number {
    return this.#waiting.size;
  }

  /** No more answers can arrive: waiting and future asks end as `closed`. */
  close(): void {
    this.#closed = true;
    for (const waiter of [...this.#waiting.values()]) waiter.resolve({ kind: 'closed' });
  }
}
