/**
 * Per-session approval state: the pattern keys approved "for this session"
 * and whether the session is in yolo mode. Sessions are keyed by tenant and
 * session key, so one tenant's session id never reaches another tenant's
 * approvals. Bounded: idle sessions expire and the least recently used go
 * first when the table is full.
 */

export interface SessionApprovalsOptions {
  /** Most sessions remembered at once. */
  readonly maxSessions?: number;
  /** A session untouched this long is forgotten. */
  readonly idleTtlMs?: number;
  readonly now?: () => number;
}

interface SessionState {
  readonly keys: Set<string>;
  yolo: boolean;
  /** Consecutive smart-approval denials (the circuit breaker's tally). */
  denials: number;
  lastUsedMs: number;
}

/**
 * The session key of a call: its session id, or when the client sent none,
 * its task (one agent conversation per task is the common case), so that
 * "session" answers still have a scope and never spill into other tasks.
 */
export function sessionKeyOf(sessionId: string, taskId: string): string {
  return sessionId !== '' ? `session:${sessionId}` : `task:${taskId}`;
}

export class SessionApprovals {
  readonly #sessions = new Map<string, SessionState>();
  readonly #maxSessions: number;
  readonly #idleTtlMs: number;
  readonly #now: () => number;

  constructor(options: SessionApprovalsOptions = {}) {
    this.#maxSessions = options.maxSessions ?? 10_000;
    this.#idleTtlMs = options.idleTtlMs ?? 24 * 3600 * 1000;
    this.#now = options.now ?? Date.now;
  }

  #id(tenant: string, sessionKey: string): string {
    return `${tenant}\0${sessionKey}`;
  }

  #get(tenant: string, sessionKey: string): SessionState | undefined {
    const id = this.#id(tenant, sessionKey);
    const state = this.#sessions.get(id);
    if (state === undefined) return undefined;
    if (this.#now() - state.lastUsedMs > this.#idleTtlMs) {
      this.#sessions.delete(id);
      return undefined;
    }
    return state;
  }

  #getOrCreate(tenant: string, sessionKey: string): SessionState {
    const id = this.#id(tenant, sessionKey);
    let state = this.#get(tenant, sessionKey);
    if (state === undefined) {
      state = { keys: new Set(), yolo: false, denials: 0, lastUsedMs: this.#now() };
      while (this.#sessions.size >= this.#maxSessions) {
        const oldest = this.#sessions.keys().next().value;
        if (oldest === undefined) break;
        this.#sessions.delete(oldest);
      }
    }
    // Re-insert to keep Map order = least recently used first.
    this.#sessions.delete(id);
    state.lastUsedMs = this.#now();
    this.#sessions.set(id, state);
    return state;
  }

  /** True when every key is approved for the session. */
  approvedAll(tenant: string, sessionKey: string, keys: readonly string[]): boolean {
    const state = this.#get(tenant, sessionKey);
    return state !== undefined && keys.length > 0 && keys.every((k) => state.keys.has(k));
  }

  approve(tenant: string, sessionKey: string, keys: readonly string[]): void {
    const state = this.#getOrCreate(tenant, sessionKey);
    for (const k of keys) state.keys.add(k);
  }

  isYolo(tenant: string, sessionKey: string): boolean {
    return this.#get(tenant, sessionKey)?.yolo === true;
  }

  setYolo(tenant: string, sessionKey: string, enabled: boolean): void {
    this.#getOrCreate(tenant, sessionKey).yolo = enabled;
  }

  /** Counts a smart-approval denial; returns the consecutive count. */
  recordDenial(tenant: string, sessionKey: string): number {
    const state = this.#getOrCreate(tenant, sessionKey);
    state.denials += 1;
    return state.denials;
  }

  /** Consecutive smart-approval denials so far (0 once anything was approved). */
  denials(tenant: string, sessionKey: string): number {
    return this.#get(tenant, sessionKey)?.denials ?? 0;
  }

  /** An approval happened: the denial streak is over. */
  resetDenials(tenant: string, sessionKey: string): void {
    const state = this.#get(tenant, sessionKey);
    if (state !== undefined) state.denials = 0;
  }

  /** Forgets a session's approvals and yolo (its task ended). */
  clear(tenant: string, sessionKey: string): void {
    this.#sessions.delete(this.#id(tenant, sessionKey));
  }
}
