/**
 * `terminal.backend` naming a backend package, end to end: `bin/berth serve
 * --backend ./examples/backend-plugin` (a path, relative to where the server
 * starts) loads the example package's default export and serves calls on it;
 * a path with no package there stops the server with what to do.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { BERTH_BIN, REPO_ROOT, startServe, type ServeProcess } from '../support/serve-process.js';

describe('berth serve with a backend package', () => {
  let serve: ServeProcess;

  before(async () => {
    serve = await startServe(['--backend', './examples/backend-plugin']);
  });

  after(async () => {
    await serve?.stop();
  });

  test('a terminal call runs in the task directory the package made, and the task keeps its shell state', async () => {
    assert.match(serve.startupOutput, /berth serving on \S+ \(backend \.\/examples\/backend-plugin; /);
    const call = async (command: string) => {
      const r = await serve.cli(['call', 'terminal', JSON.stringify({ command }), '--task', 'plugin-e2e'], { timeoutMs: 60_000 });
      assert.equal(r.code, 0, r.stderr);
      return JSON.parse(r.stdout) as { output: string; exit_code: number };
    };
    const first = await call('pwd; echo "$TMPDIR"; mkdir -p sub && cd sub && export PLUGIN_VAR=kept');
    assert.equal(first.exit_code, 0, first.output);
    const [cwd, tmp] = first.output.split('\n');
    // Under the executor's state root (the test server's BERTH_STATE_ROOT), in the package's own folder.
    assert.match(cwd ?? '', /\/subprocess\/task-[^/]+\/work$/);
    assert.equal(tmp, cwd?.replace(/\/work$/, '/tmp'));
    assert.deepEqual(await call('pwd; echo "$PLUGIN_VAR"'), { output: `${cwd}/sub\nkept`, exit_code: 0, error: null });
  });
});

test('a backend path with no package there stops berth serve, saying where it looked', async () => {
  const run = await promisify(execFile)(process.execPath, [BERTH_BIN, 'serve', '--port', '0', '--backend', './examples/no-such-backend'], {
    cwd: REPO_ROOT,
    timeout: 60_000,
  }).then(
    () => ({ code: 0, stderr: '' }),
    (err: { code?: number; stderr?: string }) => ({ code: err.code ?? -1, stderr: err.stderr ?? '' }),
  );
  assert.notEqual(run.code, 0);
  assert.match(
    run.stderr,
    /terminal\.backend: there is no backend package at \S+\/examples\/no-such-backend \('\.\/examples\/no-such-backend', relative to the executor's working directory/,
  );
});
