/**
 * Per-tenant approval policy: `approvals.*` with the tenant's overrides from
 * `tenants[].approvals`, and the permanent allowlists. The top-level
 * `command_allowlist` is the operator's and applies to every tenant; a
 * tenant's own list adds to it and is where that tenant's "always" answers go.
 * In single-user mode (no tenants) the top-level list is the user's own.
 */
import type { BerthConfig } from '../../../common/config.js';
import type { AllowlistLocation } from '../storage/allowlist-writer.js';

export type ApprovalMode = BerthConfig['approvals']['mode'];

export interface ApprovalPolicy {
  readonly mode: ApprovalMode;
  /** How long an ask waits for an answer, and how long a parked unary call stays answerable. */
  readonly timeoutMs: number;
  /** Skip approval on backends without host filesystem access. */
  readonly skipInContainers: boolean;
  /** What a non-interactive context does with a command that needs approval. */
  readonly nonInteractive: 'approve' | 'deny';
  readonly allowYolo: boolean;
  /** Unary calls parked for Approve at once, per tenant. */
  readonly maxPending: number;
  /** Consecutive smart-approval denials from which refusals carry the circuit-breaker text. */
  readonly denialBreakerThreshold: number;
}


type PolicyConfig = Pick<BerthConfig, 'approvals' | 'tenants' | 'command_allowlist'>;

export class ApprovalPolicies {
  readonly #base: ApprovalPolicy;
  readonly #tenants = new Map<string, ApprovalPolicy>();
  readonly #operatorList: string[];
  readonly #tenantLists = new Map<string, string[]>();
  readonly #operatorDeny: readonly string[];
  readonly #tenantDeny = new Map<string, readonly string[]>();
  readonly #multiTenant: boolean;

  constructor(config: PolicyConfig) {
    const a = config.approvals;
    this.#base = {
      mode: a.mode,
      timeoutMs: a.timeout * 1000,
      skipInContainers: a.skip_in_containers,
      nonInteractive: a.non_interactive,
      allowYolo: a.allow_yolo,
      maxPending: a.max_pending,
      denialBreakerThreshold: a.denial_breaker_threshold,
    };
    this.#operatorList = [...config.command_allowlist];
    this.#operatorDeny = denyGlobs(a.deny);
    this.#multiTenant = config.tenants.length > 0;
    for (const t of config.tenants) {
      const o = t.approvals ?? {};
      this.#tenants.set(t.id, {
        mode: o.mode ?? this.#base.mode,
        timeoutMs: o.timeout === undefined ? this.#base.timeoutMs : o.timeout * 1000,
        skipInContainers: o.skip_in_containers ?? this.#base.skipInContainers,
        nonInteractive: o.non_interactive ?? this.#base.nonInteractive,
        allowYolo: o.allow_yolo ?? this.#base.allowYolo,
        maxPending: this.#base.maxPending,
        denialBreakerThreshold: o.denial_breaker_threshold ?? this.#base.denialBreakerThreshold,
      });
      this.#tenantLists.set(t.id, [...(o.command_allowlist ?? [])]);
      this.#tenantDeny.set(t.id, [...this.#operatorDeny, ...denyGlobs(o.deny ?? [])]);
    }
  }

  policyFor(tenant: string): ApprovalPolicy {
    return this.#tenants.get(tenant) ?? this.#base;
  }

  /** The entries that approve commands for this tenant: the operator's, then the tenant's. */
  allowlistFor(tenant: string): readonly string[] {
    const own = this.#tenantLists.get(tenant);
    return own === undefined ? this.#operatorList : [...this.#operatorList, ...own];
  }

  /** `approvals.deny` globs for this tenant: the operator's, then the tenant's own. */
  denyFor(tenant: string): readonly string[] {
    return this.#tenantDeny.get(tenant) ?? this.#operatorDeny;
  }

  /** Where this tenant's "always" answers are written. */
  locationFor(tenant: string): AllowlistLocation {
    if (!this.#multiTenant) return { kind: 'top-level' };
    return { kind: 'tenant', tenant };
  }

  /** Adds keys to the tenant's list in memory (effective at once); returns those that were new. */
  addToAllowlist(tenant: string, keys: readonly string[]): string[] {
    const location = this.locationFor(tenant);
    let list = location.kind === 'top-level' ? this.#operatorList : this.#tenantLists.get(tenant);
    if (list === undefined) {
      list = [];
      this.#tenantLists.set(tenant, list);
    }
    const added = keys.filter((k) => !list.includes(k));
    list.push(...added);
    return added;
  }
}

/** Trimmed, non-empty entries, as upstream reads `approvals.deny`. */
function denyGlobs(entries: readonly string[]): string[] {
  return entries.map((e) => e.trim()).filter((e) => e !== '');
}
