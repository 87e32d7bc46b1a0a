/**
 * Configuration: one YAML file, validated once at start by zod, with
 * `TERMINAL_*` / `BERTH_*` environment overrides. Nothing else in Berth reads
 * `process.env` for settings; mains parse this and pass it down.
 */
import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { cidrContains, cidrOverlaps, parseCidr } from './cidr.js';

const bool = z.union([z.boolean(), z.stringbool()]);
const int = (min: number) => z.coerce.number().int().min(min);

/** True for '' (unset) or a time zone name this runtime knows (`UTC`, `Europe/Berlin`, `Etc/GMT+5`). */
function isTimeZoneName(name: string): boolean {
  if (name === '') return true;
  if (!/^[A-Za-z0-9_+-]+(?:\/[A-Za-z0-9_+-]+){0,2}$/.test(name)) return false;
  try {
    new Intl.DateTimeFormat('en', { timeZone: name });
    return true;
  } catch {
    return false;
  }
}
const stringList = z.preprocess(
  (v) => (typeof v === 'string' ? v.split(',').map((s) => s.trim()).filter(Boolean) : v),
  z.array(z.string()),
);

export const BACKEND_NAMES = ['local', 'docker', 'ssh', 'singularity', 'modal', 'daytona'] as const;
export type BackendName = (typeof BACKEND_NAMES)[number];

/** `terminal.*` keys, named as the tool-runtime spec names them. */
const terminalSchema = z
  .object({
    backend: z.enum(BACKEND_NAMES).default('local'),
    /** Starting directory of new tasks ('' = the executor's working directory). */
    cwd: z.string().default(''),
    timeout: int(1).default(180),
    max_foreground_timeout: int(1).default(600),
    lifetime_seconds: int(1).default(300),
    max_output_chars: int(1000).default(50_000),
    env_passthrough: stringList.default([]),
    persistent_shell: bool.default(true),
    docker_image: z.string().default('berth-sandbox:latest'),
    singularity_image: z.string().default(''),
    modal_image: z.string().default(''),
    daytona_image: z.string().default(''),
    docker_env: z.record(z.string(), z.string()).default({}),
    docker_volumes: stringList.default([]),
    docker_extra_args: stringList.default([]),
    docker_forward_env: stringList.default([]),
    ssh_host: z.string().default(''),
    ssh_user: z.string().default(''),
    ssh_port: int(1).max(65535).default(22),
    ssh_key: z.string().default(''),
    /** known_hosts file for host-key pinning ('' = Berth's own under the state root). */
    ssh_known_hosts: z.string().default(''),
    /** accept-new pins a host's key on first contact and refuses a changed key; strict needs it known. */
    ssh_host_key_policy: z.enum(['strict', 'accept-new']).default('accept-new'),
    ssh_connect_timeout: int(1).default(10),
    singularity_binary: z.string().default(''),
    container_cpu: z.coerce.number().positive().default(1),
    container_memory: int(64).default(5120),
    container_disk: int(1).default(51200),
    /** Process limit of each container (docker PidsLimit; apptainer has no per-instance one). */
    container_pids: int(8).default(256),
    container_persistent: bool.default(true),
  })
  .strict();

const file = z.string().min(1);
/** TLS of a gRPC server (`server.tls`, `executor.tls`); with client_ca_file, clients need a certificate it signed (mTLS). */
const serverTlsSchema = z.object({ cert_file: file, key_file: file, client_ca_file: file.optional() }).strict();
/** The dispatcher's TLS to one executor: the CA it trusts the executor by, its own client certificate. */
const executorClientTlsSchema = z
  .object({ ca_file: file.optional(), cert_file: file, key_file: file, server_name: z.string().min(1).optional() })
  .strict();

const executorEndpointSchema = z
  .object({
    address: z.string().min(1),
    backend: z.enum(BACKEND_NAMES),
    tls: executorClientTlsSchema.optional(),
  })
  .strict();

/** OTEL_TRACES_SAMPLER values Berth builds (the OpenTelemetry SDK's standard set). */
export const TRACE_SAMPLERS = [
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
  'always_on',
  'always_off',
  'traceidratio',
] as const;

/** Executors found by DNS: every A/AAAA record of `dns` (a headless Service, a compose service) on `port`. */
const executorDiscoverySchema = z
  .object({
    dns: z.string().min(1),
    port: int(1).max(65535).default(7701),
    backend: z.enum(BACKEND_NAMES),
    tls: executorClientTlsSchema.optional(),
  })
  .strict();

