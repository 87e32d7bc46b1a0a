/**
 * deploy/compose.yaml for real: the Berth image, 2 dispatchers behind the
 * balancer's published port, executors on the docker backend of this host's
 * engine, Prometheus. The README tour runs through it; executors scale
 * 3 → 4 → 2 with tasks alive; one executor and one dispatcher are killed;
 * `down` leaves no container, network or volume behind.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import Dockerode from 'dockerode';
import { ClientError, Status, createChannel, createClient, type Channel } from 'nice-grpc';
import { DispatcherDefinition, type DispatcherClient } from '../../services/gen/berth/v1/dispatcher.js';
import { dockerUnavailableReason } from '../support/docker-fixtures.js';
import { REPO_ROOT } from '../support/serve-process.js';
import { toolsRequired } from '../support/require-tools.js';
import { freePort } from '../support/free-port.js';

const run = promisify(execFile);
const COMPOSE_FILE = join(REPO_ROOT, 'deploy', 'compose.yaml');
const docker = new Dockerode();

async function prerequisites(): Promise<string | undefined> {
  const reason = await dockerUnavailableReason(docker);
  if (reason) return reason;
  try {
    await run('docker-compose', ['version']);
  } catch {
    const missing = 'docker-compose is not installed (apt-get install docker-compose)';
    if (toolsRequired()) throw new Error(missing);
    return missing;
  }
  return undefined;
}

type Result = { output?: string; error?: string | null; [key: string]: unknown };

describe('the compose stack', async () => {
  const skip = await prerequisites();
  const project = `berthdeploy${randomBytes(4).toString('hex')}`;
  const stateDir = mkdtempSync(join(tmpdir(), 'berth-compose-state-'));
  let env: NodeJS.ProcessEnv = {};
  let channel: Channel | undefined;
  let client: DispatcherClient;
  let holdersNow = new Map<string, string>();
  /** Task ids of this run: their volumes are removed at the end. */
  const taskIds = new Set<string>();
  /** Tasks whose sandbox was on the executor the kill test kills: nobody drains those. */
  const onKilledExecutor = new Set<string>();

  const compose = async (...args: string[]) =>
    (await run('docker-compose', ['-p', project, '-f', COMPOSE_FILE, ...args], { env, maxBuffer: 16 * 1024 * 1024 })).stdout;
  const containerOf = (service: string, n: number) => `${project}_${service}_${n}`;

  /** A tool call through the published port; UNAVAILABLE (a replica or executor just went) is retried, as a client would. */
  async function call(taskId: string, name: string, args: unknown): Promise<Result> {
    taskIds.add(taskId);
    for (let attempt = 0; ; attempt++) {
      try {
        const r = await client.callTool({ name, argumentsJson: JSON.stringify(args), taskId, sessionId: '' });
        return JSON.parse(r.resultJson) as Result;
      } catch (err) {
        if (!(err instanceof ClientError && err.code === Status.UNAVAILABLE) || attempt >= 160) throw err;
        await sleep(250);
      }
    }
  }
  const sh = (taskId: string, command: string) => call(taskId, 'terminal', { command });

  /** The backend identity (`berth.executor` label) of each running executor container. */
  async function executorIdentities(): Promise<Map<string, string>> {
    const byIdentity = new Map<string, string>();
    const containers = await docker.listContainers({ filters: { label: [`com.docker.compose.project=${project}`, 'com.docker.compose.service=executor'] } });
    for (const c of containers) {
      const name = c.Names[0]!.replace(/^\//, '');
      const { stdout, stderr } = await run('docker', ['logs', name]);
      const m = /"berth\.executor":"(ex-[0-9a-f]+)"/.exec(stdout + stderr);
      if (m) byIdentity.set(m[1]!, name);
    }
    return byIdentity;
  }
  /** Which executor container holds each task's sandbox now (absent: none). */
  async function holders(tasks: readonly string[]): Promise<Map<string, string>> {
    const ids = await executorIdentities();
    const out = new Map<string, string>();
    for (const t of tasks) {
      const [sandbox] = await docker.listContainers({ filters: { label: [`berth.task=${t}`] } });
      const owner = sandbox && ids.get(sandbox.Labels['berth.executor'] ?? '');
      if (owner) out.set(t, owner);
    }
    return out;
  }

  before(async () => {
    if (skip) return;
    // Built once here (incremental: the layers of an unchanged tree are reused).
    // From the dist/ these tests run from: recompiling here would rewrite files other test files are loading.
    await run(join(REPO_ROOT, 'scripts', 'build-deploy-image.sh'), [], {
      maxBuffer: 64 * 1024 * 1024,
      env: { ...process.env, BERTH_DEPLOY_NO_TSC: '1' },
    });
    chmodSync(stateDir, 0o700);
    const port = await freePort();
    env = {
      ...process.env,
      BERTH_EXECUTOR_SECRET: randomBytes(16).toString('hex'),
      DOCKER_GID: String(statSync('/var/run/docker.sock').gid),
      BERTH_STATE_DIR: stateDir,
      BERTH_UID: String(process.getuid?.() ?? 10001),
      BERTH_GID: String(process.getgid?.() ?? 10001),
      BERTH_PORT: String(port),
      BERTH_PROMETHEUS_PORT: String(await freePort()),
    };
    await compose('up', '-d');
    channel = createChannel(`127.0.0.1:${port}`);
    client = createClient(DispatcherDefinition, channel);
    // Ready when a call through the balancer reaches a dispatcher with executors in rotation.
    for (let attempt = 0; ; attempt++) {
      try {
        const r = await client.callTool({ name: 'terminal', argumentsJson: '{"command":"true"}', taskId: `${project}-ready`, sessionId: '' });
        taskIds.add(`${project}-ready`);
        if ((JSON.parse(r.resultJson) as Result).error === null) break;
      } catch (err) {
        if (attempt >= 120) throw err;
      }
      await sleep(500);
    }
  });

  after(async () => {
    channel?.close();
    if (skip) return;
    await compose('down', '-v', '--remove-orphans', '-t', '5').catch(() => undefined);
    // Sandboxes of a killed executor and the tasks' persistent volumes outlive the stack by design.
    for (const t of taskIds) {
      for (const c of await docker.listContainers({ all: true, filters: { label: [`berth.task=${t}`] } })) {
        await docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined);
      }
    }
    for (const t of taskIds) {
      const { Volumes } = await docker.listVolumes({ filters: { label: [`berth.task=${t}`] } });
      for (const v of Volumes ?? []) await docker.getVolume(v.Name).remove().catch(() => undefined);
    }
    rmSync(stateDir, { recursive: true, force: true });
  });

  test('the README tour through the published port', { skip }, async () => {
    const t = `${project}-tour`;
    const tools = await client.listTools({ enabledToolsets: ['terminal', 'file'], disabledToolsets: [] });
    assert.deepEqual(
      JSON.parse(tools.toolsJson).map((x: { function: { name: string } }) => x.function.name).sort(),
      ['patch', 'process_manage', 'read_file', 'search_files', 'terminal', 'write_file'],
    );
    assert.deepEqual(await sh(t, 'cd /tmp && export FOO=bar'), { output: '', exit_code: 0, error: null, cwd: '/tmp' });
    assert.deepEqual(await sh(t, 'pwd; echo $FOO'), { output: '/tmp\nbar', exit_code: 0, error: null });
    const grep = await sh(t, 'grep -r nothing-here /etc/hostname');
    assert.equal(grep.exit_code, 1);
    assert.equal(grep.exit_code_meaning, 'No matches found (not an error)');
    const bg = await call(t, 'terminal', { command: 'sleep 30; echo done', background: true });
    assert.match(String(bg.session_id), /^proc_/);
    const list = (await call(t, 'process', { action: 'list' })) as { processes?: Array<{ session_id: string; status: string }> };
    assert.ok(list.processes?.some((p) => p.session_id === bg.session_id && p.status === 'running'));
    assert.deepEqual(await call(t, 'write_file', { path: 'notes/todo.txt', content: 'ship it\n' }), {
      bytes_written: 8,
      dirs_created: true,
      resolved_path: '/tmp/notes/todo.txt',
      files_modified: ['/tmp/notes/todo.txt'],
    });
    assert.equal((await call(t, 'read_file', { path: 'notes/todo.txt' })).content, '1|ship it');
    assert.deepEqual(await call(t, 'nope', {}), { error: 'Unknown tool: nope' });
  });

  test('scaling executors 3 → 4 → 2 keeps every task\'s state but on the executors removed, which say so', { skip }, async () => {
    const early = Array.from({ length: 8 }, (_, i) => `${project}-early-${i}`);
    for (const t of early) assert.equal((await sh(t, `export WHO=${t}; echo ${t} > /workspace/who`)).error, null);

    await compose('up', '-d', '--scale', 'executor=4', '--scale', 'dispatcher=2', '--no-recreate');
    // Once the dispatchers route to the fourth executor, some new tasks land there.
    const late: string[] = [];
    const fourth = containerOf('executor', 4);
    for (let i = 0; i < 40 && !late.some((t) => holdersNow.get(t) === fourth); i++) {
      const t = `${project}-late-${i}`;
      late.push(t);
      assert.equal((await sh(t, `export WHO=${t}; echo ${t} > /workspace/who`)).error, null);
      holdersNow = await holders(late);
      if (i % 4 === 3) await sleep(1000);
    }
    assert.ok(late.some((t) => holdersNow.get(t) === fourth), 'the new executor takes new tasks');
    for (const t of early) assert.equal((await sh(t, 'echo $WHO')).output, t, `${t} kept its shell after the scale-up`);

    const all = [...early, ...late];
    const before = await holders(all);
    const running = async () => new Set((await executorIdentities()).values());
    const fourExecutors = await running();
    await compose('up', '-d', '--scale', 'executor=2', '--scale', 'dispatcher=2', '--no-recreate');
    const twoExecutors = await running();
    assert.equal(twoExecutors.size, 2);
    const removed = new Set([...fourExecutors].filter((c) => !twoExecutors.has(c)));
    const onRemoved = all.filter((t) => removed.has(before.get(t) ?? ''));
    assert.ok(onRemoved.length > 0, 'some tasks lived on the executors removed');
    for (const t of all) {
      const r = await sh(t, 'echo $WHO');
      if (onRemoved.includes(t)) {
        assert.match(String(r.error), new RegExp(`environment of task '${t}' was lost: its executor \\(\\S+\\) (was shut down|is gone from the executor membership)`));
        const resumed = await sh(t, 'echo "[$WHO]"; cat /workspace/who');
        assert.match(
          String(resumed.output),
          new RegExp(`^\\[\\]\\n${t}\\n\\[Note: This task's environment was started anew.*were kept in the task's volumes`, 's'),
          JSON.stringify(resumed),
        );
      } else {
        assert.deepEqual(r, { output: t, exit_code: 0, error: null }, `${t} on a remaining executor noticed nothing`);
      }
    }
  });
  test('a killed executor: its tasks get one lost-environment error and continue; the others notice nothing', { skip }, async () => {
    const tasks = Array.from({ length: 6 }, (_, i) => `${project}-kill-${i}`);
    for (const t of tasks) assert.equal((await sh(t, `export WHO=${t}`)).error, null);
    const where = await holders(tasks);
    const victim = where.get(tasks[0]!)!;
    // Any earlier task may live there too (placement is by hash): its sandbox is not drained either.
    for (const [t, holder] of await holders([...taskIds])) if (holder === victim) onKilledExecutor.add(t);
    // The victim labels its sandboxes with its own container, so the others know it is gone the moment it exits.
    const victimId = (await docker.getContainer(victim).inspect()).Id;
    const labelled = await docker.listContainers({ filters: { label: [`berth.executor.container=${victimId}`] } });
    assert.ok(labelled.length > 0, 'the executor labels its sandboxes with its container id');
    await run('docker', ['kill', victim]);
    for (const t of tasks) {
      if (where.get(t) === victim) {
        // Until the dispatcher's health checks give up on it, calls fail as UNAVAILABLE (retried by call()).
        let r = await sh(t, 'echo $WHO');
        for (let i = 0; i < 40 && !r.error; i++) {
          await sleep(250);
          r = await sh(t, 'echo $WHO');
        }
        assert.match(String(r.error), new RegExp(`environment of task '${t}' was lost: its executor \\(\\S+\\) (stopped answering|is gone from the executor membership)`));
        const fresh = await sh(t, 'echo "[$WHO]"');
        assert.equal(fresh.error, null);
        assert.match(String(fresh.output), /^\[\]\n\[Note: This task's environment was started anew .*were kept in the task's volumes/s);
      } else {
        assert.deepEqual(await sh(t, 'echo $WHO'), { output: t, exit_code: 0, error: null });
      }
    }
    // The executor taking a task over saw at once that the victim's container had exited: no call was told to
    // retry until the victim's heartbeat went stale.
    assert.doesNotMatch(await compose('logs', '--no-color', 'dispatcher'), /still counts as running/);
  });

  test('a killed dispatcher: the client reconnects through the port to the other replica and carries on', { skip }, async () => {
    const t = `${project}-replica`;
    assert.equal((await sh(t, 'export WHO=replica; echo x > /workspace/f')).error, null);
    // The replica the client's connection goes to is the one that logged the call.
    let served: string | undefined;
    for (const n of [1, 2]) {
      // The JSON log lines are on stderr.
      const { stdout, stderr } = await run('docker', ['logs', containerOf('dispatcher', n)], { maxBuffer: 64 * 1024 * 1024 });
      if ((stdout + stderr).includes(`"task":"${t}"`)) served = containerOf('dispatcher', n);
    }
    assert.ok(served, 'a dispatcher logged the call');
    await run('docker', ['kill', served]);
    // The other replica never saw the task: it finds the executor holding it.
    assert.deepEqual(await sh(t, 'echo $WHO; cat /workspace/f'), { output: 'replica\nx', exit_code: 0, error: null });
    const other = await run('docker', ['logs', [1, 2].map((n) => containerOf('dispatcher', n)).find((c) => c !== served)!], { maxBuffer: 64 * 1024 * 1024 });
    assert.ok((other.stdout + other.stderr).includes(`"task":"${t}"`), 'the surviving replica served the call');
  });

  test('down leaves no container, network or volume of the stack behind', { skip }, async () => {
    await compose('down', '-v', '--remove-orphans', '-t', '10');
    const label = `com.docker.compose.project=${project}`;
    assert.deepEqual(await docker.listContainers({ all: true, filters: { label: [label] } }), []);
    assert.deepEqual(await docker.listNetworks({ filters: { label: [label] } }), []);
    assert.deepEqual((await docker.listVolumes({ filters: { label: [label] } })).Volumes ?? [], []);
    // Drained executors released their sandboxes: only the tasks' persistent volumes stay, by design.
    // (A killed executor's sandboxes are swept later by the next executor on the engine.)
    for (const t of [...taskIds].filter((id) => !onKilledExecutor.has(id))) {
      assert.deepEqual(await docker.listContainers({ filters: { label: [`berth.task=${t}`] } }), [], `no sandbox of ${t} runs`);
    }
  });
});
