/**
 * Picks the executor for a tenant's task: rendezvous (highest random weight)
 * hashing of `tenant/task_id` over the executors of the tenant's backend, so a
 * task's environment stays on one executor and only the tasks of a removed
 * executor move.
 */
import { createHash } from 'node:crypto';
import type { BackendName } from '../common/config.js';
import { FailedPreconditionError, PermissionDeniedError, UnavailableError } from '../common/errors.js';
import type { ExecutorClient } from '../gen/berth/v1/executor.js';

export interface ExecutorEndpoint {
  readonly id: string;
  readonly backend: BackendName;
  readonly client: ExecutorClient;
  /** False while health checks fail; unhealthy executors get no new tasks. */
  healthy: boolean;
}

export interface TenantPolicy {
  readonly backend: BackendName;
  readonly allowedBackends?: readonly BackendName[];
}

function weight(endpointId: string, key: string): bigint {
  return createHash('sha256').update(`${endpointId}\0${key}`).digest().readBigUInt64BE(0);
}

/** Pure rendezvous choice; exported for tests. */
export function rendezvousPick<T extends { id: string }>(candidates: readonly T[], key: string): T | undefined {
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
  readonly #endpoints: ExecutorEndpoint[];
  readonly #policyFor: (tenant: string) => TenantPolicy;

  constructor(endpoints: ExecutorEndpoint[], policyFor: (tenant: string) => TenantPolicy) {
    this.#endpoints = endpoints;
    this.#policyFor = policyFor;
  }

  get endpoints(): readonly ExecutorEndpoint[] {
    return this.#endpoints;
  }

  route(tenant: string, taskId: string): { backend: BackendName; client: ExecutorClient; executorId: string } {
    const policy = this.#policyFor(tenant);
    if (policy.allowedBackends && !policy.allowedBackends.includes(policy.backend)) {
      throw new PermissionDeniedError(`tenant '${tenant}' may not use the ${policy.backend} backend`);
    }
    const ofBackend = this.#endpoints.filter((e) => e.backend === policy.backend);
    if (ofBackend.length === 0) {
      throw new FailedPreconditionError(
        `no executor serves the ${policy.backend} backend; start one with 'berth executor --backend ${policy.backend}' ` +
          'and list it under executors: in the dispatcher config',
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
