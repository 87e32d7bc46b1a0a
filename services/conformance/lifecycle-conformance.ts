/**
 * The lifecycle part of the backend conformance suite (docs/lifecycle.md):
 * snapshots and forks, for backends whose capabilities declare
 * `lifecycle.snapshot`. A backend that does not declare it must refuse with
 * FAILED_PRECONDITION naming itself; that is checked instead.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { BerthError } from '../common/errors.js';
import { silentLogger } from '../common/logging.js';
import type { Backend, BackendSnapshot, TaskKey } from '../executor/backend.js';
import { TaskEnvironments } from '../executor/task-environment.js';

export interface LifecycleConformanceOptions {
  /**
   * Whether the backend, as configured, takes snapshots: registers the
   * snapshot and fork cases, else the case that it refuses them clearly.
   * The suite checks that its capabilities say the same.
   */
  readonly snapshots: boolean;
  /** Tenant for the tasks and snapshots the suite makes; default `conformance`. */
  readonly tenant?: string;
  /** Multiplies every wait, for slow backends; default 1. */
  readonly timeScale?: number;
}

export function runLifecycleConformance(name: string, makeBackend: () => Promise<Backend>, options: LifecycleConformanceOptions): void {
  const scale = options.timeScale ?? 1;
  const tenant = options.tenant ?? 'conformance';
  const runId = randomBytes(4).toString('hex');
  const timeout = 180_000 * scale;

  describe(`backend conformance: ${name}: lifecycle`, () => {
    let backend: Backend;
    let envs: TaskEnvironments;
    const tasks: TaskKey[] = [];
    const snapshots: string[] = [];
    let taskNo = 0;
    const newTask = (): TaskKey => {
      const key = { tenant, taskId: `${name}-life-${runId}-${++taskNo}` };
      tasks.push(key);
      return key;
    };
    const exec = async (key: TaskKey, command: string) => {
      const r = await envs.exec(key, { command, timeoutMs: 60_000 * scale });
      assert.equal(r.exitCode, 0, `${command}: ${r.output}`);
      return r.output;
    };
    const snapshot = async (key: TaskKey, label = ''): Promise<BackendSnapshot> => {
      const s = await envs.lifecycle.snapshot(key, label);
      snapshots.push(s.id);
      return s;
    };

    before(async () => {
      backend = await makeBackend();
      envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
    });

    after(async () => {
      await envs?.closeAll();
      if (backend?.capabilities.lifecycle?.snapshot) {
        for (const id of snapshots) await envs.lifecycle.delete(tenant, id).catch(() => undefined);
      }
      await backend?.close();
    });

    it(options.snapshots ? 'declares snapshots and has the methods for them' : 'refuses snapshots naming itself', { timeout }, async () => {
      assert.equal(backend.capabilities.lifecycle?.snapshot === true, options.snapshots, 'capabilities.lifecycle.snapshot');
      if (options.snapshots) {
        assert.equal([backend.snapshot, backend.listSnapshots, backend.deleteSnapshot].every((m) => typeof m === 'function'), true);
        return;
      }
      const key = newTask();
      await exec(key, 'true');
      await assert.rejects(envs.lifecycle.snapshot(key, ''), (err: unknown) => {
        assert.ok(err instanceof BerthError);
        assert.equal(err.code, 'FAILED_PRECONDITION');
        assert.match(err.message, new RegExp(`the ${backend.capabilities.name} backend cannot snapshot`));
        return true;
      });
    });

    if (!options.snapshots) return;

    describe('snapshots and forks', () => {
      let source: TaskKey;
      let snap: BackendSnapshot;
      let workdir: string;

      before(async () => {
        source = newTask();
        workdir = (await exec(source, 'mkdir -p ~/proj/sub && cd ~/proj/sub && pwd')).trim();
        await exec(source, 'printf source-file > ~/proj/a.txt && export FORK_VAR="kept value"; hello() { echo "hi $1"; }');
        snap = await snapshot(source, 'first');
      });

      it('lists the snapshot with what it holds', { timeout }, async () => {
        assert.equal(snap.sourceTaskId, source.taskId);
        assert.equal(snap.label, 'first');
        assert.equal(snap.includesProcesses, backend.capabilities.lifecycle?.processes === true);
        const listed = await envs.lifecycle.list(tenant);
        assert.deepEqual(listed.find((s) => s.id === snap.id)?.sourceTaskId, source.taskId);
        assert.equal(await envs.lifecycle.list(`${tenant}-other`).then((l) => l.some((s) => s.id === snap.id)), false);
      });

      it('a fork sees the files, cwd, variables and functions of its source at snapshot time, and can write its files', { timeout }, async () => {
        const fork = newTask();
        await envs.lifecycle.fork(fork, snap.id);
        const out = await exec(fork, 'pwd; cat ../a.txt; echo; echo "$FORK_VAR"; hello fork; echo more >> ../a.txt && echo wrote');
        assert.equal(out, `${workdir}\nsource-file\nkept value\nhi fork\nwrote\n`);
      });

      it('source and fork diverge independently', { timeout }, async () => {
        const fork = newTask();
        await envs.lifecycle.fork(fork, snap.id);
        await exec(source, 'echo from-source > ~/proj/only-source && export FORK_VAR=source-changed');
        await exec(fork, 'echo from-fork > ~/proj/only-fork && export FORK_VAR=fork-changed && cd /');
        assert.equal(await exec(source, '(cd ~/proj && printf "%s\\n" *); echo "$FORK_VAR"; pwd'), `a.txt\nonly-source\nsub\nsource-changed\n${workdir}\n`);
        assert.equal(await exec(fork, '(cd ~/proj && printf "%s\\n" *); echo "$FORK_VAR"; pwd'), 'a.txt\nonly-fork\nsub\nfork-changed\n/\n');
        await exec(source, 'rm ~/proj/only-source && export FORK_VAR="kept value"');
      });

      it('a fork of a fork has what both added', { timeout }, async () => {
        const first = newTask();
        await envs.lifecycle.fork(first, snap.id);
        await exec(first, 'echo second-gen > ~/proj/gen2 && export GEN=2');
        const snap2 = await snapshot(first);
        const second = newTask();
        await envs.lifecycle.fork(second, snap2.id);
        assert.equal(await exec(second, 'cat ../a.txt ../gen2; echo; echo "$GEN $FORK_VAR"; pwd'), `source-filesecond-gen\n\n2 kept value\n${workdir}\n`);
      });

      it('deleting a snapshot leaves its forks working and makes its id unknown', { timeout }, async () => {
        const own = await snapshot(source, 'to delete');
        const fork = newTask();
        await envs.lifecycle.fork(fork, own.id);
        assert.equal(await envs.lifecycle.delete(tenant, own.id), true);
        assert.equal(await exec(fork, 'cat ../a.txt && echo x > new && cat new'), 'source-filex\n');
        assert.equal((await envs.lifecycle.list(tenant)).some((s) => s.id === own.id), false);
        assert.equal(await envs.lifecycle.delete(tenant, own.id), false);
        await assert.rejects(envs.lifecycle.fork(newTask(), own.id), (err: unknown) => err instanceof BerthError && err.code === 'NOT_FOUND');
      });

      it('a snapshot waits for the running command, and a fork runs the background processes its snapshot says it holds', { timeout }, async () => {
        const busy = newTask();
        await exec(busy, 'mkdir -p ~/w && cd ~/w');
        const started = await envs.startBackground(busy, { command: 'sleep 600' });
        const running = envs.exec(busy, { command: 'touch started; sleep 3; echo late > late', timeoutMs: 60_000 * scale });
        for (let i = 0; i < 600 && !(await envs.stat(busy, 'started')).exists; i++) await sleep(50);
        const s = await snapshot(busy);
        assert.equal((await running).exitCode, 0);
        const fork = newTask();
        await envs.lifecycle.fork(fork, s.id);
        assert.equal(await exec(fork, 'cat late'), 'late\n', 'the snapshot was taken after the command ended');
        const count = 'ps -eo args | grep -c "^[s]leep 600" || true';
        assert.equal(await exec(busy, count), '1\n', `the source still runs ${started.sessionId}`);
        assert.equal(await exec(fork, count), s.includesProcesses ? '1\n' : '0\n', 'a fork runs what its snapshot says it holds');
      });

      it("another tenant's snapshot id is unknown", { timeout }, async () => {
        const other = { tenant: `${tenant}-other`, taskId: `${name}-life-${runId}-other` };
        tasks.push(other);
        await assert.rejects(envs.lifecycle.fork(other, snap.id), (err: unknown) => err instanceof BerthError && err.code === 'NOT_FOUND');
        assert.equal(await envs.lifecycle.delete(other.tenant, snap.id), false);
        assert.ok((await envs.lifecycle.list(tenant)).some((s) => s.id === snap.id), 'the owner still has it');
      });
    });
  });
}
