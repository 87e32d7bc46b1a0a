/**
 * The daytona backend through the real SDK against the Daytona stand-in (a
 * test double backed by the local Docker engine, not the cloud): what the
 * conformance suite does not cover. Persistence across release (stop and
 * start), labels and limits as sent, the network policy, a sandbox deleted
 * under a task, and what a user sees when Daytona says no.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Daytona, DaytonaNotFoundError, type DaytonaError } from '@daytonaio/sdk';
import Dockerode from 'dockerode';
import type { BackendEnvironment, ExecOptions, TaskKey } from '../../services/executor/backend.js';
import {
  DaytonaBackend,
  sandboxName,
  type DaytonaBackendOptions,
} from '../../services/executor/backends/daytona/daytona-backend.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { DaytonaStandIn } from '../standins/daytona/server.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { startDaytonaStandIn, startStandInBackend, type RunningStandIn } from '../support/daytona-standin.js';

const docker = new Dockerode();
const skip = await dockerUnavailableReason(docker);

async function run(env: BackendEnvironment, script: string, extra: Partial<ExecOptions> = {}) {
  const chunks: Buffer[] = [];
  const r = await env.exec({ script, timeoutMs: 60_000, ...extra, onOutput: (c) => chunks.push(c) });
  return { ...r, output: Buffer.concat(chunks).toString('utf8') };
}


describe('daytona backend through the SDK against the stand-in', { skip, timeout: 600_000 }, () => {
  let standIn: RunningStandIn;
  let client: Daytona;
  const backends: DaytonaBackend[] = [];
  const tenant = `daytona-${randomBytes(4).toString('hex')}`;
  let taskNo = 0;
  /** Containers this stand-in made (it labels every one). */
  const standInContainers = () => docker.listContainers({ all: true, filters: { label: [standIn.containerLabel] } });
  const newKey = (): TaskKey => ({ tenant, taskId: `task-${++taskNo}` });

  /** Deleted, or being deleted (Daytona finishes a deletion after it answers). */
  const deleted = async (name: string): Promise<boolean> => {
    try {
      return ['destroying', 'destroyed'].includes((await client.get(name)).state ?? '');
    } catch (err) {
      if (err instanceof DaytonaNotFoundError) return true;
      throw err;
    }
  };

  const start = async (extra: Partial<DaytonaBackendOptions> = {}) => {
    const backend = await startStandInBackend(standIn, extra);
    backends.push(backend);
    return backend;
  };

  before(async () => {
    standIn = await startDaytonaStandIn();
    client = new Daytona({ apiKey: standIn.apiKey, apiUrl: standIn.apiUrl, target: 'stand-in' });
  });

  after(async () => {
    await Promise.all(backends.map((b) => b.close()));
    await client?.[Symbol.asyncDispose]();
    assert.equal(await standIn?.stop(), 0);
    assert.deepEqual(await standInContainers(), [], 'the stand-in left containers behind');
  });

  it('labels the sandbox by tenant and task and sizes it from the container keys', async () => {
    const backend = await start({ cpus: 1.5, memoryMiB: 1536 });
    const key = newKey();
    const env = await backend.createEnvironment(key);
    const sandbox = await client.get(sandboxName(key));
    assert.equal(sandbox.labels['berth.tenant'], tenant);
    assert.equal(sandbox.labels['berth.task'], key.taskId);
    // Daytona takes whole cores and GiB: rounded up.
    assert.deepEqual([sandbox.cpu, sandbox.memory], [2, 2]);
    assert.equal((await run(env, 'echo "$HOME:$PWD"')).output, '/home/sandbox:/workspace\n');
    await env.dispose();
    assert.equal(await deleted(sandboxName(key)), true);
  });

  it('persistent: release stops the sandbox and the next use of the task starts it, files kept', async () => {
    const backend = await start({ persistent: true });
    const key = newKey();
    const first = await backend.createEnvironment(key);
    await run(first, 'echo kept > /workspace/note.txt');
    const id = (await client.get(sandboxName(key))).id;
    await first.dispose();
    assert.equal((await client.get(sandboxName(key))).state, 'stopped');
    const second = await backend.createEnvironment(key);
    const sandbox = await client.get(sandboxName(key));
    assert.deepEqual([sandbox.id, sandbox.state], [id, 'started']);
    assert.equal((await run(second, 'cat /workspace/note.txt')).output, 'kept\n');
    await second.dispose();
    // Left stopped: the stand-in removes it when it exits (checked after the tests).
    assert.equal((await standInContainers()).length, 1);
  });

  it('persistent: a sandbox of the task whose build failed is replaced, not started', async () => {
    const key = newKey();
    await assert.rejects(client.create({ name: sandboxName(key), image: 'berth-no-such-image:never' }, { timeout: 30 }), /build_failed/);
    const failed = await client.get(sandboxName(key));
    assert.equal(failed.state, 'build_failed');
    const backend = await start({ persistent: true });
    const env = await backend.createEnvironment(key);
    assert.equal((await run(env, 'echo ok')).output, 'ok\n');
    const now = await client.get(sandboxName(key));
    assert.notEqual(now.id, failed.id);
    await env.dispose();
    await now.delete(60, true);
  });

  it('blocks the network when the policy says none', async () => {
    const backend = await start({ network: () => ({ networkBlockAll: true }) });
    const key = newKey();
    const env = await backend.createEnvironment(key);
    assert.equal((await client.get(sandboxName(key))).networkBlockAll, true);
    assert.equal((await run(env, 'ls /sys/class/net')).output, 'lo\n');
    await env.dispose();
  });

  it('a command outliving its timeout ends with 124 and its process group killed', async () => {
    const backend = await start();
    const env = await backend.createEnvironment(newKey());
    const r = await run(env, 'sleep 987654 & sleep 987655; echo never', { timeoutMs: 1500, killGraceMs: 200 });
    assert.deepEqual([r.exitCode, r.timedOut], [124, true]);
    assert.equal((await run(env, 'pgrep -f "sleep 98765[45]" || echo none')).output, 'none\n');
    await env.dispose();
  });

  it('starts a new sandbox, and says so, when the task\'s sandbox was deleted under it', async () => {
    const backend = await start();
    const key = newKey();
    const env = await backend.createEnvironment(key);
    await run(env, 'echo old > /workspace/old.txt');
    const before = await client.get(sandboxName(key));
    await before.delete(60, true);
    const r = await run(env, 'cat /workspace/old.txt 2>/dev/null || echo gone');
    assert.equal(r.output, 'gone\n');
    assert.match(env.takeNotices?.().join('\n') ?? '', /Daytona sandbox was deleted; a new sandbox was started: files written in the old one are gone/);
    // The typed flag behind the terminal's environment_recreated key, handed out once.
    assert.deepEqual([env.takeRecreated?.(), env.takeRecreated?.()], [true, false]);
    assert.notEqual((await client.get(sandboxName(key))).id, before.id);
    await env.dispose();
  });

  it("the SDK's per-command exec (the bench's baseline) sees the task's files; calls the stand-in lacks answer 501", async () => {
    const backend = await start();
    const key = newKey();
    const env = await backend.createEnvironment(key);
    await run(env, 'echo from-agent > /workspace/shared.txt');
    const sandbox = await client.get(sandboxName(key));
    assert.deepEqual(await sandbox.process.executeCommand('cat /workspace/shared.txt'), {
      exitCode: 0,
      result: 'from-agent\n',
      artifacts: { stdout: 'from-agent\n' },
    });
    // A call the backend does not make is not faked: a new SDK call shows up as this error.
    await assert.rejects(sandbox.fs.listFiles('/workspace'), (err: DaytonaError) => {
      assert.equal(err.statusCode, 501);
      assert.match(err.message, /^the Daytona stand-in does not implement GET toolbox \/files/);
      return true;
    });
    await env.dispose();
  });

  it('a dropped PTY connection: the agent is found again with its background processes, stdin and output still flowing', async () => {
    // In process, so the test can drop the stand-in's WebSockets as an idle-closing proxy would.
    const local = new DaytonaStandIn({ apiKey: 'local-key' });
    await local.listen();
    try {
      const backend = await start({ apiKey: 'local-key', apiUrl: local.apiUrl });
      const env = await backend.createEnvironment(newKey());
      let out = '';
      let exit: number | null | undefined;
      const bg = await env.startBackground({
        script: 'echo up; read line; echo "got $line"; sleep 876543',
        onOutput: (chunk) => (out += chunk.toString('utf8')),
        onExit: (code) => (exit = code),
      });
      for (let i = 0; i < 100 && !out.includes('up'); i++) await sleep(100);
      local.dropPtyClients();
      // The next call finds the agent again (it never saw its PTY end: the bridge tells it).
      assert.equal((await run(env, 'pgrep -f "sleep 87654[3]" >/dev/null && echo running || echo none')).output, 'running\n');
      await bg.write('again\n');
      for (let i = 0; i < 100 && !out.includes('got again'); i++) await sleep(100);
      assert.match(out, /got again/);
      assert.equal(exit, undefined);
      assert.deepEqual(env.takeNotices?.() ?? [], []);
      assert.equal(env.takeRecreated?.(), false);
      await bg.kill();
      assert.equal((await run(env, 'pgrep -f "sleep 87654[3]" >/dev/null && echo running || echo none')).output, 'none\n');
      await env.dispose();
      await backend.close();
      backends.splice(backends.indexOf(backend), 1);
    } finally {
      await local.close();
    }
  });

  it("the organization's CPU limit: a clear error naming Daytona and what to do, and nothing left", async () => {
    const local = new DaytonaStandIn({ apiKey: 'local-key', maxTotalCpu: 1 });
    await local.listen();
    try {
      const backend = await start({ apiKey: 'local-key', apiUrl: local.apiUrl });
      const first = await backend.createEnvironment(newKey());
      const refused = newKey();
      await assert.rejects(backend.createEnvironment(refused), (err: Error & { code?: string }) => {
        assert.equal(err.code, 'RESOURCE_EXHAUSTED');
        assert.match(err.message, /^Daytona's organization limits stopped creating a sandbox .* \(Total CPU limit exceeded\. Maximum allowed: 1\.\): end idle tasks/);
        return true;
      });
      assert.equal(local.sandboxes().filter((s) => s.labels['berth.task'] === refused.taskId).length, 0);
      await first.dispose();
      await backend.close();
      backends.splice(backends.indexOf(backend), 1);
    } finally {
      await local.close();
    }
  });

  it('a bad API key: the backend does not start, with a clear error naming Daytona and the fix', async () => {
    const containersBefore = (await standInContainers()).length;
    await assert.rejects(start({ apiKey: 'not-the-key' }), (err: Error & { code?: string }) => {
      assert.equal(err.code, 'UNAUTHENTICATED');
      assert.match(
        err.message,
        /^Daytona refused the API key while listing sandboxes \(checking the credentials\) \(Invalid credentials\): set DAYTONA_API_KEY/,
      );
      return true;
    });
    assert.equal((await standInContainers()).length, containersBefore);
  });

  it('an image Daytona cannot build: a clear error naming daytona_image, and the sandbox deleted', async () => {
    const backend = await start({ image: 'berth-no-such-image:never' });
    const key = newKey();
    await assert.rejects(backend.createEnvironment(key), (err: Error & { code?: string }) => {
      assert.equal(err.code, 'FAILED_PRECONDITION');
      assert.match(err.message, /Daytona could not build the sandbox image .*berth-no-such-image:never.*check terminal\.daytona_image/);
      return true;
    });
    assert.equal(await deleted(sandboxName(key)), true);
  });

  it('without credentials the backend does not start, and says which variable to set', async () => {
    const saved = process.env.DAYTONA_API_KEY;
    delete process.env.DAYTONA_API_KEY;
    try {
      await assert.rejects(
        DaytonaBackend.start({ image: SANDBOX_IMAGE, persistent: false, cpus: 1, memoryMiB: 1024, env: {}, network: () => ({}), apiUrl: standIn.apiUrl }),
        /the daytona backend has no Daytona credentials: set DAYTONA_API_KEY/,
      );
    } finally {
      if (saved !== undefined) process.env.DAYTONA_API_KEY = saved;
    }
  });
});
