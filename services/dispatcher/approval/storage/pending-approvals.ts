/**
 * Unary calls parked until the Approve RPC answers them. A unary CallTool
 * has nobody to ask, so a command that needs approval returns the pending
 * result and its call waits here, per tenant, bounded in count and time: the
 * tenant's `max_pending` and its approval timeout, after which the call is
 * dropped (silence is not consent).
 */

/** What re-running a parked call needs: the original request. */
export interface ParkedCall {
  readonly name: string;
  readonly argumentsJson: string;
  readonly taskId: string;
  readonly sessionId: string;
}

export interface PendingApproval {
  readonly approvalId: string;
  readonly tenant: string;
  readonly sessionKey: string;
  readonly command: string;
  readonly description: string;
  /** Every key the command needs; a session/always answer approves all of them. */
  readonly keys: readonly string[];
  readonly call: ParkedCall;
  readonly expiresAtMs: number;
}

export class PendingApprovals {
  readonly #byTenant = new Map<string, Map<string, PendingApproval>>();
  readonly #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  #sweep(tenant: string): Map<string, PendingApproval> {
    let entries = this.#byTenant.get(tenant);
    if (entries === undefined) {
      entries = new Map();
      this.#byTenant.set(tenant, entries);
    }
    const now = this.#now();
    for (const [id, p] of entries) if (p.expiresAtMs <= now) entries.delete(id);
    return entries;
  }

  /** Parks a call; false when the tenant already has `max` waiting. */
  add(entry: Omit<PendingApproval, 'expiresAtMs'>, ttlMs: number, max: number): boolean {
    const entries = this.#sweep(entry.tenant);
    if (entries.size >= max) return false;
    entries.set(entry.approvalId, { ...entry, expiresAtMs: this.#now() + ttlMs });
    return true;
  }

  /** Removes and returns the tenant's parked call with this id, unless it expired. */
  take(tenant: string, approvalId: string): PendingApproval | undefined {
    const entries = this.#sweep(tenant);
    const entry = entries.get(approvalId);
    if (entry !== undefined) entries.delete(approvalId);
    return entry;
  }

  /** Puts a taken call back (the answer was not usable), keeping its deadline. */
  restore(entry: PendingApproval): void {
    if (entry.expiresAtMs > this.#now()) this.#sweep(entry.tenant).set(entry.approvalId, entry);
  }

  count(tenant: string): number {
    return this.#sweep(tenant).size;
  }
}
