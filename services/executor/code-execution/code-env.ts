/**
 * The environment of an execute_code script (spec §6), as a pure function of
 * the environment the sandbox would give it. The rules, in order:
 *
 * 1. Provider credentials never pass, whatever else says.
 * 2. A name passed through (terminal.env_passthrough, skills' declared
 *    variables) is kept.
 * 3. A name containing a secret marker (KEY, TOKEN, ...) is dropped.
 * 4. A name starting with a safe prefix (PATH, HOME, LC_, ...) is kept, and
 *    exactly HERMES_HOME, HERMES_PROFILE, HERMES_CONFIG, HERMES_ENV.
 * 5. Everything else is dropped.
 *
 * Then the RPC variables, the Python settings and PYTHONPATH (stub dir
 * first) are added.
 */
import { PROVIDER_SECRET_NAME_PARTS } from '../backends/shared/secret-names.js';

/** Markers of secret-looking names, matched case-insensitively anywhere in the name. */
export const SECRET_NAME_PARTS: readonly string[] = PROVIDER_SECRET_NAME_PARTS;

/** Prefixes of names that are kept (case-sensitive, as environment names are). */
export const SAFE_NAME_PREFIXES: readonly string[] = [
  'PATH',
  'HOME',
  'USER',
  'LANG',
  'LC_',
  'TERM',
  'TMPDIR',
  'TMP',
  'TEMP',
  'SHELL',
  'LOGNAME',
  'XDG_',
  'PYTHONPATH',
  'VIRTUAL_ENV',
  'CONDA',
];

/** The only HERMES_* names a script inherits. */
export const HERMES_OPERATIONAL_NAMES: readonly string[] = ['HERMES_HOME', 'HERMES_PROFILE', 'HERMES_CONFIG', 'HERMES_ENV'];

/**
 * Model-provider and platform credentials: never passed to a script, even
 * when an operator lists them in env_passthrough. The smart-approval key's
 * variable (approvals.smart.api_key_env) is added per run.
 */
export const PROVIDER_CREDENTIAL_NAMES: readonly string[] = [
  'OPENAI_API_KEY',
  'OPENAI_ORG_ID',
  'AZURE_OPENAI_API_KEY',
  'ANTHROPIC_API_KEY',
  'ANTHROPIC_AUTH_TOKEN',
  'OPENROUTER_API_KEY',
  'GOOGLE_API_KEY',
  'GEMINI_API_KEY',
  'GOOGLE_APPLICATION_CREDENTIALS',
  'VERTEX_API_KEY',
  'MISTRAL_API_KEY',
  'GROQ_API_KEY',
  'DEEPSEEK_API_KEY',
  'XAI_API_KEY',
  'TOGETHER_API_KEY',
  'FIREWORKS_API_KEY',
  'COHERE_API_KEY',
  'PERPLEXITY_API_KEY',
  'NOUS_API_KEY',
  'HF_TOKEN',
  'HUGGINGFACE_API_KEY',
  'HUGGING_FACE_HUB_TOKEN',
  'MOONSHOT_API_KEY',
  'KIMI_API_KEY',
  'DASHSCOPE_API_KEY',
  'MINIMAX_API_KEY',
  'ZAI_API_KEY',
  'GLM_API_KEY',
  'NVIDIA_API_KEY',
  'CEREBRAS_API_KEY',
  'AWS_ACCESS_KEY_ID',
  'AWS_SECRET_ACCESS_KEY',
  'AWS_SESSION_TOKEN',
  'AWS_BEARER_TOKEN_BEDROCK',
  // Berth's own: the keys callers use and the executor's shared secret.
  'BERTH_API_KEY',
  'BERTH_EXECUTOR_SECRET',
  'BERTH_SMART_APPROVAL_API_KEY',
];

/** An IANA zone name (`UTC`, `Europe/Berlin`, `Etc/GMT+5`): anything else is not passed as TZ. */
const ZONE_NAME = /^[A-Za-z0-9_+-]{1,32}(?:\/[A-Za-z0-9_+-]{1,32}){0,2}$/;

