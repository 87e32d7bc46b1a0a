/**
 * A backend from a package (`terminal.backend` that names no built-in
 * backend): the package's default export is a {@link BackendFactory}, built
 * on `berth/backend-kit` (docs/backends/writing-a-backend.md).
 *
 * An npm package name is imported from here, so it resolves as a dependency
 * installed beside Berth does (the node_modules Berth itself is in). A path
 * (`./x`, `../x`, `/x`), relative to the executor's working directory, is a
 * module file or a package directory, whose package.json says its entry
 * (`exports` `.` for `import`, else `main`, else index.js).
 *
 * Never a silent fallback: a package that is missing, fails to load, or whose
 * default export is not a factory stops the executor with what to do.
 */
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { BACKEND_NAMES, isBackendPath } from '../../common/config.js';
import { FailedPreconditionError } from '../../common/errors.js';
import type { Backend, BackendFactory } from '../backend.js';

const GUIDE = 'docs/backends/writing-a-backend.md';

/** Loads the factory a backend package exports by default; `specifier` as `terminal.backend` gives it. */
export async function loadBackendPackage(specifier: string, cwd = process.cwd()): Promise<BackendFactory> {
  const url = isBackendPath(specifier) ? pathToFileURL(await entryOf(specifier, path.resolve(cwd, specifier))).href : specifier;
  let loaded: { readonly default?: unknown };
  try {
    loaded = (await import(url)) as { readonly default?: unknown };
  } catch (err) {
    const detail = err instanceof Error ? err.message : String(err);
    if (!isBackendPath(specifier) && isMissing(err, packageName(specifier))) {
      throw new FailedPreconditionError(
        `terminal.backend: '${specifier}' is not a built-in backend (${BACKEND_NAMES.join(', ')}) and no package of that name is installed ` +
          `where Berth is: install it beside Berth (npm install ${packageName(specifier)}) or give its path (./path/to/package)`,
        { cause: err },
      );
    }
    throw new FailedPreconditionError(`terminal.backend: the backend package '${specifier}' failed to load: ${detail}`, { cause: err });
  }
  const factory = loaded.default;
  if (typeof factory !== 'function') {
    throw new FailedPreconditionError(
      `terminal.backend: the default export of '${specifier}' is ${describe(factory)}, not a backend factory: ` +
        `export default a function (config, logger) that resolves to a Backend (${GUIDE})`,
    );
  }
  return async (config, logger, onContainerStart) => {
    const backend: unknown = await (factory as BackendFactory)(config, logger, onContainerStart);
    const missing = missingMembers(backend);
    if (missing.length > 0) {
      await Promise.resolve((backend as Partial<Backend> | undefined)?.close?.()).catch(() => undefined);
      throw new FailedPreconditionError(
        `terminal.backend: the factory of '${specifier}' made ${describe(backend)}, which is not a Backend ` +
          `(missing ${missing.join(', ')}; ${GUIDE})`,
      );
    }
    return backend as Backend;
  };
}

/** The module file a path names: the file itself, or a package directory's entry. */
async function entryOf(specifier: string, resolved: string): Promise<string> {
  const found = await stat(resolved).catch(() => undefined);
  if (!found) {
    throw new FailedPreconditionError(
      `terminal.backend: there is no backend package at ${resolved} ('${specifier}', relative to the executor's working directory ${process.cwd()})`,
    );
  }
  if (!found.isDirectory()) return resolved;
  let manifest: { exports?: unknown; main?: unknown } = {};
  try {
    manifest = JSON.parse(await readFile(path.join(resolved, 'package.json'), 'utf8')) as typeof manifest;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
      throw new FailedPreconditionError(`terminal.backend: cannot read ${path.join(resolved, 'package.json')}: ${(err as Error).message}`);
    }
  }
  const entry = exportedEntry(manifest.exports) ?? (typeof manifest.main === 'string' ? manifest.main : 'index.js');
  return path.resolve(resolved, entry);
}

/** The `import` entry of `exports` for `.`: a string, `{ ".": ... }`, or conditions (`import`, `default`). */
function exportedEntry(exports: unknown): string | undefined {
  if (typeof exports === 'string') return exports;
  if (exports === null || typeof exports !== 'object') return undefined;
  const record = exports as Record<string, unknown>;
  if ('.' in record) return exportedEntry(record['.']);
  for (const condition of ['import', 'node', 'default']) {
    const target = exportedEntry(record[condition]);
    if (target !== undefined) return target;
  }
  return undefined;
}

/** `@scope/name` or `name` of a specifier that may go on with a subpath. */
function packageName(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] ?? specifier);
}

/** The import failed because the package itself is not there (not a module it imports in turn). */
function isMissing(err: unknown, name: string): boolean {
  const code = (err as { code?: unknown } | undefined)?.code;
  return code === 'ERR_MODULE_NOT_FOUND' && err instanceof Error && err.message.includes(`'${name}'`);
}

function missingMembers(value: unknown): string[] {
  if (value === null || typeof value !== 'object') return ['capabilities', 'createEnvironment', 'close'];
  const backend = value as Record<string, unknown>;
  const capabilities = backend.capabilities as Record<string, unknown> | undefined;
  const missing: string[] = [];
  if (capabilities === null || typeof capabilities !== 'object' || typeof capabilities.name !== 'string') missing.push('capabilities.name');
  if (typeof backend.createEnvironment !== 'function') missing.push('createEnvironment()');
  if (typeof backend.close !== 'function') missing.push('close()');
  return missing;
}

function describe(value: unknown): string {
  if (value === undefined) return 'undefined (no default export)';
  if (value === null) return 'null';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}
