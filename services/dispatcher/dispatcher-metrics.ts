/**
 * The dispatcher's metrics: tool calls by tool and status, their latency,
 * and approval decisions. Tool names the registry does not know are counted
 * as `unknown`, so a client cannot make up label values.
 */
import { Status } from 'nice-grpc';
import { statusOf } from '../common/grpc-errors.js';
import { counter, histogram, Series, type Registry } from '../common/metrics.js';
import type { ApprovalDecisionSink } from './approval/approval-types.js';

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

  readonly approvalDecided: ApprovalDecisionSink = (decision, reason) => {
    this.#approvals.get(decision, reason).inc();
  };

  #record(name: string, seconds: number, status: string): void {
    const tool = this.#knownTool(name) ? name : 'unknown';
    this.#calls.get(tool, status).inc();
    this.#latency.get(tool, '').observe(seconds);
  }
}