export const APPROVAL_MODES = ['manual', 'smart', 'off'] as const;
export const CODE_CONTAINER_SETTINGS = ['auto', 'docker', 'off'] as const;
export const DISK_LIMIT_MODES = ['auto', 'require', 'off'] as const;
export type DiskLimitMode = (typeof DISK_LIMIT_MODES)[number];
export type CodeContainerSetting = (typeof CODE_CONTAINER_SETTINGS)[number];
const nonInteractiveAction = z.enum(['approve', 'deny']);
/** Network policy of `docker.network: isolated`, narrowest first (see network-policy.ts). */
export const EGRESS_MODES = ['none', 'public-only', 'open'] as const;
export type EgressMode = (typeof EGRESS_MODES)[number];
/** Web providers by capability (services/dispatcher/web). */
export const WEB_SEARCH_BACKENDS = ['searxng', 'tavily'] as const;
export const WEB_EXTRACT_BACKENDS = ['tavily', 'http'] as const;
export const WEB_BACKENDS = ['searxng', 'tavily', 'http'] as const;
export type WebBackendName = (typeof WEB_BACKENDS)[number];
const cidrList = z.array(z.string().refine((s) => parseCidr(s) !== undefined, 'not a CIDR range (10.20.0.0/16, fd00::/8)'));
/** `tenants[].network`: narrows `docker.egress` / `docker.egress_allow` for one tenant (absent keys inherit). */
const tenantNetworkSchema = z.object({ egress: z.enum(EGRESS_MODES).optional(), egress_allow: cidrList.optional() }).strict();

/** `tenants[].approvals`: per-tenant overrides of `approvals.*` (absent keys inherit). */
const tenantApprovalsSchema = z
  .object({
    mode: z.enum(APPROVAL_MODES).optional(),
    timeout: int(1).optional(),
    skip_in_containers: bool.optional(),
    non_interactive: nonInteractiveAction.optional(),
    allow_yolo: bool.optional(),
    /** Added to the top-level command_allowlist for this tenant only; "always" answers are written here. */
    command_allowlist: z.array(z.string()).optional(),
    /** Added to `approvals.deny` for this tenant only. */
    deny: z.array(z.string()).optional(),
    denial_breaker_threshold: int(1).optional(),
  })
  .strict();

/** `quotas` and `tenants[].quotas`: per-tenant limits; an absent key is unlimited (see README "Quotas"). */
const quotasSchema = z
  .object({
    max_tasks: int(1).optional(),
    max_concurrent_calls: int(1).optional(),
    calls_per_minute: int(1).optional(),
    max_execute_code: int(1).optional(),
    max_memory_mb: int(1).optional(),
    max_cpus: z.coerce.number().positive().optional(),
  })
  .strict();
export type QuotasConfig = z.infer<typeof quotasSchema>;

const tenantSchema = z
  .object({
    id: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'tenant id: 1-64 of A-Z a-z 0-9 _ . -'),
    /** SHA-256 (hex) of the tenant's API key; keys are never stored in clear. */
    api_key_sha256: z.string().regex(/^[0-9a-f]{64}$/, 'api_key_sha256: 64 lowercase hex digits'),
    allowed_backends: z.array(z.enum(BACKEND_NAMES)).optional(),
    toolsets: z.array(z.string()).optional(),
    approvals: tenantApprovalsSchema.optional(),
    /** Overrides of the top-level `quotas`, key by key. */
    quotas: quotasSchema.optional(),
    network: tenantNetworkSchema.optional(),
  })
  .strict();

