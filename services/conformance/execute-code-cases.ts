/**
 * The conformance case of execute_code on a backend whose environments run
 * scripts themselves: a script and the terminal see the same files and cwd.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { silentLogger } from '../common/logging.js';
import { CodeRunner } from '../executor/code-execution/code-runner.js';
import { buildHermesToolsModule } from '../dispatcher/tools/code-execution/hermes-tools-module.js';
import type { BackendSuite } from './backend-suite.js';

/** execute_code in the task's own environment. */
export function executeCodeCases(suite: BackendSuite): void {
  const { runId, scale, testTimeoutMs, newTask, exec } = suite;
  describe('execute_code', () => {
    it("a script sees terminal's files and cwd, and terminal sees the script's", { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const dir = (await exec(key, 'mktemp -d')).output.trim();
      assert.match(dir, /^\//);
      const made = await exec(key, `cd ${dir} && printf 'from terminal ${runId}' > from-terminal.txt`);
      assert.equal(made.exitCode, 0, made.output);
      const runner = new CodeRunner(suite.envs, { logger: silentLogger(), killGraceMs: 1000 });
      const code = `import json, os
print(json.dumps({"cwd": os.getcwd(), "read": open("from-terminal.txt").read()}))
open("from-script.txt", "w").write("from script ${runId}")
`;
      const r = await runner.run(key, {
        code,
        stubModule: buildHermesToolsModule(['terminal']),
        mode: 'project',
        timeoutMs: 60_000 * scale,
        maxStdoutBytes: 50_000,
        maxStderrBytes: 10_000,
        envPassthrough: [],
        credentialEnv: [],
        allowedTools: ['terminal'],
        allowHostSubprocess: true,
        onToolCall: () => Promise.resolve(JSON.stringify({ error: 'no tool calls in this case' })),
      });
      assert.equal(r.exitCode, 0, r.stderr);
      assert.deepEqual(JSON.parse(r.stdout), { cwd: dir, read: `from terminal ${runId}` });
      assert.ok(!r.notices.some((n) => /code container/.test(n)), JSON.stringify(r.notices));
      assert.equal((await exec(key, 'cat from-script.txt')).output, `from script ${runId}`);
    });
  });
}
