/**
 * Which environment variables are provider secrets: the names no sandbox
 * gets unless an operator passes them through.
 */
/**
 * Parts of environment variable names that mark provider secrets, matched
 * case-insensitively anywhere in the name. Backends drop such variables from
 * children's environments unless an operator passes them through, and the
 * bootstrap drops any that a login profile (say `~/.profile` exporting an API
 * key) adds, so the snapshot never smuggles one in.
 */
export const PROVIDER_SECRET_NAME_PARTS: readonly string[] = [
  'KEY',
  'TOKEN',
  'SECRET',
  'PASSWORD',
  'CREDENTIAL',
  'PASSWD',
  'AUTH',
  'DSN',
  'WEBHOOK',
  'CREDS',
  'BEARER',
  'APIKEY',
];

/**
 * Settings of the service's own providers that do not look secret by name but
 * are not the sandbox's business either (the web tools' endpoints: an
 * internal search server's address is topology a sandbox should not learn).
 */
export const SERVICE_ENV_NAMES: ReadonlySet<string> = new Set([
  'SEARXNG_URL',
  'SEARXNG_TIMEOUT',
  'TAVILY_API_URL',
  'TAVILY_BASE_URL',
]);

/**
 * True when `name` looks like it holds a provider secret (see
 * {@link PROVIDER_SECRET_NAME_PARTS}) or is one of {@link SERVICE_ENV_NAMES}.
 */
export function isProviderSecretName(name: string): boolean {
  const upper = name.toUpperCase();
  return SERVICE_ENV_NAMES.has(upper) || PROVIDER_SECRET_NAME_PARTS.some((part) => upper.includes(part));
}

/** `base` without unset values and without provider secrets, but for the names in `passthrough`. */
export function withoutProviderSecrets(
  base: Readonly<Record<string, string | undefined>>,
  passthrough: readonly string[] = [],
): Record<string, string> {
  const allowed = new Set(passthrough);
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(base)) {
    if (value !== undefined && (!isProviderSecretName(name) || allowed.has(name))) env[name] = value;
  }
  return env;
}
