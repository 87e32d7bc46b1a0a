/**
 * The dispatcher's metrics: tool calls by tool and status, their latency,
 * and approval decisions. Tool names the registry does not know are counted
 * as `unknown`, so a client cannot make up label values.
 */
import { Status } from 'nice-grpc';
import { statusOf } from '../common/grpc-errors.js';
import { counter, histogram, promClient, Series, type Registry } from '../common/metrics.js';
import type { ApprovalDecisionSink } from './approval/approval-types.js';
import { QUOTA_KEYS, type QuotaKey, type QuotaLedger } from './quotas/quota-ledger.js';

/** Tool call latency buckets, in seconds: 1 ms to 10 min (the longest foreground timeout). */
export const TOOL_LATENCY_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
] as const;

/**
 * Whether a result JSON has a non-empty top-level-style `"error"` value
 * (`null` and `""`, as in the pending-approval result, are no error). Found
 * without parsing: results can be large and this runs on every call. In JSON
 * text an unescaped `"` followed by `error":` can only open the key `error`.
 */
export function resultHasError(result: string): boolean {
  for (let i = result.indexOf('"error":'); i !== -1; i = result.indexOf('"error":', i + 8)) {
    let backslashes = 0;
    while (result.charCodeAt(i - 1 - backslashes) === 0x5c) backslashes += 1;
    if (backslashes % 2 === 1) continue;
    if (!result.startsWith('null', i + 8) && !result.startsWith('""', i + 8)) return true;
  }
  return false;
}

export class DispatcherMetrics {
  readonly #knownTool: (name: string) => boolean;
  readonly #calls: Series<{ inc(): void }>;
  readonly #latency: Series<{ observe(seconds: number): void }>;
  readonly #approvals: Series<{ inc(): void }>;

  /** `knownTool`: whether a tool name is registered (others are counted as `unknown`). */
  constructor(registry: Registry, knownTool: (name: string) => boolean) {
    this.#knownTool = knownTool;
    const calls = counter(registry, {
      name: 'berth_tool_calls_total',
      help: 'Tool calls, by tool and status: success, tool_error (the result holds an error) or the gRPC status the call failed with',
      labelNames: ['tool', 'status'],
    });
    const latency = histogram(registry, {
      name: 'berth_tool_call_duration_seconds',
      help: 'Tool call duration in the dispatcher, by tool, whatever the outcome',
      labelNames: ['tool'],
      buckets: TOOL_LATENCY_BUCKETS,
    });
    const approvals = counter(registry, {
      name: 'berth_approval_decisions_total',
      help: 'Approval checks of commands that needed approval, by decision and reason',
      labelNames: ['decision', 'reason'],
    });
    this.#calls = new Series((tool: string, status: string) => calls.labels({ tool, status }));
    this.#latency = new Series((tool: string) => latency.labels({ tool }));
    this.#approvals = new Series((decision: string, reason: string) => approvals.labels({ decision, reason }));
  }

  /** A call that returned `result` after `seconds`. */
  toolCallDone(name: string, seconds: number, result: string): void {
    this.#record(name, seconds, resultHasError(result) ? 'tool_error' : 'success');
  }

  /** A call that failed with `err` (its gRPC status is the label) after `seconds`. */
  toolCallFailed(name: string, seconds: number, err: unknown): void {
    this.#record(name, seconds, Status[statusOf(err)] ?? 'UNKNOWN');
  }

  /**
   * Quota metrics: refusals by quota, and at each scrape the use per quota
   * summed over tenants plus how many tenants are at their limit. No tenant
   * ids in labels unless `tenantLabels` (metrics.tenant_labels): then the use
   * gauge has one series per tenant instead of the sum.
   */
  observeQuotas(registry: Registry, ledger: QuotaLedger, tenantLabels: boolean): (quota: QuotaKey) => void {
    const rejections = counter(registry, {
      name: 'berth_quota_rejections_total',
      help: 'Calls refused with RESOURCE_EXHAUSTED by a per-tenant quota, by quota key',
      labelNames: ['quota'],
    });
    // Known label values up front, so a dashboard sees zeros before the first refusal.
    for (const quota of QUOTA_KEYS) rejections.labels({ quota }).inc(0);
    const refusals = new Series((quota: string) => rejections.labels({ quota }));
    const labelNames = tenantLabels ? (['quota', 'tenant'] as const) : (['quota'] as const);
    // One dispatcher per registry; a second one (tests) keeps the first one's gauges.
    if (registry.getSingleMetric('berth_quota_usage') !== undefined) return (quota) => refusals.get(quota, '').inc();
    const { Gauge } = promClient();
    new Gauge({
      name: 'berth_quota_usage',
      help:
        'Use per quota key, summed over tenants (with metrics.tenant_labels: per tenant): live tasks, calls ' +
        'running, calls in the last minute, scripts running, MB and CPUs of live containers',
      labelNames: [...labelNames],
      registers: [registry],
      collect() {
        this.reset();
        const sums = new Map<QuotaKey, number>(QUOTA_KEYS.map((k) => [k, 0]));
        for (const tenant of ledger.tenants()) {
          const use = ledger.use(tenant);
          for (const quota of QUOTA_KEYS) {
            if (tenantLabels) this.labels({ quota, tenant }).set(use[quota]);
            sums.set(quota, (sums.get(quota) ?? 0) + use[quota]);
          }
        }
        if (!tenantLabels) for (const [quota, value] of sums) this.labels({ quota }).set(value);
      },
    });
    new Gauge({
      name: 'berth_quota_tenants_at_limit',
      help: 'Tenants whose use of a quota has reached its limit, by quota key',
      labelNames: ['quota'],
      registers: [registry],
      collect() {
        const counts = new Map<QuotaKey, number>(QUOTA_KEYS.map((k) => [k, 0]));
        for (const tenant of ledger.tenants()) {
          const use = ledger.use(tenant);
          const limits = ledger.limits(tenant);
          for (const quota of QUOTA_KEYS) {
            const limit = limits[quota];
            if (limit !== undefined && use[quota] >= limit - 1e-9) counts.set(quota, (counts.get(quota) ?? 0) + 1);
          }
        }
        for (const [quota, value] of counts) this.labels({ quota }).set(value);
      },
    });
    return (quota) => refusals.get(quota, '').inc();
  }

  readonly approvalDecided: ApprovalDecisionSink = (decision, reason) => {
    this.#approvals.get(decision, reason).inc();
  };

  #record(name: string, seconds: number, status: string): void {
    const tool = this.#knownTool(name) ? name : 'unknown';
    this.#calls.get(tool, status).inc();
    this.#latency.get(tool, '').observe(seconds);
  }
}
