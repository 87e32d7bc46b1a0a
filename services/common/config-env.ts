/**
 * Environment variables that override the config file, as one table: the
 * loader applies it, and docs/configuration.md's reference is generated from
 * it, so a variable cannot work without being documented or the other way
 * round.
 */
import { parse as parseYaml } from 'yaml';
import { ConfigError, terminalSchema } from './config.js';

/** One variable: the key it sets and how its text becomes the value. */
export interface EnvVariable {
  readonly name: string;
  /** Dotted key it sets (`terminal.backend`, `tenants`). */
  readonly key: string;
  /** Text to value; absent: the text as is (the schema coerces it). */
  readonly parse?: (text: string) => unknown;
  /** An empty value is ignored (true for every variable but TERMINAL_*). */
  readonly ignoreEmpty: boolean;
  /** What the reference says about the value's form, when it is not the key's own. */
  readonly form?: string;
}

/** JSON where it parses (env values cannot nest), else the text for the schema to judge. */
function jsonOrText(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * `BERTH_TENANTS`: the whole `tenants:` list as YAML or JSON, replacing the file's. It lets the key hashes
 * live in a secret store (a Kubernetes Secret) while the rest of the config sits in a plain file.
 */
function tenantsFromEnv(text: string): unknown {
  let value: unknown;
  try {
    value = parseYaml(text);
  } catch (err) {
    throw new ConfigError(`BERTH_TENANTS is not valid YAML: ${(err as Error).message}`);
  }
  if (!Array.isArray(value)) {
    throw new ConfigError('BERTH_TENANTS must hold a YAML list of tenants (- id: NAME, api_key_sha256: HEX), or [] for none');
  }
  return value;
}

const trimmed = (text: string) => text.trim();
const lowerCase = (text: string) => text.trim().toLowerCase();

function terminalVariable(key: string): EnvVariable {
  const name = `TERMINAL_${key.toUpperCase()}`;
  if (key === 'docker_env') return { name, key: 'terminal.docker_env', parse: jsonOrText, ignoreEmpty: false, form: 'a JSON object' };
  if (key === 'docker_extra_args') {
    // Docker flags may contain commas (--tmpfs=/c:size=1g,exec), so a JSON array is accepted too.
    return {
      name,
      key: 'terminal.docker_extra_args',
      parse: (text) => (text.trimStart().startsWith('[') ? jsonOrText(text) : text),
      ignoreEmpty: false,
      form: 'a JSON array, or comma-separated',
    };
  }
  return { name, key: `terminal.${key}`, ignoreEmpty: false };
}

const plain = (name: string, key: string): EnvVariable => ({ name, key, ignoreEmpty: true });

/**
 * Every variable, in the order they apply: a later one setting the same key
 * wins (the trace-specific OTEL names after the general ones).
 */
export const ENV_VARIABLES: readonly EnvVariable[] = [
  { name: 'TERMINAL_ENV', key: 'terminal.backend', ignoreEmpty: false },
  ...Object.keys(terminalSchema.shape).map(terminalVariable),
  plain('BERTH_HOST', 'server.host'),
  plain('BERTH_PORT', 'server.port'),
  plain('BERTH_LOG_LEVEL', 'log_level'),
  plain('BERTH_STATE_ROOT', 'executor.state_root'),
  plain('BERTH_EXECUTOR_SECRET', 'executor.shared_secret'),
  plain('BERTH_CODE_CONTAINER', 'code_execution.code_container'),
  { name: 'HERMES_TIMEZONE', key: 'timezone', parse: trimmed, ignoreEmpty: true },
  {
    name: 'HERMES_REDACT_SECRETS',
    key: 'security.redact_secrets',
    // Upstream's switch: only 1, true, yes and on (any case) keep redaction on.
    parse: (text) => ['1', 'true', 'yes', 'on'].includes(lowerCase(text)),
    ignoreEmpty: true,
    form: '1, true, yes or on keep it on; anything else turns it off',
  },
  { name: 'BERTH_TENANTS', key: 'tenants', parse: tenantsFromEnv, ignoreEmpty: true, form: 'the whole list as YAML, replacing the file\'s' },
  plain('BERTH_DOCKER_NETWORK', 'docker.network'),
  plain('BERTH_METRICS_ENABLED', 'metrics.enabled'),
  plain('BERTH_METRICS_HOST', 'metrics.host'),
  plain('BERTH_METRICS_PORT', 'metrics.port'),
  plain('BERTH_METRICS_EXECUTOR_PORT', 'metrics.executor_port'),
  { name: 'OTEL_TRACES_EXPORTER', key: 'tracing.exporter', parse: lowerCase, ignoreEmpty: true },
  { name: 'OTEL_EXPORTER_OTLP_PROTOCOL', key: 'tracing.protocol', parse: trimmed, ignoreEmpty: true },
  { name: 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', key: 'tracing.protocol', parse: trimmed, ignoreEmpty: true },
  { name: 'OTEL_SERVICE_NAME', key: 'tracing.service_name', parse: trimmed, ignoreEmpty: true },
  { name: 'OTEL_TRACES_SAMPLER', key: 'tracing.sampler', parse: lowerCase, ignoreEmpty: true },
  { name: 'OTEL_TRACES_SAMPLER_ARG', key: 'tracing.sampler_arg', parse: trimmed, ignoreEmpty: true },
  { name: 'OTEL_RESOURCE_ATTRIBUTES', key: 'tracing.resource_attributes', parse: trimmed, ignoreEmpty: true },
  { name: 'BERTH_TRACING_TASK_IDS', key: 'tracing.task_ids', parse: trimmed, ignoreEmpty: true },
  {
    // The general endpoint is a base URL the signal's path is appended to; the traces one is used as is.
    name: 'OTEL_EXPORTER_OTLP_ENDPOINT',
    key: 'tracing.endpoint',
    parse: (text) => `${text.trim().replace(/\/+$/, '')}/v1/traces`,
    ignoreEmpty: true,
    form: 'a base URL; /v1/traces is appended',
  },
  { name: 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', key: 'tracing.endpoint', parse: trimmed, ignoreEmpty: true },
  {
    name: 'OTEL_SDK_DISABLED',
    key: 'tracing.exporter',
    parse: () => 'none',
    ignoreEmpty: true,
    form: '`true` turns tracing off, whatever else is set',
  },
];

/** OTEL_SDK_DISABLED acts only when it says true. */
function applies(variable: EnvVariable, value: string): boolean {
  if (variable.name === 'OTEL_SDK_DISABLED') return lowerCase(value) === 'true';
  return !variable.ignoreEmpty || value.trim() !== '';
}

function setPath(target: Record<string, unknown>, path: readonly string[], value: unknown): void {
  let node = target;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) node[key] = {};
    node = node[key] as Record<string, unknown>;
  }
  node[path[path.length - 1]!] = value;
}

/** Applies environment overrides to a raw (unvalidated) config object. */
export function applyEnvOverrides(raw: Record<string, unknown>, env: NodeJS.ProcessEnv): Record<string, unknown> {
  const out = structuredClone(raw);
  for (const variable of ENV_VARIABLES) {
    const value = env[variable.name];
    if (value === undefined || !applies(variable, value)) continue;
    setPath(out, variable.key.split('.'), variable.parse ? variable.parse(value) : value);
  }
  return out;
}
