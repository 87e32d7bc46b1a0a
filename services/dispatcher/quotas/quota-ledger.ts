/**
 * Per-tenant quotas (docs/quotas.md), kept by the dispatcher: every call and
 * every new task environment passes through it, so it can say no before
 * anything is created, and concurrent first calls of new tasks are admitted
 * one at a time (check and reservation happen in one synchronous step).
 *
 * Calls, their rate and execute_code scripts exist only in the dispatcher and
 * are counted here alone. Live tasks and their containers exist on the
 * executors, which alone know when one goes without the dispatcher asking
 * (idle reaping, shutdown, a restart): the ledger reserves a task when it
 * admits it and reconciles with each executor's TaskUsage report, taken
 * periodically and again before any task-side refusal, so a task the
 * executor released is never held against its tenant. Reports also rebuild
 * the ledger after a dispatcher restart.
 *
 * Reconciling with reports that may be stale: every event gets a sequence
 * number. A report asked at S removes a task only when no call of it was
 * running at S or since; a task the dispatcher released after S (EndTask) is
 * not brought back by that report.
 */
import type { QuotasConfig } from '../../common/config.js';
import { NO_CONTAINERS, type ContainerLimits } from '../../common/container-limits.js';
import { ResourceExhaustedError } from '../../common/errors.js';
import type { Logger } from '../../common/logging.js';
import { TokenBucket } from './token-bucket.js';

export const QUOTA_KEYS = [
  'max_tasks',
  'max_concurrent_calls',
  'calls_per_minute',
  'max_execute_code',
  'max_memory_mb',
  'max_cpus',
] as const;
export type QuotaKey = (typeof QUOTA_KEYS)[number];

/** A quota said no: RESOURCE_EXHAUSTED, with the quota named for callers and metrics. */
export class QuotaExceededError extends ResourceExhaustedError {
  readonly tenant: string;
  readonly quota: QuotaKey;
  constructor(tenant: string, quota: QuotaKey, message: string) {
    super(message);
    this.tenant = tenant;
    this.quota = quota;
  }
}

/** Containers and the sum of their limits. */
export type ContainerCost = ContainerLimits;

/** What an executor reports (its TaskUsage answer). */
export interface ExecutorUsageReport {
  readonly tasks: ReadonlyArray<{ readonly tenant: string; readonly taskId: string; readonly held: ContainerCost }>;
  /** What a new task environment holds there. */
  readonly perTask: ContainerCost;
  /** What a task's execute_code code container holds there (zero: scripts run in the task's environment). */
  readonly perCodeContainer: ContainerCost;
}

export interface UsageSource {
  /** The executor's report; rejects when it does not answer. */
  fetch(executorId: string): Promise<ExecutorUsageReport>;
  /** False once its health checks fail: the tasks it held are lost to their tenants. */
  healthy(executorId: string): boolean;
}

export interface QuotaLedgerOptions {
  /** The tenant's effective quotas (absent key: unlimited). */
  readonly quotasFor: (tenant: string) => QuotasConfig;
  readonly usage: UsageSource;
  /** Costs on an executor that has not answered TaskUsage (yet): from this dispatcher's config. */
  readonly fallbackCosts: (executorId: string) => Pick<ExecutorUsageReport, 'perTask' | 'perCodeContainer'>;
  /** Monotonic milliseconds; default performance.now. */
  readonly nowMs?: () => number;
  /** Told of each refusal (metrics). */
  readonly onRejected?: (quota: QuotaKey) => void;
  readonly logger?: Logger;
}

/** Something admitted; release it once when it is over (more calls are no-ops). */
export interface QuotaLease {
  release(): void;
}

interface TaskEntry {
  executorId: string;
  held: ContainerCost;
  codeContainer: boolean;
  /** Calls of the task running now: a report never removes the task then. */
  inFlight: number;
  /** Sequence number of the last call start or end. */
  touched: number;
}

