/**
 * Watches executors with the standard gRPC health check so the router sends
 * new tasks only to executors that answer. A task whose executor died gets a
 * clear error naming the lost environment on its next call, then a new
 * environment on a healthy executor (rendezvous hashing picks the next one).
 */
import { createClient, type Channel } from 'nice-grpc';
import { HealthDefinition } from 'nice-grpc-server-health';
import type { Logger } from '../common/logging.js';
import type { ExecutorEndpoint } from './executor-router.js';

/** grpc.health.v1 HealthCheckResponse.ServingStatus.SERVING */
const SERVING = 1;

export interface HealthWatcherOptions {
  readonly intervalMs: number;
  readonly timeoutMs: number;
  /** Consecutive failed checks before an executor is taken out of rotation (a busy machine misses some). */
  readonly failuresBeforeDown: number;
  readonly logger: Logger;
}

export class ExecutorHealthWatcher {
  readonly #targets: Array<{
    endpoint: ExecutorEndpoint;
    health: ReturnType<typeof createClient<typeof HealthDefinition>>;
    failures: number;
  }>;
  readonly #options: HealthWatcherOptions;
  #timer: NodeJS.Timeout | undefined;

  constructor(targets: ReadonlyArray<{ endpoint: ExecutorEndpoint; channel: Channel }>, options: HealthWatcherOptions) {
    this.#targets = targets.map((t) => ({
      endpoint: t.endpoint,
      health: createClient(HealthDefinition, t.channel),
      failures: 0,
    }));
    this.#options = options;
  }

  /** One round of checks; exported for tests and for a check right at start. */
  async checkAll(): Promise<void> {
    await Promise.all(
      this.#targets.map(async (target) => {
        const { endpoint, health } = target;
        let answered = false;
        try {
          const r = await health.check({ service: '' }, { signal: AbortSignal.timeout(this.#options.timeoutMs) });
          answered = r.status === SERVING;
        } catch {
          answered = false;
        }
        target.failures = answered ? 0 : target.failures + 1;
        const healthy = answered || (endpoint.healthy && target.failures < this.#options.failuresBeforeDown);
        if (healthy !== endpoint.healthy) {
          this.#options.logger[healthy ? 'info' : 'warn'](
            { executor: endpoint.id, backend: endpoint.backend, healthy },
            healthy ? 'executor is back' : 'executor is not answering; no new tasks go to it',
          );
        }
        endpoint.healthy = healthy;
      }),
    );
  }

  start(): void {
    const tick = () => {
      void this.checkAll().finally(() => {
        if (this.#timer !== undefined) this.#timer = setTimeout(tick, this.#options.intervalMs).unref();
      });
    };
    this.#timer = setTimeout(tick, this.#options.intervalMs).unref();
  }

  stop(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
