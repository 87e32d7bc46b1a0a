/**
 * The names `terminal.backend` accepts, kept apart from the config schema
 * (config.ts) so that what only names them (the CLI's help) loads no zod.
 */

/** The backends built into Berth. */
export const BACKEND_NAMES = ['local', 'docker', 'ssh', 'singularity', 'modal', 'daytona', 'kubernetes'] as const;
/**
 * What `terminal.backend` names: a built-in backend ({@link BACKEND_NAMES}),
 * or a backend package ({@link isBackendPackageSpecifier}), whose name is
 * then the specifier as written.
 */
export type BackendName = string;

/** An npm package name (`berth-backend-x`, `@scope/x`), optionally with a subpath of its exports (`x/backend`). */
const PACKAGE_NAME = /^(?:@[a-z0-9][a-z0-9._~-]*\/)?[a-z0-9][a-z0-9._~-]*(?:\/[A-Za-z0-9._~-]+)*$/;

/** A path (`./backend`, `../x/dist/index.js`, `/opt/x`): a package directory or a module file. */
export function isBackendPath(specifier: string): boolean {
  return /^(?:\.{1,2})?\//.test(specifier);
}

/** True for a backend package specifier: an npm package name or a path (not a built-in backend's name). */
export function isBackendPackageSpecifier(specifier: string): boolean {
  if ((BACKEND_NAMES as readonly string[]).includes(specifier)) return false;
  return isBackendPath(specifier) ? !/[\0\n]/.test(specifier) : PACKAGE_NAME.test(specifier) && specifier.length <= 214;
}

/** What `terminal.backend` (and the keys that name backends) accepts, said in errors and `--backend`'s usage. */
export const BACKEND_CHOICES = `one of ${BACKEND_NAMES.join(', ')}, or a backend package (an npm package name, or a path starting with ./, ../ or /)`;
