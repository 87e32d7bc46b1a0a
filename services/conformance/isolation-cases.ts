/**
 * Conformance cases of isolation and release: tasks kept apart and run
 * concurrently; a released task leaves no process, state or environment
 * behind, and its id gets a fresh environment.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { BackendEnvironment } from '../executor/backend.js';
import type { BackendSuite } from './backend-suite.js';
import { uniqueSleepSeconds } from './process-probe.js';

/** Tasks kept apart, and release. */
export function isolationCases(
  suite: BackendSuite,
  options: { readonly sharedHost: boolean; readonly environmentExists?: (env: BackendEnvironment) => Promise<boolean> },
): void {
  const { scale, testTimeoutMs, newTask, exec, processAction, assertNoProcess } = suite;
  describe('isolation and release', () => {
    it('keeps two tasks apart', { timeout: testTimeoutMs }, async () => {
      const a = newTask();
      const b = newTask();
      await exec(a, 'cd / && export BERTH_ISO=a-only');
      const rb = await exec(b, 'echo "[${BERTH_ISO-}]"; pwd');
      assert.equal(rb.output.split('\n')[0], '[]');
      assert.notEqual(rb.output.split('\n')[1], '/');
      const bg = await suite.envs.startBackground(a, { command: `sleep ${uniqueSleepSeconds()}` });
      const listB = await processAction(b, 'list');
      assert.deepEqual(listB.processes, []);
      assert.equal((await processAction(b, 'poll', bg.sessionId)).status, 'not_found');
      if (!options.sharedHost) {
        await exec(a, 'echo a > /tmp/berth-iso-file');
        assert.equal((await exec(b, 'cat /tmp/berth-iso-file 2>/dev/null || echo absent')).output, 'absent\n');
      }
    });

    it('runs commands of several tasks concurrently', { timeout: testTimeoutMs }, async () => {
      const keys = [newTask(), newTask(), newTask(), newTask()];
      const results = await Promise.all(
        keys.flatMap((key, t) =>
          [0, 1, 2].map(async (c) => {
            const r = await exec(key, `sleep 0.2; echo task-${t}-cmd-${c}`);
            return { want: `task-${t}-cmd-${c}\n`, r };
          }),
        ),
      );
      for (const { want, r } of results) assert.deepEqual([r.output, r.exitCode], [want, 0]);
    });

    it('release kills background processes and removes the environment', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const seconds = uniqueSleepSeconds();
      await exec(key, 'export BERTH_RELEASED=old');
      await suite.envs.startBackground(key, { command: `sleep ${seconds}` });
      const env = suite.environment(key);
      assert.ok(env);
      assert.equal(await suite.envs.release(key), true);
      assert.equal(suite.envs.has(key), false);
      assert.equal(await suite.envs.release(key), false);
      await assert.rejects(env.exec({ script: 'true', timeoutMs: 5000 * scale }));
      if (options.environmentExists) {
        assert.equal(await options.environmentExists(env), false, `${env.description} still exists after release`);
      }
      if (options.sharedHost) {
        const other = newTask();
        await assertNoProcess(other, `${seconds}`, 'after release');
        if (!options.environmentExists) {
          const gone = await exec(other, `test -e '${env.stateDir}' && echo present || echo gone`);
          assert.equal(gone.output, 'gone\n', `state dir ${env.stateDir} left behind`);
        }
      }
      // The same task id gets a fresh environment afterwards.
      assert.equal((await exec(key, 'echo "[${BERTH_RELEASED-}]"')).output, '[]\n');
    });
  });
}
