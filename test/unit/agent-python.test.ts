/**
 * The exec agent's own unit tests, in Python (sandbox-image/agent/tests:
 * stdlib unittest, so nothing to install): framing and its bounds, files,
 * the linger socket and the bridge of a resume, the archive's entry point,
 * commands (spawn, output, exits, stdin, kills), terminals, the socket
 * relay and the task's user. A skipped Python test fails here.
 * Each Python test is one test here, so they run and count with the suite.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { fencedBlocks } from '../support/markdown-docs.js';
import { realPython } from '../support/python-bin.js';
import { REPO_ROOT } from '../support/serve-process.js';

interface PythonTest {
  readonly test: string;
  readonly outcome: string;
  readonly detail: string;
}

/** The command docs/development.md gives for these tests (the block it says this file covers), run as shown. */
const documented = fencedBlocks('docs/development.md').find((b) => b.note?.endsWith('covered by test/unit/agent-python.test.ts'));
if (!documented) throw new Error('docs/development.md shows no command covered by test/unit/agent-python.test.ts');
// From the checkout's root; its python3 the real interpreter, not a version manager's shim. (-B: no __pycache__.)
const run = spawnSync('bash', ['-c', documented.body], {
  cwd: REPO_ROOT,
  env: { ...process.env, PATH: `${path.dirname(realPython())}:${process.env.PATH ?? ''}` },
  encoding: 'utf8',
  timeout: 180_000,
});
const results: PythonTest[] = (run.stdout ?? '')
  .split('\n')
  .filter((line) => line.startsWith('{'))
  .map((line) => JSON.parse(line) as PythonTest);

describe("the exec agent's Python unit tests", () => {
  it('ran to the end, with tests of every module of the agent', () => {
    assert.equal(run.error, undefined, String(run.error));
    assert.equal(run.status, 0, `${documented.body} exited ${run.status}; its stderr:\n${run.stderr}`);
    const modules = new Set(results.map((r) => r.test.split('.')[1]));
    for (const module of [
      'test_protocol',
      'test_files',
      'test_resume',
      'test_entry',
      'test_processes',
      'test_terminal',
      'test_relay',
      'test_taskuser',
      'test_linger',
    ]) assert.ok(modules.has(module), `no test of ${module} ran`);
  });

  for (const result of results) {
    it(result.test, () => {
      assert.equal(result.outcome, 'ok', result.detail);
    });
  }
});
