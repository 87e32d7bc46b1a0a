/**
 * The Python client (clients/python) against real `berth serve` processes:
 * each unittest under clients/python/tests runs as its own node test, in a
 * Python that has grpcio and protobuf (Debian's python3-grpcio and
 * python3-protobuf in CI), over a real gRPC channel.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { hashApiKey } from '../../services/common/config.js';
import { buildHermesToolsModule } from '../../services/dispatcher/tools/code-execution/hermes-tools-module.js';
import { SANDBOX_TOOLS } from '../../services/dispatcher/registry/toolsets.js';
import { grpcPython, pythonBinDir } from '../support/python-bin.js';
import { REPO_ROOT, startServe, type ServeProcess } from '../support/serve-process.js';

const CLIENT_ROOT = join(REPO_ROOT, 'clients', 'python');
const TENANT_KEY = 'py-client-key';
const { python, reason } = grpcPython();

/** Test ids (tests.test_x.Class.test_y) unittest discovers under clients/python/tests. */
function discoverTests(py: string): string[] {
  const listing = execFileSync(
    py,
    [
      '-c',
      [
        'import unittest',
        'def ids(s):',
        '    for t in s:',
        '        yield from ids(t) if isinstance(t, unittest.TestSuite) else [t.id()]',
        "for i in ids(unittest.defaultTestLoader.discover('tests', top_level_dir='.')): print(i)",
      ].join('\n'),
    ],
    { cwd: CLIENT_ROOT, encoding: 'utf8' },
  );
  return listing.split('\n').filter((l) => l !== '');
}

const ids = python === undefined ? [] : discoverTests(python);

function runUnittest(py: string, id: string, env: NodeJS.ProcessEnv): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(
      py,
      ['-m', 'unittest', '-v', id],
      { cwd: CLIENT_ROOT, env: { ...process.env, PYTHONPATH: CLIENT_ROOT, ...env }, timeout: 180_000, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
        resolve({ code, output: `${stdout}${stderr}` });
      },
    );
  });
}

describe('Python client against berth serve', { skip: reason }, () => {
  let scratch: string;
  let single: ServeProcess;
  let tenants: ServeProcess;
  let env: NodeJS.ProcessEnv;

  before(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'berth-e2e-python-'));
    const work = join(scratch, 'work');
    const files = join(scratch, 'files');
    mkdirSync(work);
    mkdirSync(files);
    const serveEnv = {
      // execute_code scripts (local backend) start python3 from PATH: the real one, not a shim.
      PATH: `${pythonBinDir(scratch)}:${process.env.PATH ?? ''}`,
      HOME: scratch,
    };
    const singleConfig = join(scratch, 'single.yaml');
    writeFileSync(singleConfig, `terminal:\n  cwd: ${JSON.stringify(work)}\napprovals:\n  mode: manual\n  timeout: 120\n`);
    const tenantConfig = join(scratch, 'tenants.yaml');
    writeFileSync(
      tenantConfig,
      [
        `terminal:\n  cwd: ${JSON.stringify(work)}`,
        'allow_local_multi_tenant: true',
        'tenants:',
        `  - { id: py, api_key_sha256: ${hashApiKey(TENANT_KEY)}, approvals: { allow_yolo: false } }`,
        '',
      ].join('\n'),
    );
    [single, tenants] = await Promise.all([
      startServe(['--config', singleConfig], { env: serveEnv }),
      startServe(['--config', tenantConfig], { env: serveEnv }),
    ]);
    const sandboxModule = join(scratch, 'sandbox_hermes_tools.py');
    writeFileSync(sandboxModule, buildHermesToolsModule(SANDBOX_TOOLS));
    env = {
      BERTH_SERVER: single.address,
      BERTH_TEST_TENANT_SERVER: tenants.address,
      BERTH_TEST_TENANT_KEY: TENANT_KEY,
      BERTH_TEST_SCRATCH: files,
      BERTH_TEST_SANDBOX_HERMES_TOOLS: sandboxModule,
      PYTHONDONTWRITEBYTECODE: '1',
    };
  });

  after(async () => {
    await Promise.all([single?.stop(), tenants?.stop()]);
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  test('unittest finds the client tests', () => {
    assert.ok(ids.length >= 20, `only ${ids.length} tests found: ${ids.join(', ')}`);
    assert.ok(!ids.some((id) => id.startsWith('unittest.loader')), `a test module failed to import: ${ids.join(', ')}`);
  });

  for (const id of ids) {
    test(id.replace(/^tests\./, 'python: '), async () => {
      const { code, output } = await runUnittest(python ?? 'python3', id, env);
      assert.equal(code, 0, `${id} failed:\n${output}\n--- server log tail ---\n${single.logs().slice(-3000)}`);
      assert.match(output, /\nOK\s*$/, output);
    });
  }
});
