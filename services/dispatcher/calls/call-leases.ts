/** The quota leases one tool call holds until it ends. */
import type { QuotaLease } from '../quotas/quota-ledger.js';

/** A call's leases; one that arrives after the call ended (a late admission) is released at once. */
export class CallLeases {
  readonly #held: QuotaLease[] = [];
  #ended = false;

  push(lease: QuotaLease): void {
    if (this.#ended) lease.release();
    else this.#held.push(lease);
  }

  releaseAll(): void {
    this.#ended = true;
    for (const lease of this.#held.splice(0)) lease.release();
  }
}
