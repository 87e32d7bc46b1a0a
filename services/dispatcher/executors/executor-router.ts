/**
 * Picks the executor for a tenant's task: rendezvous (highest random weight)
 * hashing of `tenant/task_id` over the executors of the tenant's backend, so a
 * task's environment stays on one executor and only the tasks of a removed
 * executor move.
 *
 * Membership changes (discovery, scaling) move some tasks' rendezvous choice
 * away from the executor that holds their environment. So a task this
 * dispatcher has not placed yet is first looked up: the executors say which
 * tasks they hold (TaskUsage), and a holder keeps the task. See docs/deploying.md's
 * design notes on membership for the failure cases.
 */
import { createHash } from 'node:crypto';
import type { BackendName } from '../../common/config.js';
import { FailedPreconditionError, PermissionDeniedError, UnavailableError } from '../../common/errors.js';
import type { ExecutorClient } from '../../gen/berth/v1/executor.js';

export interface ExecutorEndpoint {
  readonly id: string;
  readonly backend: BackendName;
  readonly client: ExecutorClient;
  /** False while health checks fail; unhealthy executors get no new tasks. */
  healthy: boolean;
  /** The executor said NOT_SERVING: it is draining (shutdown, upgrade, scale-down). */
  draining?: boolean;
}

/**
 * Ends the calls in flight to an executor that left rotation because it
 * stopped answering (a stopped process keeps its port open and answers
 * nothing, so those calls would otherwise wait for it). One controller per
 * executor, made at its first call and replaced after it is aborted: calls to
 * a healthy executor cost no timer.
 */
const unreachableCalls = new WeakMap<ExecutorEndpoint, AbortController>();

/** The reason an executor's unreachable signal ({@link ExecutorRouter.unreachableSignal}) is aborted with. */
export class ExecutorUnreachable extends Error {
  constructor(readonly executorId: string) {
    super(`executor ${executorId} stopped answering`);
    this.name = 'ExecutorUnreachable';
  }
}

/** Aborted when the executor leaves rotation unanswered (see {@link endUnreachableCalls}); calls after that get a new signal. */
function endpointUnreachableSignal(endpoint: ExecutorEndpoint): AbortSignal {
  let controller = unreachableCalls.get(endpoint);
  if (controller === undefined) {
    controller = new AbortController();
    unreachableCalls.set(endpoint, controller);
  }
  return controller.signal;
}

/** Ends the calls in flight to an executor that stopped answering (not to a draining one: it finishes its calls). */
export function endUnreachableCalls(endpoint: ExecutorEndpoint): void {
  const controller = unreachableCalls.get(endpoint);
  unreachableCalls.delete(endpoint);
  controller?.abort(new ExecutorUnreachable(endpoint.id));
}

/** Why a task's environment is gone: its executor stopped answering, drained, or left the membership. */
export type LossReason = 'unreachable' | 'draining' | 'removed';

export interface Placement {
  readonly backend: BackendName;
  readonly client: ExecutorClient;
  readonly executorId: string;
  /** Set when the task had lived on another executor that no longer serves it. */
  readonly lost?: { readonly executorId: string; readonly reason: LossReason };
  /** True when nothing said where the task lived: a draining refusal may send it elsewhere. */
  readonly fresh: boolean;
}

/** How long one executor's TaskUsage answer serves holder lookups (a burst of new tasks costs one call per executor). */
const HOLDERS_TTL_MS = 1000;
const HOLDERS_TIMEOUT_MS = 2000;

export interface TenantPolicy {
  readonly backend: BackendName;
  readonly allowedBackends?: readonly BackendName[];
}

function weight(endpointId: string, key: string): bigint {
  return createHash('sha256').update(`${endpointId}\0${key}`).digest().readBigUInt64BE(0);
}

/** Pure rendezvous choice; exported for tests. */
export function rendezvousPick<T extends { id: string }>(candidates: readonly T[], key: string): T | undefined {
  // One candidate (`berth serve`, a single executor) wins without hashing: a SHA-256 per call for nothing.
  if (candidates.length === 1) return candidates[0];
  let best: T | undefined;
  let bestWeight = -1n;
  for (const c of candidates) {
    const w = weight(c.id, key);
    if (w > bestWeight) {
      best = c;
      bestWeight = w;
    }
  }
  return best;
}

export class ExecutorRouter {
  readonly #endpoints: () => readonly ExecutorEndpoint[];
  readonly #policyFor: (tenant: string) => TenantPolicy;
  readonly #holders = new Map<string, { atMs: number; tasks: Promise<Set<string>> }>();
  readonly #confirmDown: ((executorId: string) => Promise<boolean>) | undefined;

  /**
   * `endpoints`: the membership, read at every call (discovery changes it).
   * `confirmDown`: checks an executor's health now, taking it out of rotation
   * when it does not answer (ExecutorHealthWatcher.confirmDown).
   */
  constructor(
    endpoints: readonly ExecutorEndpoint[] | (() => readonly ExecutorEndpoint[]),
    policyFor: (tenant: string) => TenantPolicy,
    confirmDown?: (executorId: string) => Promise<boolean>,
  ) {
    this.#endpoints = typeof endpoints === 'function' ? endpoints : () => endpoints;
    this.#policyFor = policyFor;
    this.#confirmDown = confirmDown;
  }

