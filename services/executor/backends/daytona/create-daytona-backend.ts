/**
 * The daytona backend from config: `terminal.daytona_image`, the container
 * keys, env passthrough, and the network policy (`docker.network`,
 * `docker.egress`, `docker.egress_allow`, `tenants[].network`) mapped onto
 * Daytona's `networkBlockAll` / `networkAllowList`; the executor's state
 * root (snapshot records) and shared secret (it keys the names of Daytona
 * snapshots). Credentials are not
 * config: the SDK reads DAYTONA_API_KEY, DAYTONA_API_URL and DAYTONA_TARGET
 * from the executor's environment.
 */
import path from 'node:path';
import type { BerthConfig, EgressMode } from '../../../common/config.js';
import type { Logger } from '../../../common/logging.js';
import type { DiagnosticFinding } from '../../backend.js';
import { executorStateDir } from '../shared/state-root.js';
import { DaytonaBackend, type DaytonaBackendOptions, type DaytonaNetwork } from './daytona-backend.js';

/** A tenant's network policy and what of it Daytona cannot enforce. */
export interface DaytonaNetworkPlan {
  readonly network: DaytonaNetwork;
  /** Set when part of the policy has no Daytona equivalent: what, and what applies instead. */
  readonly unenforced?: string;
}

/**
 * Maps a network policy onto Daytona's settings. Daytona can block all
 * egress or allow only a list of CIDR ranges; it has no deny list, so
 * `public-only` (everything but private ranges) cannot be expressed: the
 * sandbox then has Daytona's default network, and `unenforced` says so.
 */
export function daytonaNetworkPlan(
  mode: 'none' | 'isolated' | 'bridge',
  egress: EgressMode,
  egressAllow: readonly string[],
): DaytonaNetworkPlan {
  if (mode === 'none') return { network: { networkBlockAll: true } };
  if (mode === 'bridge' || egress === 'open') return { network: {} };
  if (egress === 'none') {
    return egressAllow.length > 0 ? { network: { networkAllowList: egressAllow.join(',') } } : { network: { networkBlockAll: true } };
  }
  return {
    network: {},
    unenforced:
      "docker.egress public-only: Daytona has no way to block only private ranges, so the sandbox gets Daytona's " +
      'default network (use egress none, with egress_allow for the ranges to open, to restrict it)',
  };
}

/** The network plan of one tenant under `config`. */
export function tenantNetworkPlan(config: BerthConfig, tenant: string): DaytonaNetworkPlan {
  const d = config.docker;
  const override = config.tenants.find((t) => t.id === tenant)?.network;
  return daytonaNetworkPlan(d.network, override?.egress ?? d.egress, override?.egress_allow ?? d.egress_allow);
}

/** Values of the `env_passthrough` names, never Daytona's own credentials. */
export function sandboxEnv(names: readonly string[], base: Readonly<Record<string, string | undefined>>): Record<string, string> {
  const env: Record<string, string> = { LANG: 'C.UTF-8' };
  for (const name of names) {
    const value = base[name];
    if (value !== undefined && !name.toUpperCase().startsWith('DAYTONA_')) env[name] = value;
  }
  return env;
}

/** What `berth doctor` says of each configured tenant's network policy (a part Daytona cannot apply is logged at start instead). */
export function daytonaNetworkFindings(config: BerthConfig): DiagnosticFinding[] {
  const tenants = config.tenants.length > 0 ? config.tenants.map((t) => t.id) : ['default'];
  const findings: DiagnosticFinding[] = [];
  for (const tenant of tenants) {
    const { network, unenforced } = tenantNetworkPlan(config, tenant);
    const who = config.tenants.length > 0 ? `tenant ${tenant}: ` : '';
    if (unenforced) continue;
    const text = network.networkBlockAll
      ? `${who}network policy applied as Daytona's networkBlockAll (no egress)`
      : network.networkAllowList
        ? `${who}network policy applied as Daytona's networkAllowList (${network.networkAllowList})`
        : `${who}network policy: egress open, Daytona's default network`;
    findings.push({ verdict: 'ok', text });
  }
  return findings;
}

export function daytonaOptionsFromConfig(config: BerthConfig, logger?: Logger): DaytonaBackendOptions {
  const t = config.terminal;
  return {
    image: t.daytona_image,
    persistent: t.container_persistent,
    cpus: t.container_cpu,
    memoryMiB: t.container_memory,
    env: sandboxEnv(t.env_passthrough, process.env),
    network: (tenant) => tenantNetworkPlan(config, tenant).network,
    networkFindings: () => daytonaNetworkFindings(config),
    stateDir: path.join(executorStateDir(config.executor.state_root), 'daytona'),
    nameSecret: config.executor.shared_secret,
    ...(logger ? { logger } : {}),
  };
}

export async function createDaytonaBackend(config: BerthConfig, logger: Logger): Promise<DaytonaBackend> {
  // Said once at start, per tenant whose policy Daytona cannot apply in full.
  const tenants = config.tenants.length > 0 ? config.tenants.map((t) => t.id) : ['default'];
  for (const tenant of tenants) {
    const plan = tenantNetworkPlan(config, tenant);
    if (plan.unenforced) logger.warn({ tenant }, `daytona backend: ${plan.unenforced}`);
  }
  return DaytonaBackend.start(daytonaOptionsFromConfig(config, logger));
}