export const configSchema = z
  .object({
    server: z
      .object({
        host: z.string().default('127.0.0.1'),
        port: int(0).max(65535).default(7700),
        /** Grace period for in-flight calls on shutdown before they are cancelled. */
        shutdown_grace_ms: int(0).default(2000),
        tls: serverTlsSchema.optional(),
      })
      .strict()
      .prefault({}),
    log_level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    terminal: terminalSchema.prefault({}),
    docker: z
      .object({
        /** Started containers kept ready per image, so a new task's first call skips the cold start. */
        warm_pool: int(0).max(64).default(0),
        /** OCI runtime: '' = Docker's default (runc); 'runsc' = gVisor. */
        runtime: z.string().default(''),
        /** isolated: Berth's own bridge, no traffic between containers or to the host, egress per `egress`. */
        network: z.enum(['none', 'isolated', 'bridge']).default('isolated'),
        egress: z.enum(EGRESS_MODES).default('public-only'),
        /** Ranges opened under `isolated` although private (an internal package mirror). */
        egress_allow: cidrList.default([]),
        read_only_root: bool.default(false),
        /** Docker API socket ('' = DOCKER_HOST or /var/run/docker.sock). */
        socket_path: z.string().default(''),
        /**
         * terminal.container_disk where the daemon's storage cannot enforce it: auto = run without it and
         * warn once; require = refuse to create containers; off = never ask Docker for a disk limit.
         */
        disk_limit: z.enum(DISK_LIMIT_MODES).default('auto'),
      })
      .strict()
      .prefault({}),
    approvals: z
      .object({
        mode: z.enum(APPROVAL_MODES).default('manual'),
        /** Seconds to wait for a user's answer; silence denies. */
        timeout: int(1).default(300),
        /** Container backends without host bind mounts skip approval (the container is the boundary). */
        skip_in_containers: bool.default(true),
        /** A non-interactive context (client metadata `berth-interactive: false`): approve, or deny (cron-like). */
        non_interactive: nonInteractiveAction.default('approve'),
        /** Whether Session clients may put a session in yolo mode (no approval; hardline still blocks). */
        allow_yolo: bool.default(true),
        /** Unary calls parked for the Approve RPC, per tenant; each waits at most `timeout` seconds. */
        max_pending: int(1).default(32),
        /** Globs (fnmatch, case-insensitive) of commands never run, whatever the mode, yolo or allowlist says. */
        deny: z.array(z.string()).default([]),
        /** Consecutive smart-approval denials after which refusals tell the model to stop (upstream's default 3). */
        denial_breaker_threshold: int(1).default(3),
        smart: z
          .object({
            base_url: z.string().default(''),
            model: z.string().default(''),
            /** Name of the environment variable that holds the API key (never the key itself). */
            api_key_env: z.string().default('BERTH_SMART_APPROVAL_API_KEY'),
            timeout: int(1).default(30),
          })
          .strict()
          .prefault({}),
      })
      .strict()
      .prefault({}),
    /** Permanently approved commands or pattern keys (exact text or glob); written by "always". */
    command_allowlist: z.array(z.string()).default([]),
    code_execution: z
      .object({
        mode: z.enum(['project', 'strict']).default('project'),
        timeout: int(1).default(300),
        max_tool_calls: int(1).default(50),
        max_stdout_bytes: int(1000).default(50_000),
        max_stderr_bytes: int(100).default(10_000),
        /**
         * Backends whose environments share no directory with the executor (ssh, singularity) run
         * scripts in a per-task docker code container: `auto` when Docker answers, `docker` requires
         * it (the executor fails at start without it), `off` refuses execute_code there.
         */
        code_container: z.enum(CODE_CONTAINER_SETTINGS).default('auto'),
      })
      .strict()
      .prefault({}),
    executor: z
      .object({
        host: z.string().default('127.0.0.1'),
        port: int(0).max(65535).default(7701),
        /** Shared secret between dispatcher and executors ('' = none; loopback/dev only). */
        shared_secret: z.string().default(''),
        /** Root for per-task state dirs of the local backend ('' = OS temp dir). */
        state_root: z.string().default(''),
        /** The executor's own server certificate; client_ca_file is required: dispatchers must present a certificate. */
        tls: serverTlsSchema.optional(),
        /** On SIGTERM: how long calls in flight may finish (no new tasks meanwhile) before environments are released. */
        drain_grace_ms: int(0).default(30_000),
      })
      .strict()
      .prefault({}),
    /**
     * Prometheus metrics on http://HOST:PORT/metrics. One endpoint per process: `berth serve` (dispatcher
     * and executor together) and `berth dispatcher` use `port`, `berth executor` uses `executor_port`,
     * so a dispatcher and an executor on one host do not clash.
     */
    metrics: z
      .object({
        enabled: bool.default(false),
        host: z.string().default('127.0.0.1'),
        port: int(0).max(65535).default(9464),
        executor_port: int(0).max(65535).default(9465),
        /** Adds a `tenant` label to the quota gauges (one series per tenant: bounded by the config's tenants). */
        tenant_labels: bool.default(false),
      })
      .strict()
      .prefault({}),
    /**
     * OpenTelemetry traces (README "Tracing"), normally set by the standard OTEL_* variables
     * (see OTEL_ENV below); off unless an exporter is named.
     */
    tracing: z
      .object({
        exporter: z.enum(['none', 'otlp'], {
          error: 'OTEL_TRACES_EXPORTER (tracing.exporter): otlp or none; other exporters are not built in',
        }).default('none'),
        /** Where spans are POSTed ('' = http://localhost:4318/v1/traces, the OTLP default). */
        endpoint: z.union([z.literal(''), z.url({ protocol: /^https?$/, error: 'tracing.endpoint: an http(s) URL' })]).default(''),
        protocol: z.enum(['http/protobuf'], {
          error: 'OTEL_EXPORTER_OTLP_PROTOCOL (tracing.protocol): only http/protobuf is built in; set it to http/protobuf',
        }).default('http/protobuf'),
        /** '' = berth (serve), berth-dispatcher, berth-executor. */
        service_name: z.string().default(''),
        sampler: z.enum(TRACE_SAMPLERS, { error: `OTEL_TRACES_SAMPLER (tracing.sampler): one of ${TRACE_SAMPLERS.join(', ')}` })
          .default('parentbased_always_on'),
        /** The ratio of the traceidratio samplers. */
        sampler_arg: z.coerce.number().min(0).max(1).default(1),
        /** OTEL_RESOURCE_ATTRIBUTES: key=value,key=value (percent-encoded values). */
        resource_attributes: z.string().default(''),
        /** Adds berth.task.id to spans; off by default, since task ids may carry user data. */
        task_ids: bool.default(false),
      })
      .strict()
      .prefault({}),
    /**
     * web_search / web_extract providers (README "Web tools"). Credentials and instance URLs come from the
     * dispatcher's environment (TAVILY_API_KEY, SEARXNG_URL, ...), never from this file.
     */
    web: z
      .object({
        /** Provider for both tools where it supports them ('' = pick by which variables are set). */
        backend: z.enum(['', ...WEB_BACKENDS]).default(''),
        search_backend: z.enum(['', ...WEB_SEARCH_BACKENDS]).default(''),
        /** http: the dispatcher fetches pages itself (public addresses only); only used when named. */
        extract_backend: z.enum(['', ...WEB_EXTRACT_BACKENDS]).default(''),
        /** Ranges the http extractor may fetch although private (an intranet wiki); loopback needs naming too. */
        egress_allow: cidrList.default([]),
        /** Seconds one page fetch of the http extractor may take, redirects included. */
        timeout: int(1).default(20),
      })
      .strict()
      .prefault({}),
    /**
     * Secret masking of tool output, as upstream's `security.redact_secrets`: terminal and process output,
     * read_file content and search_files matches. On by default; env HERMES_REDACT_SECRETS.
     */
    security: z
      .object({
        redact_secrets: bool.default(true),
      })
      .strict()
      .prefault({}),
    /** Quota defaults for every tenant (the single `default` tenant without tenants). */
    quotas: quotasSchema.default({}),
    /** Executors for `berth dispatcher`; `berth serve` runs one in-process instead. */
    executors: z.array(executorEndpointSchema).default([]),
    /** More executors from DNS, re-resolved every `executor_discovery_interval_ms` (membership changes). */
    executor_discovery: z.array(executorDiscoverySchema).default([]),
    executor_discovery_interval_ms: int(200).default(5000),
    /** With no tenants every caller is tenant `default`; with tenants a Bearer key is required. */
    tenants: z.array(tenantSchema).default([]),
    /** Allow the local backend (no isolation) when tenants are configured. */
    allow_local_multi_tenant: bool.default(false),
    /**
     * IANA time zone (e.g. `Europe/Berlin`) for execute_code scripts' TZ, like the reference tool's
     * `timezone` key (env HERMES_TIMEZONE); empty keeps each environment's own.
     */
    timezone: z
      .string()
      .default('')
      .refine(isTimeZoneName, { message: 'must be an IANA time zone name such as UTC or Europe/Berlin' }),
  })
  .strict();

