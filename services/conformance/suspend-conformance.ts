/**
 * The suspend/resume cases of the conformance suite (docs/suspend.md), for a
 * backend that declares `capabilities.lifecycle.suspend`; one that does not
 * is checked to refuse clearly. Driven through {@link TaskEnvironments}, as
 * the executor drives it.
 *
 * Usage, beside runBackendConformance:
 *
 *     runSuspendConformance('docker', () => DockerBackend.start({ ... }));
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { BerthError } from '../common/errors.js';
import { silentLogger } from '../common/logging.js';
import type { Backend, TaskKey } from '../executor/backend.js';
import { TaskEnvironments } from '../executor/task-environment.js';

export interface SuspendConformanceOptions {
  /** Tenant for the tasks the suite creates; default `conformance-suspend`. */
  readonly tenant?: string;
  /** Multiplies every wait, for slow backends; default 1. */
  readonly timeScale?: number;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Registers the suspend/resume conformance tests for one backend; `makeBackend` runs once, the suite closes it. */
export function runSuspendConformance(name: string, makeBackend: () => Promise<Backend>, options: SuspendConformanceOptions = {}): void {
  const scale = options.timeScale ?? 1;
  const tenant = options.tenant ?? 'conformance-suspend';
  const runId = randomBytes(4).toString('hex');
  const timeout = 90_000 * scale;

  describe(`suspend conformance: ${name}`, () => {
    let backend: Backend;
    let envs: TaskEnvironments;
    let idleEnvs: TaskEnvironments;
    let n = 0;
    const key = (): TaskKey => ({ tenant, taskId: `suspend-${runId}-${++n}` });
    const run = async (k: TaskKey, command: string, on = envs) => {
      const r = await on.exec(k, { command, timeoutMs: 30_000 * scale });
      assert.equal(r.exitCode, 0, `'${command}' in ${k.taskId} failed: ${r.output}`);
      return r;
    };

    before(async () => {
      backend = await makeBackend();
      envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
      // Suspends after a second idle; never released while the suite runs.
      idleEnvs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0, idleSuspendSeconds: 1 });
    });

    after(async () => {
      await envs?.closeAll();
      await idleEnvs?.closeAll();
      await backend?.close();
    });

    it('a backend without lifecycle.suspend refuses Suspend and Resume naming itself; one with it suspends', { timeout }, async () => {
      const k = key();
      await run(k, 'true');
      if (backend.capabilities.lifecycle?.suspend) {
        const outcome = await envs.suspend(k);
        assert.equal(outcome.suspended, true);
        assert.equal(typeof outcome.processesKept, 'boolean');
        return;
      }
      for (const call of [() => envs.suspend(k), () => envs.resume(k)]) {
        await assert.rejects(call(), (err: unknown) => {
          assert.ok(err instanceof BerthError && err.code === 'FAILED_PRECONDITION', String(err));
          assert.match(err.message, new RegExp(`the ${backend.capabilities.name} backend cannot suspend`));
          return true;
        });
      }
    });

    it('the next command resumes a suspended task transparently, with its files, cwd and exported variables', { timeout }, async (t) => {
      if (!backend.capabilities.lifecycle?.suspend) return t.skip('the backend cannot suspend');
      const k = key();
      const dir = `/tmp/berth-suspend-${runId}`;
      await run(k, `mkdir -p ${dir} && cd ${dir} && echo kept > file.txt && export SUSPEND_MARK=mark-${runId} && greet() { echo hello-$1; }`);
      const outcome = await envs.suspend(k);
      assert.equal(outcome.suspended, true);
      assert.equal(envs.isSuspended(k), true);
      assert.ok(envs.liveTasks().some((t) => t.key.taskId === k.taskId), 'a suspended task is still a live task (its quota share)');
      const r = await run(k, 'pwd; echo "$SUSPEND_MARK"; cat file.txt; greet you');
      assert.equal(r.output.trim(), `${dir}\nmark-${runId}\nkept\nhello-you`);
      assert.equal(envs.isSuspended(k), false);
      assert.equal(r.environmentRecreated, undefined, 'a resumption is not a new environment');
      const file = await envs.readFile(k, 'file.txt');
      assert.equal(file.content.toString('utf8').trim(), 'kept');
    });

    it('Resume brings a suspended task back; Suspend and Resume of a task with no environment answer false', { timeout }, async (t) => {
      if (!backend.capabilities.lifecycle?.suspend) return t.skip('the backend cannot suspend');
      const k = key();
      assert.deepEqual(await envs.suspend(k), { suspended: false, processesKept: false });
      assert.equal(await envs.resume(k), false);
      await run(k, 'echo one > /tmp/resume-file');
      assert.equal((await envs.suspend(k)).suspended, true);
      assert.equal((await envs.suspend(k)).suspended, false, 'suspended already');
      assert.equal(await envs.resume(k), true);
      assert.equal(envs.isSuspended(k), false);
      assert.equal(await envs.resume(k), false, 'not suspended any more');
      assert.equal((await run(k, 'cat /tmp/resume-file')).output.trim(), 'one');
    });

    it('Suspend is refused while a call runs on the task', { timeout }, async (t) => {
      if (!backend.capabilities.lifecycle?.suspend) return t.skip('the backend cannot suspend');
      const k = key();
      await run(k, 'true');
      const busy = envs.exec(k, { command: 'sleep 3; echo done', timeoutMs: 30_000 * scale });
      await sleep(500);
      await assert.rejects(envs.suspend(k), (err: unknown) => {
        assert.ok(err instanceof BerthError && err.code === 'FAILED_PRECONDITION', String(err));
        assert.match(err.message, /has a call running/);
        return true;
      });
      assert.equal((await busy).output.trim(), 'done');
      assert.equal((await envs.suspend(k)).suspended, true);
    });

    it('background processes a suspension does not keep are reported gone, with a notice on the next command', { timeout }, async (t) => {
      if (!backend.capabilities.lifecycle?.suspend) return t.skip('the backend cannot suspend');
      const k = key();
      await run(k, 'true');
      const { sessionId } = await envs.startBackground(k, { command: 'sleep 600' });
      const { processesKept } = await envs.suspend(k);
      const r = await run(k, 'echo after');
      const poll = JSON.parse(await envs.process(k, { action: 'poll', sessionId })) as { status: string };
      if (processesKept) {
        assert.equal(poll.status, 'running');
        assert.deepEqual(r.notices, []);
        return;
      }
      assert.equal(poll.status, 'exited');
      assert.ok(r.notices.some((notice) => /1 background process was running then and ended/.test(notice)), JSON.stringify(r.notices));
    });

    it('an idle task is suspended by itself after idle_suspend_after_s, and its next call resumes it', { timeout }, async (t) => {
      if (!backend.capabilities.lifecycle?.suspend) return t.skip('the backend cannot suspend');
      const k = key();
      await run(k, 'cd /tmp && export IDLE_MARK=idle-kept', idleEnvs);
      for (let i = 0; i < 300 && !idleEnvs.isSuspended(k); i++) await sleep(200);
      assert.equal(idleEnvs.isSuspended(k), true, 'the idle task was never suspended');
      const r = await run(k, 'pwd; echo $IDLE_MARK', idleEnvs);
      assert.equal(r.output.trim(), '/tmp\nidle-kept');
      assert.equal(idleEnvs.isSuspended(k), false);
    });

    it('a suspended task is released like any other (EndTask)', { timeout }, async (t) => {
      if (!backend.capabilities.lifecycle?.suspend) return t.skip('the backend cannot suspend');
      const k = key();
      await run(k, 'true');
      await envs.suspend(k);
      assert.equal(await envs.release(k), true);
      assert.equal(envs.has(k), false);
      assert.equal((await run(k, 'echo fresh')).output.trim(), 'fresh');
    });
  });
}