interface TenantState {
  calls: number;
  scripts: number;
  bucket: TokenBucket | undefined;
  readonly tasks: Map<string, TaskEntry>;
}

interface ExecutorState {
  costs: Pick<ExecutorUsageReport, 'perTask' | 'perCodeContainer'> | undefined;
  running: Promise<void> | undefined;
  queued: Promise<void> | undefined;
}

interface Refusal {
  readonly quota: QuotaKey;
  readonly message: string;
}

/** A number as people write it: integers plain, fractions with at most two decimals. */
function fmt(n: number): string {
  return Number.isInteger(n) ? String(n) : String(Math.round(n * 100) / 100);
}

/** The refusal sentences (docs/quotas.md lists them). */
export const quotaMessages = {
  max_tasks: (tenant: string, use: number, limit: number) =>
    `tenant ${tenant} is at quotas.max_tasks (${use} of ${limit} live tasks); end a task or raise the quota`,
  max_concurrent_calls: (tenant: string, use: number, limit: number) =>
    `tenant ${tenant} is at quotas.max_concurrent_calls (${use} of ${limit} calls running); ` +
    'wait for a call to finish or raise the quota',
  calls_per_minute: (tenant: string, use: number, limit: number, retryMs: number) =>
    `tenant ${tenant} is at quotas.calls_per_minute (${use} of ${limit} calls in the last minute); ` +
    `retry in ${Math.max(1, Math.ceil(retryMs / 1000))}s or raise the quota`,
  max_execute_code: (tenant: string, use: number, limit: number) =>
    `tenant ${tenant} is at quotas.max_execute_code (${use} of ${limit} scripts running); ` +
    'wait for a script to finish or raise the quota',
  max_memory_mb: (tenant: string, use: number, limit: number, needed: number) =>
    `tenant ${tenant} is at quotas.max_memory_mb (${fmt(use)} of ${fmt(limit)} MB in live containers, ` +
    `a new container needs ${fmt(needed)}); end a task or raise the quota`,
  max_cpus: (tenant: string, use: number, limit: number, needed: number) =>
    `tenant ${tenant} is at quotas.max_cpus (${fmt(use)} of ${fmt(limit)} CPUs in live containers, ` +
    `a new container needs ${fmt(needed)}); end a task or raise the quota`,
} as const;

function lease(release: () => void): QuotaLease {
  let done = false;
  return {
    release() {
      if (done) return;
      done = true;
      release();
    },
  };
}

const add = (a: ContainerCost, b: ContainerCost): ContainerCost => ({
  containers: a.containers + b.containers,
  memoryMb: a.memoryMb + b.memoryMb,
  cpus: a.cpus + b.cpus,
});

/** Floating-point sums of CPU limits (0.1 + 0.2) must not refuse what fits exactly. */
const EPSILON = 1e-9;

export class QuotaLedger {
  readonly #o: QuotaLedgerOptions;
  readonly #now: () => number;
  readonly #tenants = new Map<string, TenantState>();
  readonly #executors = new Map<string, ExecutorState>();
  /** Tasks released by the dispatcher: seq of the release (Infinity while the executor is still releasing). */
  readonly #released = new Map<string, number>();
  /** Reports asked and not yet applied. */
  readonly #asking = new Set<number>();
  #seq = 0;

  constructor(options: QuotaLedgerOptions) {
    this.#o = options;
    this.#now = options.nowMs ?? (() => performance.now());
  }

