/** Reads a configuration: the YAML file, the environment overrides on top, then validation naming every problem. */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { cidrContains, cidrOverlaps, parseCidr } from './cidr.js';
import { applyEnvOverrides } from './config-env.js';
import { ConfigError, configSchema, EGRESS_MODES, type BerthConfig } from './config.js';

/** Validates a raw object; throws ConfigError listing every problem. */
export function parseConfig(raw: unknown, source = 'config'): BerthConfig {
  const result = configSchema.safeParse(raw ?? {});
  if (!result.success) {
    throw new ConfigError(`invalid ${source}:\n${z.prettifyError(result.error)}`);
  }
  const config = result.data;
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const t of config.tenants) {
    if (seen.has(t.id)) problems.push(`tenants: duplicate id '${t.id}'`);
    seen.add(t.id);
  }
  if (config.tenants.length > 0 && config.terminal.backend === 'local' && !config.allow_local_multi_tenant) {
    problems.push(
      'terminal.backend: local runs commands on the host with no isolation; with tenants configured choose a ' +
        'container backend, or set allow_local_multi_tenant: true to accept that',
    );
  }
  const smartUsers = [config.approvals.mode, ...config.tenants.map((t) => t.approvals?.mode)].includes('smart');
  const { base_url: smartUrl, model: smartModel } = config.approvals.smart;
  if (smartUsers && (smartUrl === '' || smartModel === '')) {
    problems.push("approvals.smart: mode 'smart' needs approvals.smart.base_url and approvals.smart.model");
  }
  if (config.executor.tls && config.executor.tls.client_ca_file === undefined) {
    problems.push('executor.tls.client_ca_file: an executor runs commands for whoever connects; name the CA that signs dispatchers\' client certificates');
  }
  if (config.terminal.backend === 'singularity' && config.terminal.singularity_image === '') {
    problems.push('terminal.singularity_image: the singularity backend needs it (a SIF path or docker://IMAGE)');
  }
  if (config.terminal.backend === 'daytona' && config.terminal.daytona_image === '') {
    problems.push('terminal.daytona_image: the daytona backend needs it (an image Daytona can pull, e.g. python:3.12-slim)');
  }
  if (config.terminal.backend === 'modal' && config.terminal.modal_image === '') {
    problems.push('terminal.modal_image: the modal backend needs it (a registry image with python3 and bash, e.g. python:3.12-slim)');
  }
  if (config.terminal.backend === 'kubernetes' && config.terminal.kubernetes_image === '') {
    problems.push('terminal.kubernetes_image: the kubernetes backend needs it (an image the cluster can pull, with bash and python3, e.g. berth-sandbox)');
  }
  if (config.terminal.backend === 'ssh') {
    for (const key of ['ssh_host', 'ssh_user', 'ssh_key'] as const) {
      if (config.terminal[key] === '') problems.push(`terminal.${key}: the ssh backend needs it`);
    }
  }
  // A container quota below one container's limits would refuse every task, which is a config mistake.
  for (const [where, q] of [['quotas', config.quotas] as const, ...config.tenants.map((t) => [`tenants[${t.id}].quotas`, t.quotas] as const)]) {
    if (q?.max_memory_mb !== undefined && q.max_memory_mb < config.terminal.container_memory && config.terminal.backend !== 'local') {
      problems.push(`${where}.max_memory_mb: ${q.max_memory_mb} is below one container's terminal.container_memory (${config.terminal.container_memory})`);
    }
    if (q?.max_cpus !== undefined && q.max_cpus < config.terminal.container_cpu && config.terminal.backend !== 'local') {
      problems.push(`${where}.max_cpus: ${q.max_cpus} is below one container's terminal.container_cpu (${config.terminal.container_cpu})`);
    }
  }
  problems.push(...tenantNetworkProblems(config));
  if (problems.length > 0) throw new ConfigError(`invalid ${source}:\n${problems.map((p) => `✖ ${p}`).join('\n')}`);
  return config;
}

/** A tenant's network policy may narrow the operator's, never widen it; each widening is named by its key. */
function tenantNetworkProblems(config: BerthConfig): string[] {
  const problems: string[] = [];
  const { network, egress, egress_allow: allow } = config.docker;
  const operatorAllow = allow.map((c) => parseCidr(c)!);
  const linkLocal = [parseCidr('169.254.0.0/16')!, parseCidr('fe80::/10')!];
  const widen = 'a tenant can narrow the operator\'s network policy, never widen it';
  for (const t of config.tenants) {
    if (!t.network) continue;
    const key = `tenants[${t.id}].network`;
    if (network !== 'isolated') {
      problems.push(`${key}: needs docker.network: isolated (it is ${network}, where no per-tenant policy is enforced)`);
      continue;
    }
    if (t.network.egress && EGRESS_MODES.indexOf(t.network.egress) > EGRESS_MODES.indexOf(egress)) {
      problems.push(`${key}.egress: ${t.network.egress} is wider than docker.egress (${egress}); ${widen}`);
    }
    for (const text of t.network.egress_allow ?? []) {
      const cidr = parseCidr(text)!;
      const inside = operatorAllow.some((o) => cidrContains(o, cidr)) ||
        (egress === 'open' && !linkLocal.some((l) => cidrOverlaps(l, cidr)));
      if (!inside) problems.push(`${key}.egress_allow: ${text} is not inside docker.egress_allow; ${widen}`);
    }
  }
  return problems;
}

/**
 * Loads the YAML file (if any), applies env overrides and validates.
 * `path` undefined and no BERTH_CONFIG: defaults only.
 */
export function loadConfig(path: string | undefined, env: NodeJS.ProcessEnv = process.env): BerthConfig {
  const file = path ?? env.BERTH_CONFIG;
  let raw: unknown = {};
  if (file) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new ConfigError(`cannot read config file ${file}: ${(err as Error).message}`);
    }
    try {
      raw = parseYaml(text) ?? {};
    } catch (err) {
      throw new ConfigError(`config file ${file} is not valid YAML: ${(err as Error).message}`);
    }
    if (typeof raw !== 'object' || Array.isArray(raw)) {
      throw new ConfigError(`config file ${file} must hold a YAML mapping at the top level`);
    }
  }
  return parseConfig(applyEnvOverrides(raw as Record<string, unknown>, env), file ?? 'configuration');
}