export type BerthConfig = z.infer<typeof configSchema>;
export type TerminalConfig = BerthConfig['terminal'];
export type MetricsConfig = BerthConfig['metrics'];
export type ServerTlsConfig = NonNullable<BerthConfig['server']['tls']>;
export type ExecutorClientTlsConfig = NonNullable<BerthConfig['executors'][number]['tls']>;
export type TracingConfig = BerthConfig['tracing'];
export type WebConfig = BerthConfig['web'];

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** Environment names that override file settings: `TERMINAL_<KEY>` for every terminal key. */
const TERMINAL_ENV_ALIASES: Readonly<Record<string, string>> = { TERMINAL_ENV: 'backend' };

/** `BERTH_METRICS_*` variables and the `metrics.*` keys they set. */
const METRICS_ENV: Readonly<Record<string, string>> = {
  BERTH_METRICS_ENABLED: 'enabled',
  BERTH_METRICS_HOST: 'host',
  BERTH_METRICS_PORT: 'port',
  BERTH_METRICS_EXECUTOR_PORT: 'executor_port',
};

/**
 * The standard OpenTelemetry variables Berth reads itself, and the `tracing.*`
 * keys they set; the trace-specific name wins over the general one. The OTLP
 * exporter reads its transport details (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT,
 * _COMPRESSION, _CERTIFICATE...) from the environment on its own, as the
 * OpenTelemetry specification defines them.
 */