  /** A top-level call starts: max_concurrent_calls, then calls_per_minute. Throws QuotaExceededError. */
  beginCall(tenant: string): QuotaLease {
    const q = this.#o.quotasFor(tenant);
    const state = this.#tenant(tenant);
    if (q.max_concurrent_calls !== undefined && state.calls >= q.max_concurrent_calls) {
      this.#reject(tenant, {
        quota: 'max_concurrent_calls',
        message: quotaMessages.max_concurrent_calls(tenant, state.calls, q.max_concurrent_calls),
      });
    }
    if (q.calls_per_minute !== undefined) {
      const now = this.#now();
      if (state.bucket?.capacity !== q.calls_per_minute) state.bucket = new TokenBucket(q.calls_per_minute, now);
      if (!state.bucket.tryTake(now)) {
        this.#reject(tenant, {
          quota: 'calls_per_minute',
          message: quotaMessages.calls_per_minute(
            tenant,
            state.bucket.used(now),
            q.calls_per_minute,
            state.bucket.retryAfterMs(now),
          ),
        });
      }
    }
    state.calls += 1;
    return lease(() => {
      state.calls -= 1;
    });
  }

  /** An execute_code script starts: max_execute_code. Throws QuotaExceededError. */
  beginScript(tenant: string): QuotaLease {
    const q = this.#o.quotasFor(tenant);
    const state = this.#tenant(tenant);
    if (q.max_execute_code !== undefined && state.scripts >= q.max_execute_code) {
      this.#reject(tenant, {
        quota: 'max_execute_code',
        message: quotaMessages.max_execute_code(tenant, state.scripts, q.max_execute_code),
      });
    }
    state.scripts += 1;
    return lease(() => {
      state.scripts -= 1;
    });
  }

  /**
   * A call needs the task's environment on `executorId`: a live task goes
   * on; a new one must fit max_tasks, max_memory_mb and max_cpus, and is
   * reserved at once. The lease marks the call running (release it when the
   * call ends). Throws QuotaExceededError.
   */
  async admitTask(tenant: string, taskId: string, executorId: string): Promise<QuotaLease> {
    const costs = await this.#costsOf(executorId);
    const attempt = (): QuotaLease | Refusal => {
      const state = this.#tenant(tenant);
      const entry = state.tasks.get(taskId);
      if (entry) {
        // The task moved when its executor died; it is one task wherever it lives.
        entry.executorId = executorId;
        return this.#hold(entry);
      }
      const refusal = this.#checkTask(tenant, state, costs.perTask);
      if (refusal) return refusal;
      const created: TaskEntry = { executorId, held: costs.perTask, codeContainer: false, inFlight: 0, touched: 0 };
      state.tasks.set(taskId, created);
      return this.#hold(created);
    };
    return this.#admit(tenant, attempt);
  }

  /**
   * execute_code will need the task's code container (ssh, singularity): when
   * the task has none yet, it must fit max_memory_mb and max_cpus. Call after
   * {@link admitTask}. Throws QuotaExceededError.
   */
  async admitCodeContainer(tenant: string, taskId: string, executorId: string): Promise<void> {
    const cost = (await this.#costsOf(executorId)).perCodeContainer;
    if (cost.containers === 0) return;
    const attempt = (): QuotaLease | Refusal | undefined => {
      const entry = this.#tenant(tenant).tasks.get(taskId);
      if (!entry || entry.codeContainer) return undefined;
      const refusal = this.#checkContainers(tenant, this.#tenant(tenant), cost);
      if (refusal) return refusal;
      entry.held = add(entry.held, cost);
      entry.codeContainer = true;
      entry.touched = ++this.#seq;
      return undefined;
    };
    await this.#admit(tenant, attempt);
  }

  /**
   * The task is being released (EndTask): its share is free at once. Call
   * the returned function when the executor has released it, so reports
   * taken before that do not bring it back.
   */
  releaseTask(tenant: string, taskId: string): () => void {
    const key = `${tenant}/${taskId}`;
    this.#tenants.get(tenant)?.tasks.delete(taskId);
    this.#released.set(key, Infinity);
    return () => {
      if (this.#released.get(key) === Infinity) this.#released.set(key, ++this.#seq);
      this.#pruneReleased();
    };
  }

  /**
   * Takes the executor's report and reconciles its tasks. Callers that come
   * while one is under way share the next one, so each sees a report asked
   * after it came, and an executor gets at most two at a time.
   */
  refresh(executorId: string): Promise<void> {
    const state = this.#executor(executorId);
    if (state.running === undefined) {
      const running = this.#refreshNow(executorId).finally(() => {
        if (state.running === running) state.running = undefined;
      });
      state.running = running;
      return running;
    }
    state.queued ??= state.running.then(() => {
      state.queued = undefined;
      return this.refresh(executorId);
    });
    return state.queued;
  }

  /** Tenants the ledger has seen. */
  tenants(): string[] {
    return [...this.#tenants.keys()];
  }

  /** What the tenant uses now, per quota key. */
  use(tenant: string): Record<QuotaKey, number> {
    const state = this.#tenants.get(tenant);
    if (!state) return { max_tasks: 0, max_concurrent_calls: 0, calls_per_minute: 0, max_execute_code: 0, max_memory_mb: 0, max_cpus: 0 };
    const held = this.#held(state);
    return {
      max_tasks: state.tasks.size,
      max_concurrent_calls: state.calls,
      calls_per_minute: state.bucket?.used(this.#now()) ?? 0,
      max_execute_code: state.scripts,
      max_memory_mb: held.memoryMb,
      max_cpus: held.cpus,
    };
  }

  /** The tenant's effective quotas. */
  limits(tenant: string): QuotasConfig {
    return this.#o.quotasFor(tenant);
  }

  async #admit<T extends QuotaLease | undefined>(tenant: string, attempt: () => T | Refusal): Promise<T> {
    const first = attempt();
    if (!isRefusal(first)) return first;
    // The executors may have released tasks we still count (idle reaping, a restart): ask before refusing.
    await this.#refreshTenant(tenant);
    const second = attempt();
    if (isRefusal(second)) this.#reject(tenant, second);
    return second;
  }

  #checkTask(tenant: string, state: TenantState, cost: ContainerCost): Refusal | undefined {
    const q = this.#o.quotasFor(tenant);
    if (q.max_tasks !== undefined && state.tasks.size >= q.max_tasks) {
      return { quota: 'max_tasks', message: quotaMessages.max_tasks(tenant, state.tasks.size, q.max_tasks) };
    }
    return this.#checkContainers(tenant, state, cost);
  }

  #checkContainers(tenant: string, state: TenantState, cost: ContainerCost): Refusal | undefined {
    if (cost.containers === 0) return undefined;
    const q = this.#o.quotasFor(tenant);
    const held = this.#held(state);
    if (q.max_memory_mb !== undefined && held.memoryMb + cost.memoryMb > q.max_memory_mb + EPSILON) {
      return {
        quota: 'max_memory_mb',
        message: quotaMessages.max_memory_mb(tenant, held.memoryMb, q.max_memory_mb, cost.memoryMb),
      };
    }
    if (q.max_cpus !== undefined && held.cpus + cost.cpus > q.max_cpus + EPSILON) {
      return { quota: 'max_cpus', message: quotaMessages.max_cpus(tenant, held.cpus, q.max_cpus, cost.cpus) };
    }
    return undefined;
  }

  #held(state: TenantState): ContainerCost {
    let sum: ContainerCost = NO_CONTAINERS;
    for (const entry of state.tasks.values()) sum = add(sum, entry.held);
    return sum;
  }

  #hold(entry: TaskEntry): QuotaLease {
    entry.inFlight += 1;
    entry.touched = ++this.#seq;
    return lease(() => {
      entry.inFlight -= 1;
      entry.touched = ++this.#seq;
    });
  }

  #reject(tenant: string, refusal: Refusal): never {
    this.#o.onRejected?.(refusal.quota);
    this.#o.logger?.info({ tenant, quota: refusal.quota }, 'quota refused a call');
    throw new QuotaExceededError(tenant, refusal.quota, refusal.message);
  }

  async #costsOf(executorId: string): Promise<Pick<ExecutorUsageReport, 'perTask' | 'perCodeContainer'>> {
    if (this.#executor(executorId).costs === undefined) await this.refresh(executorId);
    return this.#executor(executorId).costs ?? this.#o.fallbackCosts(executorId);
  }

  /** Reports from every executor holding one of the tenant's tasks. */
  async #refreshTenant(tenant: string): Promise<void> {
    const executors = new Set<string>();
    for (const entry of this.#tenants.get(tenant)?.tasks.values() ?? []) executors.add(entry.executorId);
    await Promise.all([...executors].map((id) => this.refresh(id)));
  }

  async #refreshNow(executorId: string): Promise<void> {
    const asked = ++this.#seq;
    this.#asking.add(asked);
    try {
      let report: ExecutorUsageReport;
      try {
        report = await this.#o.usage.fetch(executorId);
      } catch (err) {
        // Unreachable and out of rotation: its tasks are lost (their next call moves them); answering
        // but failing, or not yet marked down: keep counting them rather than let a tenant past its quota.
        if (!this.#o.usage.healthy(executorId)) this.#forget(executorId, new Set(), asked);
        this.#o.logger?.debug({ err, executor: executorId }, 'task usage report failed');
        return;
      }
      this.#apply(executorId, report, asked);
    } finally {
      this.#asking.delete(asked);
      this.#pruneReleased();
    }
  }

  #apply(executorId: string, report: ExecutorUsageReport, asked: number): void {
    this.#executor(executorId).costs = { perTask: report.perTask, perCodeContainer: report.perCodeContainer };
    const seen = new Set<string>();
    for (const t of report.tasks) {
      const key = `${t.tenant}/${t.taskId}`;
      seen.add(key);
      const state = this.#tenant(t.tenant);
      const entry = state.tasks.get(t.taskId);
      const codeContainer = t.held.containers > report.perTask.containers;
      if (entry === undefined) {
        if ((this.#released.get(key) ?? -1) > asked) continue;
        state.tasks.set(t.taskId, { executorId, held: t.held, codeContainer, inFlight: 0, touched: asked });
      } else if (entry.executorId === executorId && entry.inFlight === 0 && entry.touched < asked) {
        entry.held = t.held;
        entry.codeContainer = codeContainer;
      }
    }
    this.#forget(executorId, seen, asked);
  }

  /** Drops the executor's tasks missing from `kept` that no call touched since `asked`. */
  #forget(executorId: string, kept: ReadonlySet<string>, asked: number): void {
    for (const [tenant, state] of this.#tenants) {
      for (const [taskId, entry] of state.tasks) {
        if (entry.executorId !== executorId || entry.inFlight > 0 || entry.touched >= asked) continue;
        if (!kept.has(`${tenant}/${taskId}`)) state.tasks.delete(taskId);
      }
    }
  }

  /** Release marks matter only to reports asked before them. */
  #pruneReleased(): void {
    const oldest = this.#asking.size === 0 ? Infinity : Math.min(...this.#asking);
    for (const [key, seq] of this.#released) if (seq !== Infinity && seq < oldest) this.#released.delete(key);
  }

  #tenant(tenant: string): TenantState {
    let state = this.#tenants.get(tenant);
    if (!state) {
      state = { calls: 0, scripts: 0, bucket: undefined, tasks: new Map() };
      this.#tenants.set(tenant, state);
    }
    return state;
  }

  #executor(executorId: string): ExecutorState {
    let state = this.#executors.get(executorId);
    if (!state) {
      state = { costs: undefined, running: undefined, queued: undefined };
      this.#executors.set(executorId, state);
    }
    return state;
  }
}

function isRefusal(value: unknown): value is Refusal {
  return typeof value === 'object' && value !== null && 'quota' in value && 'message' in value;
}
