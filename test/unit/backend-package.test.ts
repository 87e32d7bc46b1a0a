/**
 * `terminal.backend` naming a backend package: the config accepts a package
 * name or a path beside the built-in names, and the executor's loader
 * imports the package's default export as the backend factory, with a clear
 * error for each way that goes wrong. The packages are small modules written
 * to a temp directory; their "backend" is a plain object (the loader only
 * checks its shape; the conformance suite proves a real one).
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseConfig } from '../../services/common/config-load.js';
import { silentLogger } from '../../services/common/logging.js';
import { loadBackendPackage } from '../../services/executor/backends/backend-package.js';
import { loadBackendFactory } from '../../services/executor/backends/create-backend.js';

/** A module whose default export is a factory resolving to a backend named `name`. */
const factoryModule = (name: string) =>
  `export default async (config) => ({ capabilities: { name: '${name}', pty: false, hostFilesystem: true, sharesRpcDir: false }, ` +
  `createEnvironment: async () => { throw new Error('unused'); }, close: async () => {}, cwdSeen: config.terminal.cwd });\n`;

let root: string;
before(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'berth-backend-package-'));
  await writeFile(path.join(root, 'file-backend.mjs'), factoryModule('from-file'));
  await mkdir(path.join(root, 'pkg', 'dist'), { recursive: true });
  await writeFile(
    path.join(root, 'pkg', 'package.json'),
    JSON.stringify({ name: 'berth-backend-pkg', type: 'module', exports: { '.': { types: './dist/index.d.ts', import: './dist/index.js' } } }),
  );
  await writeFile(path.join(root, 'pkg', 'dist', 'index.js'), factoryModule('from-package'));
  await mkdir(path.join(root, 'main-only'));
  await writeFile(path.join(root, 'main-only', 'package.json'), JSON.stringify({ type: 'module', main: 'entry.js' }));
  await writeFile(path.join(root, 'main-only', 'entry.js'), factoryModule('from-main'));
  await writeFile(path.join(root, 'not-a-factory.mjs'), 'export default { name: "x" };\n');
  await writeFile(path.join(root, 'no-default.mjs'), 'export const createBackend = () => undefined;\n');
  await writeFile(path.join(root, 'not-a-backend.mjs'), 'export default async () => ({ capabilities: { name: "half" } });\n');
  await writeFile(path.join(root, 'throws.mjs'), 'throw new Error("the plugin is broken");\n');
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

const config = parseConfig({ terminal: { cwd: '/somewhere' } });

describe('terminal.backend names a backend package', () => {
  it('the config takes a built-in name, an npm package name or a path, and refuses anything else', () => {
    for (const backend of ['docker', 'berth-backend-x', '@acme/berth-backend', '@acme/x/backend', './plugins/x', '../x/dist/index.js', '/opt/x']) {
      assert.equal(parseConfig({ terminal: { backend } }).terminal.backend, backend);
    }
    for (const backend of ['Docker', 'my backend', '', '.hidden', 'x\\y']) {
      assert.throws(
        () => parseConfig({ terminal: { backend } }),
        /must be one of local, docker, ssh, singularity, modal, daytona, kubernetes, or a backend package \(an npm package name, or a path starting with \.\/, \.\.\/ or \/\)\n {2}→ at terminal\.backend/,
        backend,
      );
    }
  });

  it('loads the default export of a module file, a package directory (exports) and one with only main', async () => {
    for (const [spec, name] of [
      ['./file-backend.mjs', 'from-file'],
      ['./pkg', 'from-package'],
      [path.join(root, 'main-only'), 'from-main'],
    ] as const) {
      const factory = await loadBackendPackage(spec, root);
      const backend = await factory(config, silentLogger());
      assert.equal(backend.capabilities.name, name, spec);
      // The factory gets the executor's configuration.
      assert.equal((backend as unknown as { cwdSeen: string }).cwdSeen, '/somewhere');
    }
  });

  it('a path is relative to the working directory, and the executor finds it from there', async () => {
    const cwd = process.cwd();
    process.chdir(root);
    try {
      const factory = await loadBackendFactory('./pkg');
      assert.equal((await factory(config, silentLogger())).capabilities.name, 'from-package');
    } finally {
      process.chdir(cwd);
    }
  });

  it('says what to do when the path is missing, the export is not a factory, or the factory makes no backend', async () => {
    await assert.rejects(loadBackendPackage('./nowhere', root), {
      name: 'FailedPreconditionError',
      message: `terminal.backend: there is no backend package at ${path.join(root, 'nowhere')} ('./nowhere', relative to the executor's working directory ${process.cwd()})`,
    });
    await assert.rejects(loadBackendPackage('./not-a-factory.mjs', root), {
      message:
        "terminal.backend: the default export of './not-a-factory.mjs' is an object, not a backend factory: export default a function " +
        '(config, logger) that resolves to a Backend (docs/backends/writing-a-backend.md)',
    });
    await assert.rejects(loadBackendPackage('./no-default.mjs', root), /the default export of '\.\/no-default\.mjs' is undefined \(no default export\), not a backend factory/);
    const half = await loadBackendPackage('./not-a-backend.mjs', root);
    await assert.rejects(half(config, silentLogger()), {
      message:
        "terminal.backend: the factory of './not-a-backend.mjs' made an object, which is not a Backend (missing createEnvironment(), close(); docs/backends/writing-a-backend.md)",
    });
    await assert.rejects(loadBackendPackage('./throws.mjs', root), {
      name: 'FailedPreconditionError',
      message: "terminal.backend: the backend package './throws.mjs' failed to load: the plugin is broken",
    });
  });
});
