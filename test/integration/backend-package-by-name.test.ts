/**
 * `terminal.backend: berth-backend-subprocess`: a backend package named, not
 * given by path, found where a user installs one: in the node_modules of the
 * project Berth is installed in. Laid out here as npm lays it out, offline:
 * the example package (examples/backend-plugin) packed with `npm pack` and
 * installed from its tarball, and beside it Berth itself (this build's
 * package.json and dist/, its dependencies reachable as installed ones are).
 * The executor's own loader, in that copy of Berth, imports the package by
 * its name, and commands run through the backend it makes.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, lstatSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import type * as ConfigLoad from '../../services/common/config-load.js';
import type * as Logging from '../../services/common/logging.js';
import type * as BackendKit from '../../services/backend-kit/index.js';
import type * as CreateBackend from '../../services/executor/backends/create-backend.js';
import { loadBackendPackage } from '../../services/executor/backends/backend-package.js';
import { REPO_ROOT } from '../support/serve-process.js';

const PACKAGE = 'berth-backend-subprocess';
const run = promisify(execFile);

describe('a backend package installed by name', () => {
  let project: string;
  let berth: string;

  before(async () => {
    project = mkdtempSync(path.join(tmpdir(), 'berth-by-name-'));
    writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'agents-platform', private: true, type: 'module' }));
    // npm's own cache and settings for this run only: nothing read from or written to the user's, no network.
    const env = {
      ...process.env,
      npm_config_cache: path.join(project, '.npm-cache'),
      npm_config_userconfig: path.join(project, '.npmrc'),
      npm_config_update_notifier: 'false',
      npm_config_audit: 'false',
      npm_config_fund: 'false',
    };
    const packed = await run('npm', ['pack', path.join(REPO_ROOT, 'examples', 'backend-plugin'), '--pack-destination', project, '--ignore-scripts', '--json'], {
      cwd: project,
      env,
    });
    const [{ filename }] = JSON.parse(packed.stdout) as [{ filename: string }];
    // The package's peer dependency on berth is met below, as the project's own install of it.
    await run('npm', ['install', '--offline', '--ignore-scripts', '--legacy-peer-deps', '--no-package-lock', path.join(project, filename)], {
      cwd: project,
      env,
    });
    berth = path.join(project, 'node_modules', 'berth');
    mkdirSync(path.join(berth, 'dist'), { recursive: true });
    cpSync(path.join(REPO_ROOT, 'package.json'), path.join(berth, 'package.json'));
    for (const part of ['services', 'agent']) {
      cpSync(path.join(REPO_ROOT, 'dist', part), path.join(berth, 'dist', part), { recursive: true, filter: (f) => !f.endsWith('.map') });
    }
    symlinkSync(path.join(REPO_ROOT, 'node_modules'), path.join(berth, 'node_modules'));
  });

  after(() => {
    if (project) rmSync(project, { recursive: true, force: true });
  });

  const fromBerth = async <T>(module: string) => (await import(pathToFileURL(path.join(berth, 'dist', 'services', module)).href)) as T;

  test('npm installed the packed package as files of its own, and Berth where it is checked out does not find it', async () => {
    const installed = path.join(project, 'node_modules', PACKAGE);
    assert.ok(!lstatSync(installed).isSymbolicLink(), `${installed} is a link, not an installed package`);
    assert.ok(lstatSync(path.join(installed, 'dist', 'src', 'index.js')).isFile());
    await assert.rejects(loadBackendPackage(PACKAGE), {
      name: 'FailedPreconditionError',
      message: new RegExp(`'${PACKAGE}' is not a built-in backend .* and no package of that name is installed where Berth is: install it beside Berth \\(npm install ${PACKAGE}\\)`),
    });
  });

  test("the executor's loader imports it by name, and commands run through the backend it makes", async () => {
    const { loadBackendFactory } = await fromBerth<typeof CreateBackend>('executor/backends/create-backend.js');
    const { parseConfig } = await fromBerth<typeof ConfigLoad>('common/config-load.js');
    const { silentLogger } = await fromBerth<typeof Logging>('common/logging.js');
    const kit = await fromBerth<typeof BackendKit>('backend-kit/index.js');
    const stateRoot = path.join(project, 'state');
    const config = parseConfig({ terminal: { backend: PACKAGE }, executor: { state_root: stateRoot } });

    const factory = await loadBackendFactory(config.terminal.backend);
    const backend = await factory(config, silentLogger());
    try {
      assert.equal(backend.capabilities.name, 'subprocess');
      const env = await backend.createEnvironment({ tenant: 'default', taskId: 'by-name' });
      let output = '';
      const result = await env.exec({ script: 'pwd; echo "hello from $0"; exit 3', timeoutMs: 30_000, onOutput: (c) => (output += c.toString()) });
      const [cwd, greeting] = output.split('\n');
      assert.equal(result.exitCode, 3, output);
      assert.match(cwd ?? '', new RegExp(`^${stateRoot}/subprocess/task-[^/]+/work$`));
      assert.equal(greeting, 'hello from bash');
      await env.dispose('end_task');
    } finally {
      await backend.close();
    }
    // The package's berth/backend-kit is this installation's: one Berth, whose errors the executor recognises.
    await assert.rejects(backend.createEnvironment({ tenant: 'default', taskId: 'after-close' }), (err: unknown) => {
      assert.ok(err instanceof kit.FailedPreconditionError, String(err));
      assert.equal(err.message, 'the subprocess backend was closed');
      return true;
    });
  });
});
