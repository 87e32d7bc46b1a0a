/**
 * The exec agent's own unit tests, in Python (sandbox-image/agent/tests:
 * stdlib unittest, so nothing to install): framing and its bounds, files,
 * the linger socket and the bridge of a resume, the archive's entry point.
 * Each Python test is one test here, so they run and count with the suite.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { AGENT_SOURCE_DIR } from '../support/agent-variant.js';
import { realPython } from '../support/python-bin.js';

interface PythonTest {
  readonly test: string;
  readonly outcome: string;
  readonly detail: string;
}

// -B: nothing written into the checkout (__pycache__).
const run = spawnSync(realPython(), ['-B', path.join(AGENT_SOURCE_DIR, 'tests', 'run.py')], {
  cwd: AGENT_SOURCE_DIR,
  encoding: 'utf8',
  timeout: 180_000,
});
const results: PythonTest[] = (run.stdout ?? '')
  .split('\n')
  .filter((line) => line.startsWith('{'))
  .map((line) => JSON.parse(line) as PythonTest);

describe("the exec agent's Python unit tests", () => {
  it('ran to the end, with tests of the protocol, files, resume and the entry point', () => {
    assert.equal(run.error, undefined, String(run.error));
    assert.equal(run.status, 0, `tests/run.py exited ${run.status}; its stderr:\n${run.stderr}`);
    const modules = new Set(results.map((r) => r.test.split('.')[1]));
    for (const module of ['test_protocol', 'test_files', 'test_resume', 'test_entry']) assert.ok(modules.has(module), `no test of ${module} ran`);
  });

  for (const result of results) {
    it(result.test, () => {
      assert.equal(result.outcome, 'ok', result.detail);
    });
  }
});
