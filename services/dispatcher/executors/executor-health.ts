/**
 * Watches executors with the standard gRPC health check so the router sends
 * new tasks only to executors that answer. A task whose executor died gets a
 * clear error naming the lost environment on its next call, then a new
 * environment on a healthy executor (rendezvous hashing picks the next one).
 */
import { ClientError, createClient, type Channel } from 'nice-grpc';
import { HealthDefinition } from 'nice-grpc-server-health';
import type { Logger } from '../../common/logging.js';
import { endUnreachableCalls, type ExecutorEndpoint } from './executor-router.js';

/** grpc.health.v1 HealthCheckResponse.ServingStatus.SERVING */
const SERVING = 1;
const NOT_SERVING = 2;

export interface HealthWatcherOptions {
  readonly intervalMs: number;
  readonly timeoutMs: number;
  /** Consecutive failed checks before an executor is taken out of rotation (a busy machine misses some). */
  readonly failuresBeforeDown: number;
  readonly logger: Logger;
}

/** An executor to watch: its endpoint, the channel to check it over (read at each check), and how to explain a failed check. */
export interface WatchedExecutor {
  readonly endpoint: ExecutorEndpoint;
  readonly channel: Channel;
  readonly explain?: (details: string) => Promise<string>;
}

export class ExecutorHealthWatcher {
  #targets: Array<{ watched: WatchedExecutor; failures: number; checked: boolean }>;
  readonly #options: HealthWatcherOptions;
  #timer: NodeJS.Timeout | undefined;

  constructor(targets: readonly WatchedExecutor[], options: HealthWatcherOptions) {
    this.#targets = targets.map((watched) => ({ watched, failures: 0, checked: false }));
    this.#options = options;
  }

  /** Watches one more executor (discovered); it is checked at once. */
  async add(watched: WatchedExecutor): Promise<void> {
    const target = { watched, failures: 0, checked: false };
    this.#targets.push(target);
    await this.#check(target);
  }

  /** Stops watching an executor (it left the membership). */
  remove(endpointId: string): void {
    this.#targets = this.#targets.filter((t) => t.watched.endpoint.id !== endpointId);
  }

  /** One round of checks; exported for tests and for a check right at start. */
  async checkAll(): Promise<void> {
    await Promise.all(this.#targets.map((target) => this.#check(target)));
  }

  /**
   * Checks one executor now, after a call to it failed with UNAVAILABLE: one
   * that does not answer is out of rotation at once (a killed executor's
   * tasks then get their one lost-environment error, not a transport error
   * first). True when it is out of rotation.
   */
  async confirmDown(endpointId: string): Promise<boolean> {
    const target = this.#targets.find((t) => t.watched.endpoint.id === endpointId);
    if (!target) return false;
    await this.#check(target);
    if (target.failures > 0 && target.watched.endpoint.healthy) {
      target.failures = this.#options.failuresBeforeDown;
      target.watched.endpoint.healthy = false;
      this.#options.logger.warn({ executor: endpointId }, 'executor is not answering after a failed call; no new tasks go to it');
      this.#endCalls(target.watched.endpoint);
    }
    return !target.watched.endpoint.healthy;
  }

  async #check(target: { watched: WatchedExecutor; failures: number; checked: boolean }): Promise<void> {
    const { endpoint, explain } = target.watched;
    // A client per check: the channel changes when the dispatcher's client certificate is reloaded.
    const health = createClient(HealthDefinition, target.watched.channel);
    let answered = false;
    let draining = false;
    let failure = '';
    try {
      const r = await health.check({ service: '' }, { signal: AbortSignal.timeout(this.#options.timeoutMs) });
      answered = r.status === SERVING;
      // An executor that says NOT_SERVING is draining: out of rotation at once, not after a few misses.
      draining = r.status === NOT_SERVING;
    } catch (err) {
      answered = false;
      failure = err instanceof ClientError ? err.details : String(err);
    }
    const first = !target.checked;
    target.checked = true;
    target.failures = answered ? 0 : target.failures + 1;
    const healthy = answered || (!draining && endpoint.healthy && target.failures < this.#options.failuresBeforeDown);
    const changed = healthy !== endpoint.healthy;
    // In or out of rotation now: explaining a failure below may take a TLS probe's timeout (a stopped executor).
    endpoint.healthy = healthy;
    if (answered) endpoint.draining = false;
    else if (draining) endpoint.draining = true;
    // Out of rotation unanswered (draining or not before): its calls in flight would wait for it.
    if (!answered && !draining && target.failures === this.#options.failuresBeforeDown) this.#endCalls(endpoint);
    // A TLS mismatch shows at the first check: say so at start rather than at the first call.
    if (changed || (first && !answered)) {
      const reason = !answered && explain && failure ? await explain(failure) : failure || undefined;
      this.#options.logger[answered ? 'info' : 'warn'](
        { executor: endpoint.id, backend: endpoint.backend, healthy, ...(reason ? { reason } : {}) },
        answered
          ? 'executor is back'
          : draining
            ? 'executor is draining; no new tasks go to it'
            : `executor is not answering${healthy ? '' : '; no new tasks go to it'}${reason ? `: ${reason}` : ''}`,
      );
    }
  }

  /**
   * Ends the calls in flight to an executor that left rotation unanswered:
   * each ends as its task's one lost-environment error. Not when no other
   * executor of its backend is in rotation: calls then keep going to it (often
   * a saturated machine missing checks), and nothing is gained by ending them.
   */
  #endCalls(endpoint: ExecutorEndpoint): void {
    const elsewhere = this.#targets.some(
      (t) => t.watched.endpoint !== endpoint && t.watched.endpoint.backend === endpoint.backend && t.watched.endpoint.healthy,
    );
    if (elsewhere) endUnreachableCalls(endpoint);
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
