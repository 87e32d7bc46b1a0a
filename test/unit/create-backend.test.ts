/**
 * create-backend.ts loads only the backend it is asked for: a fresh node
 * process loads one backend's factory (and makes a local backend, config
 * only) and reports every module it loaded, ES modules through a resolve
 * hook and CommonJS ones from the require cache. No backend's folder may
 * appear in another backend's list, and the SDKs stay unloaded where they
 * are not needed.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { loadBackendFactory } from '../../services/executor/backends/create-backend.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const createBackendUrl = pathToFileURL(path.resolve(here, '../../services/executor/backends/create-backend.js')).href;
const configUrl = pathToFileURL(path.resolve(here, '../../services/common/config-load.js')).href;
const loggingUrl = pathToFileURL(path.resolve(here, '../../services/common/logging.js')).href;

const scratch = mkdtempSync(path.join(tmpdir(), 'berth-create-backend-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

// Runs in node's hooks thread: appends each resolved ES module URL to the file named in BERTH_LOADED_LOG.
const hookFile = path.join(scratch, 'record-hook.mjs');
writeFileSync(
  hookFile,
  [
    "import { appendFileSync } from 'node:fs';",
    'export async function resolve(specifier, context, next) {',
    '  const r = await next(specifier, context);',
    "  appendFileSync(process.env.BERTH_LOADED_LOG, r.url + '\\n');",
    '  return r;',
    '}',
  ].join('\n'),
);
const registerFile = path.join(scratch, 'register.mjs');
writeFileSync(
  registerFile,
  `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hookFile).href)});\n`,
);

// A cluster nobody serves: the kubernetes backend loads its client, then fails to reach it.
const kubeconfigFile = path.join(scratch, 'kubeconfig');
writeFileSync(
  kubeconfigFile,
  [
    'apiVersion: v1',
    'kind: Config',
    'clusters: [{name: nowhere, cluster: {server: "https://127.0.0.1:9"}}]',
    'users: [{name: nobody, user: {token: unused}}]',
    'contexts: [{name: nowhere, context: {cluster: nowhere, user: nobody}}]',
    'current-context: nowhere',
  ].join('\n'),
);

/** Every module (ES and CommonJS, as paths) a fresh process loaded for `name`. */
function modulesLoadedFor(name: string): string[] {
  const log = path.join(scratch, `${name}.log`);
  writeFileSync(log, '');
  const script = `
    import { createRequire } from 'node:module';
    import { fileURLToPath } from 'node:url';
    import { appendFileSync } from 'node:fs';
    const { loadBackendFactory } = await import(${JSON.stringify(createBackendUrl)});
    const create = await loadBackendFactory(${JSON.stringify(name)});
    if (${JSON.stringify(name)} === 'local') {
      const { parseConfig } = await import(${JSON.stringify(configUrl)});
      const { silentLogger } = await import(${JSON.stringify(loggingUrl)});
      const state = ${JSON.stringify(path.join(scratch, 'state'))};
      const backend = await create(parseConfig({ executor: { state_root: state }, terminal: { backend: 'local' } }), silentLogger());
      if (backend.capabilities.name !== 'local') throw new Error('not the local backend: ' + backend.capabilities.name);
    }
    if (${JSON.stringify(name)} === 'modal') {
      // Starting it loads the SDK; nothing answers at this address, so the start fails after that.
      const { parseConfig } = await import(${JSON.stringify(configUrl)});
      const { silentLogger } = await import(${JSON.stringify(loggingUrl)});
      const state = ${JSON.stringify(path.join(scratch, 'state'))};
      const config = parseConfig({ executor: { state_root: state }, terminal: { backend: 'modal', modal_image: 'python:3.12-slim' } });
      const started = await create(config, silentLogger()).then(() => 'started', (err) => String(err));
      if (!/Modal/.test(started)) throw new Error('the modal backend did not fail naming Modal: ' + started);
    }
    if (${JSON.stringify(name)} === 'kubernetes') {
      // Starting it loads the client; the kubeconfig's server does not answer, so the start fails after that.
      const { parseConfig } = await import(${JSON.stringify(configUrl)});
      const { silentLogger } = await import(${JSON.stringify(loggingUrl)});
      const config = parseConfig({ terminal: { backend: 'kubernetes', kubernetes_image: 'berth-sandbox:latest' }, kubernetes: { namespace: 'berth-sandboxes' } });
      const started = await create(config, silentLogger()).then(() => 'started', (err) => String(err));
      if (!/cannot reach the Kubernetes API server/.test(started)) throw new Error('the kubernetes backend did not fail naming the API server: ' + started);
    }
    const cjs = Object.keys(createRequire(import.meta.url).cache);
    appendFileSync(process.env.BERTH_LOADED_LOG, cjs.join('\\n') + '\\n');
  `;
  const r = spawnSync(process.execPath, ['--import', pathToFileURL(registerFile).href, '--input-type=module', '-e', script], {
    env: {
      ...process.env,
      BERTH_LOADED_LOG: log,
      MODAL_SERVER_URL: 'http://127.0.0.1:9',
      MODAL_TOKEN_ID: 'ak-unused',
      MODAL_TOKEN_SECRET: 'as-unused',
      MODAL_MAX_THROTTLE_WAIT: '0',
      KUBECONFIG: kubeconfigFile,
    },
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(r.status, 0, `loading the ${name} backend failed: ${r.stderr}`);
  return readFileSync(log, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((entry) => (entry.startsWith('file:') ? fileURLToPath(entry) : entry));
}

const BACKENDS = ['local', 'docker', 'ssh', 'singularity', 'modal', 'daytona', 'kubernetes'] as const;
const folderOf = (name: string) => `${path.sep}backends${path.sep}${name}${path.sep}`;
const pkg = (name: string) => `${path.sep}node_modules${path.sep}${name}${path.sep}`;

describe('create-backend loads one backend', () => {
  const loaded = new Map(BACKENDS.map((name) => [name, modulesLoadedFor(name)]));

  for (const name of BACKENDS) {
    it(`the ${name} backend loads its own folder and no other backend's`, () => {
      const modules = loaded.get(name) ?? [];
      assert.ok(
        modules.some((m) => m.includes(folderOf(name))),
        `${name}: its own folder was not loaded, so this test would see nothing`,
      );
      for (const other of BACKENDS.filter((b) => b !== name)) {
        const strays = modules.filter((m) => m.includes(folderOf(other)));
        assert.deepEqual(strays, [], `${name} loaded the ${other} backend`);
      }
    });
  }

  it('ssh2 is loaded by the ssh backend and by neither local, singularity nor daytona', () => {
    assert.ok(loaded.get('ssh')?.some((m) => m.includes(pkg('ssh2'))), 'the ssh backend did not load ssh2');
    for (const name of ['local', 'singularity', 'daytona'] as const) {
      assert.deepEqual(
        loaded.get(name)?.filter((m) => m.includes(pkg('ssh2'))),
        [],
        `${name} loaded ssh2`,
      );
    }
  });

  it('the Docker client is loaded by the docker backend only', () => {
    assert.ok(loaded.get('docker')?.some((m) => m.includes(pkg('dockerode'))), 'the docker backend did not load dockerode');
    for (const name of ['local', 'ssh', 'singularity', 'modal', 'daytona', 'kubernetes'] as const) {
      assert.deepEqual(
        loaded.get(name)?.filter((m) => m.includes(pkg('dockerode'))),
        [],
        `${name} loaded dockerode`,
      );
    }
  });

  it("the Modal SDK is loaded by the modal backend only, when it starts", () => {
    assert.ok(loaded.get('modal')?.some((m) => m.includes(pkg('modal'))), 'the modal backend did not load the SDK');
    for (const name of ['local', 'docker', 'ssh', 'singularity', 'daytona', 'kubernetes'] as const) {
      assert.deepEqual(
        loaded.get(name)?.filter((m) => m.includes(pkg('modal'))),
        [],
        `${name} loaded the Modal SDK`,
      );
    }
  });

  it('the Daytona SDK is loaded by the daytona backend only', () => {
    const sdk = pkg(path.join('@daytonaio', 'sdk'));
    assert.ok(loaded.get('daytona')?.some((m) => m.includes(sdk)), 'the daytona backend did not load @daytonaio/sdk');
    for (const name of ['local', 'docker', 'ssh', 'singularity', 'modal', 'kubernetes'] as const) {
      assert.deepEqual(
        loaded.get(name)?.filter((m) => m.includes(sdk) || m.includes(pkg(path.join('@daytona', 'api-client')))),
        [],
        `${name} loaded the Daytona SDK`,
      );
    }
  });

  it('the Kubernetes client is loaded by the kubernetes backend only, when it starts', () => {
    const client = pkg(path.join('@kubernetes', 'client-node'));
    assert.ok(loaded.get('kubernetes')?.some((m) => m.includes(client)), 'the kubernetes backend did not load @kubernetes/client-node');
    for (const name of BACKENDS.filter((b) => b !== 'kubernetes')) {
      assert.deepEqual(
        loaded.get(name)?.filter((m) => m.includes(client)),
        [],
        `${name} loaded @kubernetes/client-node`,
      );
    }
  });

  it('an unknown backend is refused with the list of those there are', async () => {
    await assert.rejects(loadBackendFactory('Nosuch'), {
      name: 'FailedPreconditionError',
      message: 'the Nosuch backend is not available in this version of Berth; available: local, docker, ssh, singularity, modal, daytona, kubernetes',
    });
    await assert.rejects(loadBackendFactory('toString'), /the toString backend is not available/);
    // A name that could be a package is looked for as one, and the error says both.
    await assert.rejects(loadBackendFactory('nosuch-berth-backend'), {
      name: 'FailedPreconditionError',
      message:
        "terminal.backend: 'nosuch-berth-backend' is not a built-in backend (local, docker, ssh, singularity, modal, daytona, kubernetes) and no package " +
        'of that name is installed where Berth is: install it beside Berth (npm install nosuch-berth-backend) or give its path (./path/to/package)',
    });
  });
});