const OTEL_ENV: ReadonlyArray<readonly [string, string]> = [
  ['OTEL_TRACES_EXPORTER', 'exporter'],
  ['OTEL_EXPORTER_OTLP_PROTOCOL', 'protocol'],
  ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'protocol'],
  ['OTEL_SERVICE_NAME', 'service_name'],
  ['OTEL_TRACES_SAMPLER', 'sampler'],
  ['OTEL_TRACES_SAMPLER_ARG', 'sampler_arg'],
  ['OTEL_RESOURCE_ATTRIBUTES', 'resource_attributes'],
  ['BERTH_TRACING_TASK_IDS', 'task_ids'],
];

function applyOtelEnv(out: Record<string, unknown>, env: NodeJS.ProcessEnv): void {
  for (const [name, key] of OTEL_ENV) {
    const value = env[name]?.trim();
    if (value) setPath(out, ['tracing', key], key === 'exporter' || key === 'sampler' ? value.toLowerCase() : value);
  }
  // The general endpoint is a base URL the signal's path is appended to; the traces one is used as is.
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  if (traces) setPath(out, ['tracing', 'endpoint'], traces);
  else if (base) setPath(out, ['tracing', 'endpoint'], `${base.replace(/\/+$/, '')}/v1/traces`);
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') setPath(out, ['tracing', 'exporter'], 'none');
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

/** Applies environment overrides to a raw (unvalidated) config object. */
export function applyEnvOverrides(raw: Record<string, unknown>, env: NodeJS.ProcessEnv): Record<string, unknown> {
  const out = structuredClone(raw);
  const terminalKeys = Object.keys(terminalSchema.shape);
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) continue;
    const alias = TERMINAL_ENV_ALIASES[name];
    if (alias) {
      setPath(out, ['terminal', alias], value);
      continue;
    }
    if (name.startsWith('TERMINAL_')) {
      const key = name.slice('TERMINAL_'.length).toLowerCase();
      if (key === 'docker_env' || (key === 'docker_extra_args' && value.trimStart().startsWith('['))) {
        // JSON, since env values cannot nest (and docker flags may contain commas: --tmpfs=/c:size=1g,exec).
        try {
          setPath(out, ['terminal', key], JSON.parse(value));
        } catch {
          setPath(out, ['terminal', key], value);
        }
      } else if (terminalKeys.includes(key)) {
        setPath(out, ['terminal', key], value);
      }
    }
  }
  if (env.BERTH_HOST) setPath(out, ['server', 'host'], env.BERTH_HOST);
  if (env.BERTH_PORT) setPath(out, ['server', 'port'], env.BERTH_PORT);
  if (env.BERTH_LOG_LEVEL) setPath(out, ['log_level'], env.BERTH_LOG_LEVEL);
  if (env.BERTH_STATE_ROOT) setPath(out, ['executor', 'state_root'], env.BERTH_STATE_ROOT);
  if (env.BERTH_EXECUTOR_SECRET) setPath(out, ['executor', 'shared_secret'], env.BERTH_EXECUTOR_SECRET);
  if (env.BERTH_CODE_CONTAINER) setPath(out, ['code_execution', 'code_container'], env.BERTH_CODE_CONTAINER);
  if (env.HERMES_TIMEZONE?.trim()) setPath(out, ['timezone'], env.HERMES_TIMEZONE.trim());
  // Upstream's switch: only 1, true, yes and on (any case) keep redaction on.
  const redactEnv = env.HERMES_REDACT_SECRETS?.trim().toLowerCase();
  if (redactEnv) setPath(out, ['security', 'redact_secrets'], ['1', 'true', 'yes', 'on'].includes(redactEnv));
  if (env.BERTH_TENANTS) setPath(out, ['tenants'], tenantsFromEnv(env.BERTH_TENANTS));
  if (env.BERTH_DOCKER_NETWORK) setPath(out, ['docker', 'network'], env.BERTH_DOCKER_NETWORK);
  for (const [name, key] of Object.entries(METRICS_ENV)) {
    const value = env[name];
    if (value) setPath(out, ['metrics', key], value);
  }
  applyOtelEnv(out, env);
  return out;
}

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

/** SHA-256 hex of an API key, as stored in `tenants[].api_key_sha256`. */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}
