/**
 * TaskEnvironments' suspension rules, backend-independent: a test double
 * backend wraps the local backend and declares `lifecycle.suspend`, with a
 * suspend/resume that can be held open or made to fail, so the races are
 * driven deterministically (the docker backend's real suspension is in
 * docker-suspend.test.ts).
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import type { Backend, BackendEnvironment } from '../../services/executor/backend.js';
import { LocalBackend } from '../../services/executor/backends/local/local-backend.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';

/** A gate a test opens by hand. */
function gate(): { promise: Promise<void>; open(): void } {
  let open = () => {};
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/** Test double: the local backend's environments, with a suspend/resume the test controls. */
class SuspendableDouble {
  resumeGate: { promise: Promise<void>; open(): void } | undefined;
  failNextResume = false;
  resumes = 0;
  constructor(readonly inner: Backend) {}
  backend(): Backend {
    return {
      capabilities: { ...this.inner.capabilities, name: 'suspendable-double', lifecycle: { snapshot: false, processes: false, suspend: true } },
      createEnvironment: async (key) => {
        const env = await this.inner.createEnvironment(key);
        return new Proxy(env, {
          get: (target, prop) => {
            if (prop === 'suspend') return async () => ({ processesKept: true });
            if (prop === 'resume') {
              return async () => {
                this.resumes += 1;
                await this.resumeGate?.promise;
                if (this.failNextResume) {
                  this.failNextResume = false;
                  throw new Error('the double failed to resume');
                }
              };
            }
            const value: unknown = Reflect.get(target, prop, target);
            return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
          },
        }) as BackendEnvironment;
      },
      close: () => this.inner.close(),
    };
  }
}

describe('task suspension (test double backend)', () => {
  let root: string;
  let double: SuspendableDouble;
  let envs: TaskEnvironments;
  let n = 0;
  const key = () => ({ tenant: 't', taskId: `s${++n}` });

  before(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'berth-suspension-'));
    double = new SuspendableDouble(new LocalBackend({ stateRoot: root, initialCwd: root }));
    envs = new TaskEnvironments({ backend: double.backend(), logger: silentLogger(), lifetimeSeconds: 0 });
  });

  after(async () => {
    await envs.closeAll();
    await rm(root, { recursive: true, force: true });
  });

  it('calls that arrive together on a suspended task resume it once, and all run', async () => {
    const k = key();
    await envs.exec(k, { command: 'true', timeoutMs: 10_000 });
    await envs.suspend(k);
    const before = double.resumes;
    double.resumeGate = gate();
    const calls = [1, 2, 3].map((i) => envs.exec(k, { command: `echo ${i}`, timeoutMs: 10_000 }));
    double.resumeGate.open();
    const outputs = (await Promise.all(calls)).map((r) => r.output.trim());
    double.resumeGate = undefined;
    assert.deepEqual(outputs, ['1', '2', '3']);
    assert.equal(double.resumes - before, 1);
    assert.equal(envs.isSuspended(k), false);
  });

  it('a call interrupted while the task resumes ends as interrupted; the resumption still completes and the task takes calls', async () => {
    const k = key();
    await envs.exec(k, { command: 'true', timeoutMs: 10_000 });
    await envs.suspend(k);
    double.resumeGate = gate();
    const controller = new AbortController();
    const before = double.resumes;
    const call = envs.exec(k, { command: 'echo never', timeoutMs: 10_000, signal: controller.signal });
    // Interrupted once the resumption is under way (held open by the gate).
    while (double.resumes === before) await new Promise((r) => setTimeout(r, 10));
    controller.abort();
    const r = await call;
    assert.equal(r.interrupted, true);
    double.resumeGate.open();
    double.resumeGate = undefined;
    assert.equal((await envs.exec(k, { command: 'echo after', timeoutMs: 10_000 })).output.trim(), 'after');
    // Nothing is left counted in flight: the task can be suspended again.
    assert.equal((await envs.suspend(k)).suspended, true);
  });

  it('a failed resumption fails that call; the next call resumes the task again', async () => {
    const k = key();
    await envs.exec(k, { command: 'true', timeoutMs: 10_000 });
    await envs.suspend(k);
    double.failNextResume = true;
    await assert.rejects(envs.exec(k, { command: 'true', timeoutMs: 10_000 }), /the double failed to resume/);
    assert.equal(envs.isSuspended(k), true);
    assert.equal((await envs.exec(k, { command: 'echo back', timeoutMs: 10_000 })).output.trim(), 'back');
    assert.equal(envs.isSuspended(k), false);
  });

  it('background processes the backend keeps stay running, with no notice', async () => {
    const k = key();
    await envs.exec(k, { command: 'true', timeoutMs: 10_000 });
    const { sessionId } = await envs.startBackground(k, { command: 'sleep 30' });
    assert.deepEqual(await envs.suspend(k), { suspended: true, processesKept: true });
    const r = await envs.exec(k, { command: 'true', timeoutMs: 10_000 });
    assert.deepEqual(r.notices, []);
    const poll = JSON.parse(await envs.process(k, { action: 'poll', sessionId })) as { status: string };
    assert.equal(poll.status, 'running');
    await envs.process(k, { action: 'kill', sessionId });
  });
});