/** Names `env -i NAME=VALUE` can carry: no `=`, no NUL, not empty, not starting with `-`. */
const VALID_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export interface CodeEnvInput {
  /** The environment the sandbox would give the script (after the task's shell state, in project mode). */
  readonly base: Readonly<Record<string, string>>;
  /** Names let through the scrubbing (terminal.env_passthrough plus skill-declared names). */
  readonly passthrough: readonly string[];
  /** Credential names that never pass, on top of {@link PROVIDER_CREDENTIAL_NAMES}. */
  readonly credentialNames?: readonly string[];
  /** HERMES_RPC_SOCKET, as the script sees it. */
  readonly socketPath: string;
  readonly token: string;
  /** Directory holding hermes_tools.py, as the script sees it; first on PYTHONPATH. */
  readonly stubDir: string;
  /** The configured IANA time zone (config `timezone`): the script's TZ when set. */
  readonly timezone?: string;
}

export interface CodeEnv {
  readonly env: Record<string, string>;
  /** HERMES_* names that were dropped (logged at debug so operators can pass them through). */
  readonly droppedHermes: string[];
  /** Names that were asked to pass but are provider credentials. */
  readonly refusedPassthrough: string[];
}

export function isSecretName(name: string): boolean {
  const upper = name.toUpperCase();
  return SECRET_NAME_PARTS.some((part) => upper.includes(part));
}

function isSafeName(name: string): boolean {
  return SAFE_NAME_PREFIXES.some((prefix) => name.startsWith(prefix)) || HERMES_OPERATIONAL_NAMES.includes(name);
}

/** Builds the script's environment; see the module comment for the rules. */
export function buildCodeEnv(input: CodeEnvInput): CodeEnv {
  const credentials = new Set([...PROVIDER_CREDENTIAL_NAMES, ...(input.credentialNames ?? [])]);
  const passthrough = new Set(input.passthrough.filter((name) => !credentials.has(name)));
  const refusedPassthrough = input.passthrough.filter((name) => credentials.has(name));
  const env: Record<string, string> = {};
  const droppedHermes: string[] = [];
  for (const [name, value] of Object.entries(input.base)) {
    if (!VALID_NAME.test(name) || value.includes('\0')) continue;
    if (credentials.has(name)) continue;
    let keep: boolean;
    if (passthrough.has(name)) keep = true;
    else if (isSecretName(name)) keep = false;
    else keep = isSafeName(name);
    if (keep) env[name] = value;
    else if (name.startsWith('HERMES_')) droppedHermes.push(name);
  }
  const inherited = env.PYTHONPATH;
  Object.assign(env, {
    HERMES_RPC_SOCKET: input.socketPath,
    HERMES_RPC_TOKEN: input.token,
    PYTHONDONTWRITEBYTECODE: '1',
    PYTHONIOENCODING: 'utf-8',
    PYTHONUTF8: '1',
    PYTHONPATH: inherited ? `${input.stubDir}:${inherited}` : input.stubDir,
  });
  // TZ is not among the kept names: the configured time zone, as in the reference tool, else the
  // sandbox's own so times print as in terminal().
  const configured = input.timezone !== undefined && ZONE_NAME.test(input.timezone) ? input.timezone : undefined;
  const tz = configured ?? input.base.TZ;
  if (tz !== undefined && tz !== '') env.TZ = tz;
  return { env, droppedHermes: droppedHermes.sort(), refusedPassthrough };
}

/**
 * The variables as `NAME=VALUE` records joined by NUL, for the launcher to
 * read from stdin (values may hold newlines; NUL cannot occur in them).
 */
export function encodeEnvRecords(env: Readonly<Record<string, string>>): string {
  return Object.entries(env)
    .map(([name, value]) => `${name}=${value}\0`)
    .join('');
}