  /** After a call failed with UNAVAILABLE: whether its executor is down (it did not answer a health check either). */
  async confirmDown(executorId: string): Promise<boolean> {
    return (await this.#confirmDown?.(executorId).catch(() => false)) ?? false;
  }
  /**
   * For one call to the executor: a signal aborted when the executor leaves
   * rotation unanswered, and `done` to call when the call ends (a listener,
   * not AbortSignal.any: on Node 20 that retains every call's signal on the
   * executor's long-lived one). Undefined: not a member.
   */
  unreachableSignal(executorId: string): { readonly signal: AbortSignal; done(): void } | undefined {
    const endpoint = this.#endpoints().find((e) => e.id === executorId);
    if (endpoint === undefined) return undefined;
    const executor = endpointUnreachableSignal(endpoint);
    const call = new AbortController();
    const end = () => call.abort(executor.reason);
    executor.addEventListener('abort', end, { once: true });
    return { signal: call.signal, done: () => executor.removeEventListener('abort', end) };
  }

  /** The backend the tenant's tasks run on. */
  backendFor(tenant: string): BackendName {
    return this.#policyFor(tenant).backend;
  }


  get endpoints(): readonly ExecutorEndpoint[] {
    return this.#endpoints();
  }

  /**
   * Where a task's calls go. `previous`: the executor this dispatcher last
   * sent the task to. A healthy previous executor keeps the task even when
   * the rendezvous choice moved (membership grew); one that is gone, draining
   * or removed is reported in `lost`. Without a previous executor the
   * executors are asked who holds the task before the rendezvous choice is
   * taken as a new task's home.
   */
  async place(tenant: string, taskId: string, previous: string | undefined): Promise<Placement> {
    const choice = this.route(tenant, taskId);
    const members = this.#endpoints();
    if (previous !== undefined) {
      const was = members.find((e) => e.id === previous);
      if (was && was.healthy) return { backend: was.backend, client: was.client, executorId: was.id, fresh: false };
      if (previous === choice.executorId) return { ...choice, fresh: false };
      const reason: LossReason = was === undefined ? 'removed' : was.draining ? 'draining' : 'unreachable';
      return { ...choice, lost: { executorId: previous, reason }, fresh: false };
    }
    const holder = await this.#findHolder(tenant, taskId, choice);
    if (holder) return { backend: holder.backend, client: holder.client, executorId: holder.id, fresh: false };
    return { ...choice, fresh: true };
  }

  /** Takes an executor that refused a new task out of rotation until its health check says otherwise. */
  markDraining(executorId: string): void {
    const endpoint = this.#endpoints().find((e) => e.id === executorId);
    if (endpoint) {
      endpoint.healthy = false;
      endpoint.draining = true;
    }
    this.#holders.delete(executorId);
  }

  /** Forgets cached holder lists (an executor refused a task, membership changed). */
  forgetHolders(executorId?: string): void {
    if (executorId === undefined) this.#holders.clear();
    else this.#holders.delete(executorId);
  }

  async #findHolder(tenant: string, taskId: string, choice: { backend: BackendName; executorId: string }) {
    const candidates = this.#endpoints().filter((e) => e.backend === choice.backend && e.healthy);
    if (candidates.length <= 1) return undefined;
    const key = `${tenant}/${taskId}`;
    // The rendezvous choice usually holds the task (membership unchanged since it was made): ask it alone first.
    const first = candidates.find((e) => e.id === choice.executorId);
    if (first && (await this.#holds(first, key))) return first;
    const others = candidates.filter((e) => e !== first);
    const answers = await Promise.all(others.map((e) => this.#holds(e, key)));
    return others.find((_, i) => answers[i]);
  }

  async #holds(endpoint: ExecutorEndpoint, key: string): Promise<boolean> {
    const nowMs = Date.now();
    let entry = this.#holders.get(endpoint.id);
    if (entry === undefined || nowMs - entry.atMs > HOLDERS_TTL_MS) {
      entry = {
        atMs: nowMs,
        tasks: endpoint.client
          .taskUsage({}, { signal: AbortSignal.timeout(HOLDERS_TIMEOUT_MS) })
          .then((r) => new Set(r.tasks.map((t) => `${t.task?.tenant ?? ''}/${t.task?.taskId ?? ''}`)))
          // An executor that cannot answer holds nothing we could reach anyway.
          .catch(() => new Set<string>()),
      };
      this.#holders.set(endpoint.id, entry);
    }
    return (await entry.tasks).has(key);
  }

  route(tenant: string, taskId: string): { backend: BackendName; client: ExecutorClient; executorId: string } {
    const policy = this.#policyFor(tenant);
    if (policy.allowedBackends && !policy.allowedBackends.includes(policy.backend)) {
      throw new PermissionDeniedError(`tenant '${tenant}' may not use the ${policy.backend} backend`);
    }
    const ofBackend = this.#endpoints().filter((e) => e.backend === policy.backend);
    if (ofBackend.length === 0) {
      throw new FailedPreconditionError(
        `no executor serves the ${policy.backend} backend; start one with 'berth executor --backend ${policy.backend}' ` +
          'and list it under executors: (or executor_discovery:) in the dispatcher config',
      );
    }
    // Health only steers when there is somewhere else to go: with every
    // executor marked down (often just a saturated machine missing health
    // checks) the call goes to its usual executor and fails on its own if
    // that executor is really gone.
    const healthy = ofBackend.filter((e) => e.healthy);
    const chosen = rendezvousPick(healthy.length > 0 ? healthy : ofBackend, `${tenant}/${taskId}`);
    if (!chosen) throw new UnavailableError(`no executor of the ${policy.backend} backend`);
    return { backend: chosen.backend, client: chosen.client, executorId: chosen.id };
  }
}
