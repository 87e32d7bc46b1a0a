/**
 * Each tenant's effective quotas: the top-level `quotas` with the tenant's
 * own `tenants[].quotas` keys on top. Without tenants, the single `default`
 * tenant gets the top-level quotas.
 */
import type { BerthConfig, QuotasConfig } from '../../common/config.js';

/** Whether any tenant has any quota (no quotas: the dispatcher keeps no ledger at all). */
export function anyQuota(config: Pick<BerthConfig, 'quotas' | 'tenants'>): boolean {
  const set = (q: QuotasConfig | undefined) => q !== undefined && Object.values(q).some((v) => v !== undefined);
  return set(config.quotas) || config.tenants.some((t) => set(t.quotas));
}

export function quotaResolver(config: Pick<BerthConfig, 'quotas' | 'tenants'>): (tenant: string) => QuotasConfig {
  const byTenant = new Map<string, QuotasConfig>(
    config.tenants.map((t) => [t.id, { ...config.quotas, ...stripUndefined(t.quotas ?? {}) }]),
  );
  return (tenant) => byTenant.get(tenant) ?? config.quotas;
}

function stripUndefined(q: QuotasConfig): QuotasConfig {
  return Object.fromEntries(Object.entries(q).filter(([, v]) => v !== undefined)) as QuotasConfig;
}
