/**
 * docs/ci.md's pipeline step, run as a CI job would run it: from a checked-out
 * project, with `berth` on the PATH. It passes when the project's tests
 * pass, fails when they fail, and leaves no server behind either way. (The
 * denial of a command nobody can approve, with the step's status 4, is
 * test/e2e/approval.test.ts's.)
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fencedBlocks } from '../support/markdown-docs.js';
import { makeUserDirectory, type UserDirectory } from '../support/user-directory.js';
import { pidsRunning } from '../support/host-processes.js';

/** The sh block under "## A pipeline step" of docs/ci.md. */
function recipe(): string {
  const page = readFileSync(new URL('../../../docs/ci.md', import.meta.url), 'utf8');
  const heading = page.split('\n').indexOf('## A pipeline step') + 1;
  const block = fencedBlocks('docs/ci.md').find((b) => b.lang === 'sh' && b.line > heading);
  assert.ok(block, 'docs/ci.md has the pipeline step');
  return block.body;
}

/** A CI job's environment: this process's, less what an enclosing `make test` passes down (a sub-make would print "Entering directory"). */
function jobEnv(): NodeJS.ProcessEnv {
  const { MAKELEVEL: _level, MAKEFLAGS: _flags, MFLAGS: _mflags, ...env } = process.env;
  return env;
}

function runStep(project: string, path: string): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', recipe()], {
      cwd: project,
      // The runner's temp directory holds Berth's state in CI; here, the project's own.
      env: { ...jobEnv(), PATH: path, BERTH_SERVER: '', BERTH_NON_INTERACTIVE: '', BERTH_STATE_ROOT: join(project, '.berth-state') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code: code ?? -1, output }));
  });
}

describe('the CI recipe of docs/ci.md', () => {
  let user: UserDirectory;
  before(() => {
    user = makeUserDirectory('berth-e2e-ci-');
  });
  after(() => user.remove());

  const project = (name: string, testRecipe: string) => {
    const dir = join(user.root, name);
    mkdirSync(dir);
    writeFileSync(join(dir, 'Makefile'), `test:\n\t${testRecipe}\n`);
    return dir;
  };
  const serversOf = (dir: string) => pidsRunning(`--config berth-ci.yaml`).filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/environ`, 'utf8').includes(`TERMINAL_CWD=${dir}`);
    } catch {
      return false;
    }
  });

  test('passing tests: the step passes, and the server it started is gone', async () => {
    const dir = project('green', 'echo all-green');
    const r = await runStep(dir, user.path);
    assert.equal(r.code, 0, r.output);
    assert.match(r.output, /"output":"echo all-green\\nall-green","exit_code":0/);
    assert.deepEqual(serversOf(dir), []);
  });

  test('failing tests: the step fails with status 1', async () => {
    const dir = project('red', 'echo failing; exit 2');
    const r = await runStep(dir, user.path);
    assert.equal(r.code, 1, r.output);
    assert.match(r.output, /"exit_code":2/);
    assert.deepEqual(serversOf(dir), []);
  });
});
