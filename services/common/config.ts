/**
 * Configuration: one YAML file, validated once at start by zod, with
 * `TERMINAL_*` / `BERTH_*` environment overrides. Nothing else in Berth reads
 * `process.env` for settings; mains parse this and pass it down. This file is
 * the schema and its types: every key with its type, default and the
 * description docs/configuration.md shows for it (that reference is generated
 * from here and config-env.ts by `make config-doc`, so write descriptions for
 * the operator who sets the key). config-load.ts reads and validates a
 * configuration, config-env.ts applies the environment overrides.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { parseCidr } from './cidr.js';
import { BACKEND_CHOICES, BACKEND_NAMES, isBackendPackageSpecifier } from './backend-names.js';

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
/** A list that an environment variable may give comma-separated. */
export const stringList = z.preprocess(
  (v) => (typeof v === 'string' ? v.split(',').map((s) => s.trim()).filter(Boolean) : v),
  z.array(z.string()),
);

export { BACKEND_CHOICES, BACKEND_NAMES, isBackendPackageSpecifier, isBackendPath, type BackendName } from './backend-names.js';

/** A built-in backend's name, or a backend package's specifier (docs/backends/writing-a-backend.md). */
const backendName = z
  .string()
  .refine((s) => (BACKEND_NAMES as readonly string[]).includes(s) || isBackendPackageSpecifier(s), { message: `must be ${BACKEND_CHOICES}` })
  .meta({ typeName: `${BACKEND_NAMES.map((n) => `\`${n}\``).join(' \\| ')} \\| backend package` });

/** `terminal.*` keys, named as the tool-runtime spec names them. */
export const terminalSchema = z
  .object({
    backend: backendName.default('local').describe(
      'Where tasks\' commands run (docs/backends/): a built-in backend, or a backend package whose default export is a backend factory: an npm package name installed beside Berth, or a path (a package directory or a module file; relative to the executor\'s working directory) (docs/backends/writing-a-backend.md).',
    ),
    cwd: z.string().default('').describe(
      'Directory new tasks start in, on the local and modal backends. Empty: the executor\'s working directory (local), the image\'s (modal). docker and singularity tasks start in `/workspace`, ssh ones in their task directory on the host, daytona ones in the sandbox\'s.',
    ),
    timeout: int(1).default(180).describe('Seconds a foreground `terminal` command may run when the call names no timeout.'),
    max_foreground_timeout: int(1).default(600).describe(
      'The longest foreground timeout a call may ask for, in seconds; longer work belongs in the background.',
    ),
    lifetime_seconds: int(1).default(300).describe(
      'Idle task environments are released after this many seconds, unless background processes still run in them.',
    ),
    idle_suspend_after_s: int(0).default(0).describe(
      'Idle task environments are suspended after this many seconds, before `lifetime_seconds` releases them, on backends that can suspend (docs/suspend.md): no CPU, memory freed, files and shell state kept, and the next call resumes them. Tasks with running background processes are not suspended. 0: never.',
    ),
    max_output_chars: int(1000).default(50_000).describe(
      'Characters of a command\'s output kept in its result (the first 40% and the last 60%).',
    ),
    env_passthrough: stringList.default([]).describe(
      'Variable names allowed through the secret scrubbing into commands and execute_code scripts. Provider credentials never pass.',
    ),
    persistent_shell: bool.default(true).describe('Carry the working directory, exported variables and functions from one call of a task to the next.'),
    docker_image: z.string().default('berth-sandbox:latest').describe(
      'Image of the docker backend\'s task containers and of execute_code\'s code containers; any image with bash works, python3 makes it fast. Never pulled.',
    ),
    singularity_image: z.string().default('').describe(
      'The singularity backend\'s image (required there): a .sif file or a docker:// reference, converted once and cached.',
    ),
    modal_image: z.string().default('').describe('The modal backend\'s image (required there): a registry image with bash and python3.'),
    daytona_image: z.string().default('').describe('The daytona backend\'s image (required there): an image Daytona can pull, with bash and python3.'),
    kubernetes_image: z.string().default('').describe(
      'The kubernetes backend\'s image (required there): what each task\'s pod runs, an image the cluster can pull, with bash and python3 (without python3 every command is an exec of its own).',
    ),
    docker_env: z.record(z.string(), z.string()).default({}).describe('Variables set in every task container (JSON object in the environment variable).'),
    docker_volumes: stringList.default([]).describe('Extra bind mounts of task containers, `/host:/container[:ro]` (`/run/berth` is reserved).'),
    docker_extra_args: stringList.default([]).describe(
      '`docker run` flags added to every container; only the flags docs/backends/docker.md lists are accepted, anything else stops the executor naming what to use instead.',
    ),
    docker_forward_env: stringList.default([]).describe(
      'Variable names copied from the executor\'s environment into containers; secret-looking names need `env_passthrough` too.',
    ),
    ssh_host: z.string().default('').describe('The ssh backend\'s host (required there).'),
    ssh_user: z.string().default('').describe('The ssh backend\'s user (required there); every task on the host runs as this user.'),
    ssh_port: int(1).max(65535).default(22).describe('The ssh backend\'s port.'),
    ssh_key: z.string().default('').describe('The ssh backend\'s private key file (required there); read at start.'),
    ssh_known_hosts: z.string().default('').describe(
      'known_hosts file that pins host keys. Empty: Berth\'s own under the state root (`<state_root>/ssh/known_hosts`).',
    ),
    ssh_host_key_policy: z.enum(['strict', 'accept-new']).default('accept-new').describe(
      '`accept-new` pins a host\'s key on first contact and refuses a changed key; `strict` needs the key in known_hosts already.',
    ),
    ssh_connect_timeout: int(1).default(10).describe('Seconds to wait for an ssh connection.'),
    singularity_binary: z.string().default('').describe('The runtime\'s CLI. Empty: `apptainer` if it is on PATH, else `singularity`.'),
    container_cpu: z.coerce.number().positive().default(1).describe('CPUs of each container, instance or cloud sandbox.'),
    container_memory: int(64).default(5120).describe('Memory limit of each container, instance or cloud sandbox, in MiB (no swap beyond it).'),
    container_disk: int(1).default(51200).describe(
      'Disk limit in MiB of a docker container\'s writable layer and of each persistent volume, where the storage can enforce it; elsewhere of their sum, measured by Berth (see `docker.disk_limit`).',
    ),
    container_pids: int(8).default(256).describe('Process limit of each container (docker\'s pids limit, apptainer\'s `--pids-limit`).'),
    container_persistent: bool.default(true).describe(
      'Keep a task\'s files beyond its container: docker volumes for `/workspace` and the home directory, an overlay on singularity, a snapshot on modal, a stopped sandbox on daytona, PersistentVolumeClaims on kubernetes.',
    ),
  })
  .strict();

const file = z.string().min(1);
/** TLS of a gRPC server (`server.tls`, `executor.tls`); with client_ca_file, clients need a certificate it signed (mTLS). */
const serverTlsSchema = z
  .object({
    cert_file: file.describe('PEM certificate (chain) the server presents.'),
    key_file: file.describe('PEM private key of that certificate.'),
    client_ca_file: file.optional().describe('Clients must present a certificate this CA signed (mTLS), checked in the handshake.'),
  })
  .strict();
/** The dispatcher's TLS to one executor: the CA it trusts the executor by, its own client certificate. */
const executorClientTlsSchema = z
  .object({
    ca_file: file.optional().describe('CA the dispatcher trusts the executor\'s certificate by. Unset: the system\'s CAs.'),
    cert_file: file.describe('The dispatcher\'s client certificate for the executor.'),
    key_file: file.describe('Its private key.'),
    server_name: z.string().min(1).optional().describe('Name to check the executor\'s certificate against, when the address is not in its subjectAltName.'),
  })
  .strict();

const executorEndpointSchema = z
  .object({
    address: z.string().min(1).describe('`host:port` of the executor\'s API.'),
    backend: backendName.describe('The backend it runs.'),
    tls: executorClientTlsSchema.optional().describe('mTLS to this executor. Unset: plaintext.'),
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
    dns: z.string().min(1).describe('A name whose A/AAAA records are executors (a Kubernetes headless Service, a compose service).'),
    port: int(1).max(65535).default(7701).describe('Their Executor API port.'),
    backend: backendName.describe('The backend they run.'),
    tls: executorClientTlsSchema.optional().describe('mTLS to them, as `executors[].tls`; set `server_name` to a name in their certificates.'),
  })
  .strict();

export const APPROVAL_MODES = ['manual', 'smart', 'off'] as const;
export const CODE_CONTAINER_SETTINGS = ['auto', 'docker', 'off'] as const;
export const DISK_LIMIT_MODES = ['auto', 'require', 'off'] as const;
/** `docker.task_uids` unless set (services/executor/backends/docker/task-identity.ts says why these). */
export const DEFAULT_TASK_UIDS = '1900000000-1916777215';
/** `docker.task_uids`, `kubernetes.task_uids`: `FIRST-LAST`, or empty for the backend's default. */
const taskUidRange = () =>
  z
    .string()
    .regex(/^(\s*\d{1,10}\s*-\s*\d{1,10}\s*)?$/, `FIRST-LAST, e.g. ${DEFAULT_TASK_UIDS}, or empty for the default`)
    .default('');
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
const cidrList = z.array(
  z.string().refine((s) => parseCidr(s) !== undefined, 'not a CIDR range (10.20.0.0/16, fd00::/8)').meta({ typeName: 'CIDR range' }),
);
/** `tenants[].network`: narrows `docker.egress` / `docker.egress_allow` for one tenant (absent keys inherit). */
const tenantNetworkSchema = z
  .object({
    egress: z.enum(EGRESS_MODES).optional().describe('Narrows `docker.egress` for this tenant. Unset: inherited.'),
    egress_allow: cidrList.optional().describe('Narrows `docker.egress_allow` for this tenant: ranges inside the operator\'s. Unset: inherited.'),
  })
  .strict();

/** `tenants[].approvals`: per-tenant overrides of `approvals.*` (absent keys inherit). */
const tenantApprovalsSchema = z
  .object({
    mode: z.enum(APPROVAL_MODES).optional().describe('Overrides `approvals.mode`.'),
    timeout: int(1).optional().describe('Overrides `approvals.timeout`.'),
    skip_in_containers: bool.optional().describe('Overrides `approvals.skip_in_containers`.'),
    non_interactive: nonInteractiveAction.optional().describe('Overrides `approvals.non_interactive`.'),
    allow_yolo: bool.optional().describe('Overrides `approvals.allow_yolo`.'),
    command_allowlist: z.array(z.string()).optional().describe(
      'Added to the top-level `command_allowlist` for this tenant only; this tenant\'s "always" answers are written here.',
    ),
    deny: z.array(z.string()).optional().describe('Added to `approvals.deny` for this tenant only.'),
    denial_breaker_threshold: int(1).optional().describe('Overrides `approvals.denial_breaker_threshold`.'),
  })
  .strict();

/** `quotas` and `tenants[].quotas`: per-tenant limits; an absent key is unlimited (see docs/quotas.md). */
const quotasSchema = z
  .object({
    max_tasks: int(1).optional().describe('Live task environments. Unset: unlimited.'),
    max_concurrent_calls: int(1).optional().describe('Tool calls running at once. Unset: unlimited.'),
    calls_per_minute: int(1).optional().describe('Tool calls a minute (a token bucket of that size, refilled at that rate). Unset: unlimited.'),
    max_execute_code: int(1).optional().describe('execute_code scripts running at once. Unset: unlimited.'),
    max_memory_mb: int(1).optional().describe('Sum of `terminal.container_memory` over the tenant\'s live containers. Unset: unlimited.'),
    max_cpus: z.coerce.number().positive().optional().describe('Sum of `terminal.container_cpu` over the tenant\'s live containers. Unset: unlimited.'),
    max_snapshots: int(1).optional().describe('Task snapshots kept (`berth snapshot`, and forks from a task). Unset: unlimited.'),
    max_snapshot_mb: int(1).optional().describe('Sum of the sizes of the tenant\'s snapshots, in MB. Unset: unlimited.'),
  })
  .strict();
export type QuotasConfig = z.infer<typeof quotasSchema>;

/** A label or annotation key/value map as Kubernetes takes it. */
const stringMap = z.record(z.string(), z.string());

/** One toleration of task pods, spelt as in a pod spec. */
const tolerationSchema = z
  .object({
    key: z.string().optional().describe('The taint key; empty with operator Exists: every taint.'),
    operator: z.enum(['Equal', 'Exists']).optional().describe('`Equal` (default) or `Exists`.'),
    value: z.string().optional().describe('The taint value, for `Equal`.'),
    effect: z.enum(['NoSchedule', 'PreferNoSchedule', 'NoExecute']).optional().describe('Which effect is tolerated; unset: all.'),
    tolerationSeconds: z.number().int().optional().describe('For NoExecute: how long the pod stays after the taint appears.'),
  })
  .strict();

/** `kubernetes.*`: the kubernetes backend (docs/backends/kubernetes.md). */
export const kubernetesSchema = z
  .object({
    namespace: z.string().regex(/^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?$/, 'a namespace name (DNS-1123 label)').default('').describe(
      'Namespace of task pods and claims. Empty: the namespace of the kubeconfig\'s context (or the in-cluster ServiceAccount\'s), else `default`.',
    ),
    context: z.string().default('').describe('kubeconfig context to use. Empty: the current one; in a pod without a kubeconfig, its ServiceAccount.'),
    executor_id: z.string().regex(/^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/, 'a label value: 1-63 of A-Z a-z 0-9 - _ .').default('berth').describe(
      'This executor\'s name in its pods\' `berth.dev/executor` label: a restarted executor finds its pods again by it; executors sharing a namespace need different ones.',
    ),
    runtime_class: z.string().default('').describe('`runtimeClassName` of task pods (`gvisor`, `kata`, ...). Empty: the cluster\'s default runtime.'),
    node_selector: stringMap.default({}).describe('`nodeSelector` of task pods, e.g. `{pool: sandboxes}`.'),
    tolerations: z.array(tolerationSchema).default([]).describe('Tolerations of task pods, as in a pod spec.'),
    labels: stringMap.default({}).describe('Extra labels of task pods and claims (the `berth.dev/` and `app.kubernetes.io/managed-by` keys are Berth\'s own).'),
    annotations: stringMap.default({}).describe('Annotations of task pods.'),
    warm_pool: int(0).max(64).default(0).describe('Pods started ahead and claimed by new tasks by relabelling (not with `container_persistent`).'),
    pending_timeout: int(1).default(120).describe(
      'Seconds a new pod may stay unscheduled before the call fails with the scheduler\'s reason (an image that cannot be pulled fails at once).',
    ),
    run_as_user: int(1).optional().describe(
      'A fixed uid for every task pod (never root), e.g. 1000, berth-sandbox\'s own user, for an image that needs its own /etc/passwd. Unset: each pod runs as a uid and gid of its own from `task_uids`, so per-user kernel limits of a node are never shared by two tasks.',
    ),
    run_as_group: int(1).optional().describe('With `run_as_user`: the gid of the pod\'s processes and owner group of its volumes (fsGroup). Unset: the same as the uid.'),
    task_uids: taskUidRange().describe(
      '`FIRST-LAST`: the uids (and gids) task pods run as when `run_as_user` is unset, one of their own per pod, recorded in its `berth.dev/uid` label (and its claims\'); no node account should use them. Empty: the default, or 10000-65533 with `user_namespace`.',
    ),
    user_namespace: bool.default(false).describe(
      'Task pods get a user namespace of their own (`hostUsers: false`): their ids, root\'s included, map to ids of the node no other pod has. Needs a cluster and runtime that support it (Kubernetes 1.33+, or the UserNamespacesSupport feature gate).',
    ),
    home_dir: z.string().regex(/^\/./, 'an absolute path').default('/home/sandbox').describe('The sandbox user\'s home in the image: a volume of its own (the claim in persistent mode), and `HOME`.'),
    read_only_root: bool.default(true).describe(
      'Read-only root file system (the task\'s directories and /tmp are volumes); turn it off for an image that writes elsewhere.',
    ),
    storage_class: z.string().default('').describe('Storage class of the claims in persistent mode. Empty: the cluster\'s default.'),
  })
  .strict();
export type KubernetesConfig = z.infer<typeof kubernetesSchema>;
/** Server names: config keys, toolset names (`mcp-<name>`) and log fields. */
export const MCP_SERVER_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

/**
 * One MCP server (`mcp_servers.<name>`, `tenants[].mcp_servers.<name>`), with
 * upstream Hermes's keys: `command`/`args`/`env` for a stdio server (started
 * inside each task's own sandbox), `url`/`headers` for a Streamable HTTP
 * server (reached from the executor under the tenant's egress policy).
 */
export const mcpServerSchema = z
  .object({
    command: z.string().min(1).optional().describe(
      'stdio server: the program, run inside each task\'s own sandbox (never on the executor host, except on the local backend, which has no sandbox). It must exist there: in the image, or on a mounted volume.',
    ),
    args: z.array(z.string()).default([]).describe('stdio server: its arguments.'),
    env: z.record(z.string(), z.string()).default({}).describe(
      'stdio server: variables set for it. They are visible to the task\'s own commands (same sandbox): never put secrets here; use an HTTP server with `headers` for those.',
    ),
    url: z.url({ protocol: /^https?$/, error: 'an http(s) URL' }).optional().describe(
      'Streamable HTTP server: its endpoint. Reached from the executor, under the tenant\'s `docker.egress` / `docker.egress_allow` (narrowed by `tenants[].network`), on every backend.',
    ),
    headers: z.record(z.string(), z.string()).default({}).describe('HTTP server: request headers (e.g. `Authorization`); they stay on the executor.'),
    timeout: z.coerce.number().positive().default(300).describe('Seconds one tool call may take before it fails with a timeout (upstream\'s default, 300).'),
    connect_timeout: z.coerce.number().positive().default(60).describe('Seconds to start or reach the server and finish the MCP handshake (upstream\'s default, 60).'),
    enabled: bool.default(true).describe('`false` keeps the entry but offers none of its tools.'),
    tools: z
      .object({
        include: z.array(z.string()).default([]).describe('Only these of the server\'s tools (by the server\'s own names). Empty: all.'),
        exclude: z.array(z.string()).default([]).describe('All the server\'s tools but these (when `include` is empty).'),
      })
      .strict()
      .prefault({})
      .describe('Which of the server\'s tools are offered.'),
  })
  .strict()
  .refine((s) => (s.command === undefined) !== (s.url === undefined), {
    message: 'give either command (a stdio server) or url (an HTTP server), not both',
  });
export type McpServerConfig = z.infer<typeof mcpServerSchema>;

const mcpServersSchema = z
  .record(z.string().regex(MCP_SERVER_NAME_PATTERN, 'MCP server name: 1-64 of A-Z a-z 0-9 _ . - (starting with a letter or digit)'), mcpServerSchema)
  .meta({ typeName: 'map of MCP servers' });

const tenantSchema = z
  .object({
    id: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'tenant id: 1-64 of A-Z a-z 0-9 _ . -').describe('The tenant\'s name: 1-64 of A-Z a-z 0-9 _ . -'),
    api_key_sha256: z.string().regex(/^[0-9a-f]{64}$/, 'api_key_sha256: 64 lowercase hex digits').describe(
      'SHA-256 (hex) of the tenant\'s API key (`printf %s "$KEY" | sha256sum`); keys are never stored in clear.',
    ),
    allowed_backends: z.array(backendName).optional().describe('Backends this tenant\'s tasks may use. Unset: any.'),
    toolsets: z.array(z.string()).optional().describe('Only these toolsets\' tools are listed and callable (`[]`: none). Unset: every tool.'),
    approvals: tenantApprovalsSchema.optional().describe('Overrides of `approvals.*` for this tenant; absent keys inherit.'),
    quotas: quotasSchema.optional().describe('Overrides of the top-level `quotas`, key by key.'),
    network: tenantNetworkSchema.optional().describe('Narrows the docker network policy for this tenant, never widens it (executors read it too).'),
    mcp_servers: mcpServersSchema.optional().describe(
      'MCP servers of this tenant only, as the top-level `mcp_servers`: their tools are listed and callable for this tenant alone (docs/mcp.md).',
    ),
  })
  .strict();

export const configSchema = z
  .object({
    server: z
      .object({
        host: z.string().default('127.0.0.1').describe('Address the Dispatcher API listens on (`berth serve`, `berth dispatcher`).'),
        port: int(0).max(65535).default(7700).describe('Its port; 0 picks a free one.'),
        shutdown_grace_ms: int(0).default(2000).describe('On SIGTERM, how long calls in flight and open Session streams may finish before they are cancelled.'),
        tls: serverTlsSchema.optional().describe('Serve the Dispatcher API over TLS (docs/tls.md). Unset: plaintext.'),
      })
      .strict()
      .prefault({})
      .describe('The Dispatcher API server.'),
    log_level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info').describe('Level of the JSON log lines on stderr.'),
    terminal: terminalSchema.prefault({}).describe('Task environments: the backend, its image or host, limits and timeouts.'),
    docker: z
      .object({
        warm_pool: int(0).max(64).default(0).describe('Started containers kept ready, so a new task\'s first call skips the cold start (not with `container_persistent`).'),
        warm_pool_max: int(0).max(256).default(0).describe(
          'Adaptive warm pool: above `warm_pool`, keep as many ready containers as new tasks arrived in the last `warm_pool_window_s`, up to this many. 0: a fixed pool of `warm_pool`.',
        ),
        warm_pool_window_s: int(1).max(3600).default(60).describe('The adaptive warm pool\'s window: arrivals older than this no longer count, and the pool shrinks back.'),
        warm_pool_memory_mb: int(0).default(0).describe(
          'The adaptive warm pool\'s memory budget: its ready containers\' memory limits (`terminal.container_memory` each) stay within it. 0: bounded only by `docker.memory_overcommit`\'s admission, which keeps room for one more task.',
        ),
        runtime: z.string().default('').describe('OCI runtime of task containers. Empty: Docker\'s default (runc); `runsc`: gVisor.'),
        network: z.enum(['none', 'isolated', 'bridge']).default('isolated').describe(
          '`isolated`: Berth\'s own network, no traffic between containers or to the host, egress per `egress`; `bridge`: Docker\'s default bridge, no isolation; `none`: no network.',
        ),
        egress: z.enum(EGRESS_MODES).default('public-only').describe(
          'Under `isolated`: `public-only` (public addresses only), `open` (private and shared ranges too; link-local stays closed), `none` (nothing; DNS still answers).',
        ),
        egress_allow: cidrList.default([]).describe('CIDR ranges opened under `isolated` in every egress mode, e.g. an internal package mirror.'),
        read_only_root: bool.default(false).describe('Read-only root file system in task containers (the task\'s directories stay writable).'),
        socket_path: z.string().default('').describe('Docker API socket. Empty: `DOCKER_HOST`, else /var/run/docker.sock.'),
        disk_limit: z.enum(DISK_LIMIT_MODES).default('auto').describe(
          'Where the storage cannot enforce `terminal.container_disk`: `auto` warns once and has Berth measure each task\'s disk instead, refusing its calls past the limit; `require` refuses to create containers; `off` never asks for a limit nor measures.',
        ),
        task_uids: taskUidRange().describe(
          '`FIRST-LAST`: the uids (and gids) tasks\' commands run as, one of their own per task, so per-user kernel limits are never shared; no host account may use them (checked at start). Empty: the default, or 10000-65533 under a daemon that remaps container ids (rootless, userns-remap).',
        ),
        memory_overcommit: z.coerce.number().min(0).default(1.5).describe(
          'The memory limits (`terminal.container_memory`) of the Berth sandboxes on the Docker engine (see `docker.memory_scope`) add up to at most the Docker host\'s memory, or the executor\'s cgroup limit if lower, times this; a new task past it gets RESOURCE_EXHAUSTED naming this key. 0: no bound.',
        ),
        memory_scope: z.enum(['engine', 'executor']).default('executor').describe(
          'Whose sandboxes count against `docker.memory_overcommit`: `executor` (the default), only this executor\'s; `engine`, every Berth sandbox on the Docker engine, so that executors sharing one engine (the compose stack\'s three) share one budget instead of each admitting the host\'s memory times the factor. Set `engine` where executors of one deployment share an engine and nothing else runs Berth sandboxes there.',
        ),
        start_concurrency: int(0).default(0).describe(
          'How many containers the executor has the Docker engine create and start at once; more wait their turn, tasks before the warm pool. A burst then gets most of its first calls back sooner: twenty started at once on two cores all come up near the end, two at a time one after another (docs/performance.md, A start gate). 0: as many as the Docker host has CPUs.',
        ),
        executor_stale_ms: int(1000).default(15_000).describe(
          'How long another executor\'s heartbeat (under the shared state root) may go untouched before that executor counts as gone, stopped (SIGSTOP, a frozen cgroup) or hung as much as killed, and its tasks\' containers are removed for the executor that takes them over. Each executor touches its own every fifth of this; give every executor sharing a state root the same value. Bounds how soon a task of a stopped executor runs elsewhere (docs/deploying.md, Failover and fencing).',
        ),
        name_key_file: z.string().default('').describe(
          'File with the executor\'s secret (32+ random bytes, hex, mode 0600) that container, volume and host directory names are keyed hashes under, so no name tells or confirms a tenant or task id. Empty: `<state_root>/docker/name-key`, made on the first start. Executors that resume each other\'s tasks on one Docker host share it.',
        ),
      })
      .strict()
      .prefault({})
      .describe('The docker backend: runtime, network policy, warm pool (docs/backends/docker.md).'),
    kubernetes: kubernetesSchema.prefault({}).describe('The kubernetes backend: where task pods live and how they are scheduled (docs/backends/kubernetes.md).'),
    approvals: z
      .object({
        mode: z.enum(APPROVAL_MODES).default('manual').describe(
          '`manual`: dangerous commands are asked about; `smart`: an auxiliary model judges first; `off`: no approval (hardline blocks and deny rules still apply).',
        ),
        timeout: int(1).default(300).describe('Seconds to wait for an answer; silence denies.'),
        skip_in_containers: bool.default(true).describe('Backends without host filesystem access skip approval: the container is the boundary.'),
        non_interactive: nonInteractiveAction.default('approve').describe(
          'What a call nobody can answer for gets (client metadata `berth-interactive: false`, `berth call --non-interactive`): `approve`, or `deny` as for cron-like jobs.',
        ),
        allow_yolo: bool.default(true).describe('Whether Session clients may put a session in yolo mode (no approval; hardline blocks still apply).'),
        max_pending: int(1).default(32).describe('Unary calls parked for the Approve RPC, per tenant; each waits at most `timeout` seconds.'),
        deny: z.array(z.string()).default([]).describe(
          'Globs (fnmatch, case-insensitive) of commands never run, whatever the mode, yolo or allowlist say, e.g. `git push --force*`.',
        ),
        denial_breaker_threshold: int(1).default(3).describe('Smart-approval denials in a row after which refusals tell the model to stop.'),
        smart: z
          .object({
            base_url: z.string().default('').describe('OpenAI-compatible endpoint of the judging model (`/chat/completions` is appended); required by mode `smart`.'),
            model: z.string().default('').describe('Model name sent to it; required by mode `smart`.'),
            api_key_env: z.string().default('BERTH_SMART_APPROVAL_API_KEY').describe('Name of the environment variable that holds the endpoint\'s API key (never the key itself).'),
            timeout: int(1).default(30).describe('Seconds to wait for its verdict; an error or a timeout asks the user.'),
          })
          .strict()
          .prefault({})
          .describe('The auxiliary model of mode `smart`.'),
      })
      .strict()
      .prefault({})
      .describe('Dangerous-command approval (docs/approvals.md).'),
    command_allowlist: z.array(z.string()).default([]).describe(
      'Approved for every tenant, forever: pattern keys (`recursive delete`), exact commands or globs (`npm run *`); "always" answers are added here.',
    ),
    code_execution: z
      .object({
        mode: z.enum(['project', 'strict']).default('project').describe(
          '`project`: scripts run in the task\'s cwd with its shell state and virtualenv; `strict`: a plain python3 in the run directory.',
        ),
        timeout: int(1).default(300).describe('Seconds a script may run; then SIGTERM to its process group, SIGKILL 5 s later.'),
        max_tool_calls: int(1).default(50).describe('Tool calls one script may make.'),
        max_stdout_bytes: int(1000).default(50_000).describe('Bytes of a script\'s stdout kept (the first 40% and the last 60%).'),
        max_stderr_bytes: int(100).default(10_000).describe('Bytes of a script\'s stderr kept (its head).'),
        code_container: z.enum(CODE_CONTAINER_SETTINGS).default('auto').describe(
          'ssh hosts and singularity images without python3 run scripts in a per-task docker code container: `auto` when Docker answers, `docker` requires it (the executor fails at start without it), `off` refuses execute_code there.',
        ),
      })
      .strict()
      .prefault({})
      .describe('The execute_code tool (docs/execute-code.md).'),
    executor: z
      .object({
        host: z.string().default('127.0.0.1').describe('Address `berth executor` listens on.'),
        port: int(0).max(65535).default(7701).describe('Its port.'),
        shared_secret: z.string().default('').describe(
          'Secret between dispatcher and executors; set it whenever they are on different hosts. Empty: none (loopback only).',
        ),
        state_root: z.string().default('').describe(
          'Root of per-task host directories (state, sockets, persistent overlays); must be on the Docker host for the docker backend. Empty: the OS temp dir.',
        ),
        tls: serverTlsSchema.optional().describe(
          'The executor\'s own server certificate; `client_ca_file` is required (dispatchers must present a certificate it signed). Unset: plaintext.',
        ),
        drain_grace_ms: int(0).default(30_000).describe('On SIGTERM, how long calls in flight may finish (no new tasks meanwhile) before environments are released.'),
      })
      .strict()
      .prefault({})
      .describe('The Executor API server of `berth executor`.'),
    metrics: z
      .object({
        enabled: bool.default(false).describe('Serve Prometheus metrics on http://HOST:PORT/metrics (`--metrics-port N` turns them on too).'),
        host: z.string().default('127.0.0.1').describe('Address of the metrics endpoint; it has no authentication, so widen it only on a trusted network.'),
        port: int(0).max(65535).default(9464).describe('Port of `berth serve` and `berth dispatcher`.'),
        executor_port: int(0).max(65535).default(9465).describe('Port of `berth executor`, so it fits beside a dispatcher on one host.'),
        tenant_labels: bool.default(false).describe('Give the quota gauges a `tenant` label (one series per configured tenant) instead of summing over tenants.'),
      })
      .strict()
      .prefault({})
      .describe('Prometheus metrics, one endpoint per process (docs/metrics-and-tracing.md).'),
    tracing: z
      .object({
        exporter: z.enum(['none', 'otlp'], {
          error: 'OTEL_TRACES_EXPORTER (tracing.exporter): otlp or none; other exporters are not built in',
        }).default('none').describe('`otlp` turns tracing on.'),
        endpoint: z
          .union([z.literal(''), z.url({ protocol: /^https?$/, error: 'tracing.endpoint: an http(s) URL' })])
          .default('')
          .describe('Where spans are POSTed. Empty: http://localhost:4318/v1/traces, the OTLP default.'),
        protocol: z.enum(['http/protobuf'], {
          error: 'OTEL_EXPORTER_OTLP_PROTOCOL (tracing.protocol): only http/protobuf is built in; set it to http/protobuf',
        }).default('http/protobuf').describe('OTLP protocol; only http/protobuf is built in.'),
        service_name: z.string().default('').describe('Service name on the spans. Empty: berth, berth-dispatcher or berth-executor, by command.'),
        sampler: z.enum(TRACE_SAMPLERS, { error: `OTEL_TRACES_SAMPLER (tracing.sampler): one of ${TRACE_SAMPLERS.join(', ')}` })
          .default('parentbased_always_on')
          .describe('Which calls are traced; the `parentbased_*` ones follow a client\'s sampling decision.'),
        sampler_arg: z.coerce.number().min(0).max(1).default(1).describe('The ratio of the traceidratio samplers.'),
        resource_attributes: z.string().default('').describe('`key=value,...` on every span\'s resource (percent-encoded values).'),
        task_ids: bool.default(false).describe('Spans carry `berth.task.id`; off by default, since task ids may carry user data.'),
      })
      .strict()
      .prefault({})
      .describe('OpenTelemetry traces, normally set by the standard OTEL_* variables; off unless an exporter is named (docs/metrics-and-tracing.md).'),
    web: z
      .object({
        backend: z.enum(['', ...WEB_BACKENDS]).default('').describe('Provider for both tools where it supports them. Empty: chosen by which variables are set.'),
        search_backend: z.enum(['', ...WEB_SEARCH_BACKENDS]).default('').describe('Provider of `web_search`. Empty: as `backend`.'),
        extract_backend: z.enum(['', ...WEB_EXTRACT_BACKENDS]).default('').describe(
          'Provider of `web_extract`; `http`: the dispatcher fetches public pages itself (only when named). Empty: as `backend`.',
        ),
        egress_allow: cidrList.default([]).describe('Ranges the `http` provider may fetch although private (an intranet wiki); loopback needs naming too.'),
        timeout: int(1).default(20).describe('Seconds one page fetch of the `http` provider may take, redirects included.'),
      })
      .strict()
      .prefault({})
      .describe(
        '`web_search` and `web_extract` providers (docs/web-tools.md). Credentials and instance URLs come from the dispatcher\'s environment (TAVILY_API_KEY, SEARXNG_URL, ...), never from this file.',
      ),
    security: z
      .object({
        redact_secrets: bool.default(true).describe(
          'Mask secrets in what tools return to the model: terminal and process output, read_file content, search_files matches, what scripts print. Read once at start.',
        ),
      })
      .strict()
      .prefault({})
      .describe('Secret masking of tool output, as upstream\'s `security.redact_secrets`.'),
    quotas: quotasSchema.default({}).describe('Per-tenant limits for every tenant (the single `default` tenant without tenants); absent keys are unlimited (docs/quotas.md).'),
    executors: z.array(executorEndpointSchema).default([]).describe('Executors of `berth dispatcher`; `berth serve` runs one in process instead.'),
    executor_discovery: z.array(executorDiscoverySchema).default([]).describe('More executors from DNS, re-resolved every `executor_discovery_interval_ms`.'),
    executor_discovery_interval_ms: int(200).default(5000).describe('How often the names of `executor_discovery` are re-resolved.'),
    executor_health_interval_ms: int(50).default(1000).describe('Pause between two health checks of each executor by the dispatcher.'),
    executor_health_timeout_ms: int(50).default(2000).describe('How long one health check may wait for its answer before it counts as missed.'),
    executor_health_failures: int(1).default(3).describe(
      'Missed health checks in a row before an executor is out of rotation: its tasks\' next calls get the one lost-environment error and then run elsewhere. With the two keys above, bounds how soon a task leaves a stopped or unreachable executor.',
    ),
    tenants: z.array(tenantSchema).default([]).describe(
      'With none, every caller is tenant `default`; with tenants, callers send `authorization: Bearer <key>` (docs/security.md).',
    ),
    mcp_servers: mcpServersSchema.default({}).describe(
      'MCP servers whose tools every tenant gets, as toolset `mcp-<name>` with tools `mcp__<name>__<tool>` (docs/mcp.md). Names must differ from every tenant\'s own.',
    ),
    allow_local_multi_tenant: bool.default(false).describe('Allow the local backend, which isolates nothing, when tenants are configured.'),
    timezone: z
      .string()
      .default('')
      .refine(isTimeZoneName, { message: 'must be an IANA time zone name such as UTC or Europe/Berlin' })
      .describe('IANA time zone (e.g. `Europe/Berlin`) of execute_code scripts\' `TZ`. Empty: each environment\'s own.'),
  })
  .strict();

export type BerthConfig = z.infer<typeof configSchema>;
export type TerminalConfig = BerthConfig['terminal'];
export type MetricsConfig = BerthConfig['metrics'];
export type ServerTlsConfig = NonNullable<BerthConfig['server']['tls']>;
export type ExecutorClientTlsConfig = NonNullable<BerthConfig['executors'][number]['tls']>;
export type TracingConfig = BerthConfig['tracing'];
export type WebConfig = BerthConfig['web'];

export { ConfigError } from './config-error.js';

/** SHA-256 hex of an API key, as stored in `tenants[].api_key_sha256`. */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}
