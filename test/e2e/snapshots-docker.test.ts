/**
 * Snapshots and forks end to end: `bin/berth serve --backend docker` (with
 * persistent volumes, the default) driven by the CLI as docs/lifecycle.md
 * shows it: snapshot a task, fork the snapshot and the task, list, delete;
 * and the local backend's refusal.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { SNAPSHOT_LABEL } from '../../services/executor/backends/docker/docker-snapshots.js';
import { dockerUnavailableReason, removeLabelled } from '../support/docker-fixtures.js';
import { grpcPython } from '../support/python-bin.js';
import { REPO_ROOT, startServe, type ServeProcess } from '../support/serve-process.js';
import { removeSnapshotImages } from '../support/snapshot-fixtures.js';

const docker = new Dockerode();
const execFileAsync = promisify(execFile);
const unavailable = await dockerUnavailableReason(docker);
const run = randomBytes(4).toString('hex');
const task = (name: string) => `snap-${name}-${run}`;

describe('snapshots and forks through berth serve --backend docker and the CLI', { skip: unavailable }, () => {
  let serve: ServeProcess;
  let stateRoot = '';
  const tasks = ['base', 'try-1', 'try-2', 'py-source', 'py-fork'].map(task);

  before(async () => {
    serve = await startServe(['--backend', 'docker']);
    stateRoot = serve.stateRoot;
  });

  after(async () => {
    await serve?.stop();
    for (const id of tasks) await removeLabelled(docker, LABEL.task, id);
    await removeSnapshotImages(docker, [stateRoot]);
  });

  const cli = async (args: string[], exitStatus = 0) => {
    const r = await serve.cli(args, { timeoutMs: 180_000 });
    assert.equal(r.code, exitStatus, `${args.join(' ')}: ${r.stderr}`);
    return r;
  };
  const json = async (args: string[]) => JSON.parse((await cli(args)).stdout) as Record<string, unknown>;
  const terminal = async (command: string, taskId: string) =>
    JSON.parse((await cli(['call', 'terminal', JSON.stringify({ command }), '--task', taskId])).stdout) as { output: string; exit_code: number };

  test('snapshot, fork from the snapshot and from the task, list, delete', async () => {
    const [base, try1, try2] = tasks as [string, string, string];
    await terminal('mkdir -p /workspace/app && cd /workspace/app && echo deps > installed && export APP_MODE=ready', base);

    const snap = await json(['snapshot', base, '--label', 'deps installed']);
    assert.match(String(snap.snapshot_id), /^snap_[0-9a-f]{24}$/);
    assert.deepEqual(
      [snap.label, snap.source_task_id, snap.backend, snap.includes_processes, snap.includes],
      ['deps installed', base, 'docker', false, ['files', 'shell_state']],
    );
    assert.ok(Number(snap.size_bytes) > 0, JSON.stringify(snap));

    const forked = await json(['fork', String(snap.snapshot_id), '--task', try1]);
    assert.equal(forked.task_id, try1);
    assert.equal((forked.snapshot as Record<string, unknown>).snapshot_id, snap.snapshot_id);
    assert.deepEqual(await terminal('pwd; ls; echo "$APP_MODE"; id -un', try1), { output: '/workspace/app\ninstalled\nready\nsandbox', exit_code: 0, error: null });

    // From a task: a snapshot is taken first and kept.
    const fromTask = await json(['fork', base, '--task', try2, '--label', 'implied']);
    const implied = fromTask.snapshot as Record<string, unknown>;
    assert.equal(implied.label, 'implied');
    assert.equal((await terminal('cat installed && echo mine > own', try2)).output, 'deps');

    const listed = (await cli(['snapshots'])).stdout;
    const ids = (JSON.parse(listed) as Array<Record<string, unknown>>).map((s) => s.snapshot_id);
    assert.deepEqual(ids, [implied.snapshot_id, snap.snapshot_id], 'newest first');

    assert.deepEqual(await json(['snapshot-delete', String(snap.snapshot_id)]), { snapshot_id: snap.snapshot_id, deleted: true });
    assert.equal((await terminal('cat installed', try1)).output, 'deps', 'a fork outlives its snapshot');
    const again = await cli(['snapshot-delete', String(snap.snapshot_id)], 5);
    assert.equal(again.stderr, `berth: NOT_FOUND: no snapshot with id '${String(snap.snapshot_id)}'; list yours with 'berth snapshots'\n`);
    const intoExisting = await cli(['fork', String(implied.snapshot_id), '--task', try1], 5);
    assert.match(intoExisting.stderr, /FAILED_PRECONDITION: task '.*' exists already/);

    assert.equal((await serve.client.endTask({ taskId: try2 })).released, true);
    assert.deepEqual(await json(['snapshot-delete', String(implied.snapshot_id)]), { snapshot_id: implied.snapshot_id, deleted: true });
    assert.deepEqual(JSON.parse((await cli(['snapshots'])).stdout), []);
  });

  const { python, reason: noPython } = grpcPython();
  test("the Python client's asyncio snapshots: create, fork, list, delete", { skip: noPython }, async () => {
    const [source, forkId] = tasks.slice(3) as [string, string];
    await terminal('echo from-python-source > /workspace/py-mark', source);
    const script = [
      'import asyncio, json, sys',
      'from berth_client.aio import AsyncBerth',
      'async def main(address, source, fork_id):',
      '    async with AsyncBerth(address, interactive=False) as berth:',
      '        snap = await berth.snapshots.create(source, label="py")',
      '        task = await berth.snapshots.fork(snap.snapshot_id, fork_id)',
      '        output = (await task.terminal("cat /workspace/py-mark"))["output"]',
      '        listed = [s.snapshot_id for s in await berth.snapshots.list()]',
      '        deleted = await berth.snapshots.delete(snap.snapshot_id)',
      '        await task.end()',
      '        print(json.dumps({"label": snap.label, "backend": snap.backend, "output": output,',
      '                          "listed": snap.snapshot_id in listed, "deleted": deleted}))',
      'asyncio.run(main(*sys.argv[1:4]))',
    ].join('\n');
    const clientRoot = join(REPO_ROOT, 'clients', 'python');
    const { stdout } = await execFileAsync(python!, ['-c', script, serve.address, source, forkId], {
      cwd: clientRoot,
      env: { ...process.env, PYTHONPATH: clientRoot },
      timeout: 180_000,
    });
    assert.deepEqual(JSON.parse(stdout), { label: 'py', backend: 'docker', output: 'from-python-source', listed: true, deleted: true });
  });
});

describe('snapshot quotas (docker)', { skip: unavailable }, () => {
  let serve: ServeProcess;
  let stateRoot = '';
  const dir = mkdtempSync(join(tmpdir(), 'berth-snap-quota-'));
  const source = task('quota');

  before(async () => {
    const config = join(dir, 'config.yaml');
    writeFileSync(config, 'terminal: { container_persistent: false }\nquotas: { max_snapshots: 1, max_snapshot_mb: 3 }\n');
    serve = await startServe(['--backend', 'docker', '--config', config]);
    stateRoot = serve.stateRoot;
  });

  after(async () => {
    await serve?.stop();
    await removeLabelled(docker, LABEL.task, source);
    await removeSnapshotImages(docker, [stateRoot]);
    rmSync(dir, { recursive: true, force: true });
  });

  test('max_snapshots refuses the snapshot past it, and counts deletions', async () => {
    assert.equal((await serve.cli(['call', 'terminal', '{"command":"echo x > f"}', '--task', source])).code, 0);
    const first = await serve.cli(['snapshot', source], { timeoutMs: 180_000 });
    assert.equal(first.code, 0, first.stderr);
    const id = String((JSON.parse(first.stdout) as Record<string, unknown>).snapshot_id);
    const second = await serve.cli(['snapshot', source], { timeoutMs: 180_000 });
    assert.equal(second.code, 5);
    assert.equal(
      second.stderr,
      "berth: RESOURCE_EXHAUSTED: tenant default is at quotas.max_snapshots (1 of 1 snapshots); delete a snapshot ('berth snapshot-delete ID') or raise the quota\n",
    );
    assert.equal((await serve.cli(['snapshot-delete', id])).code, 0);
    const third = await serve.cli(['snapshot', source], { timeoutMs: 180_000 });
    assert.equal(third.code, 0, third.stderr);
    assert.equal((await serve.cli(['snapshot-delete', String((JSON.parse(third.stdout) as Record<string, unknown>).snapshot_id)])).code, 0);
  });

  test('max_snapshot_mb refuses a snapshot that would pass it, and keeps nothing of it', async () => {
    // 5 MiB that no layer compresses away, beside the 3 MB the tenant may hold.
    const big = await serve.cli(['call', 'terminal', '{"command":"head -c 5242880 /dev/urandom > big && stat -c %s big"}', '--task', source]);
    assert.equal(big.code, 0, big.stderr);
    const refused = await serve.cli(['snapshot', source], { timeoutMs: 180_000 });
    assert.equal(refused.code, 5, refused.stdout);
    assert.match(
      refused.stderr,
      /^berth: RESOURCE_EXHAUSTED: tenant default is at quotas\.max_snapshot_mb \(([6-9]|\d{2,}) of 3 MB of snapshots with this one\); delete a snapshot \('berth snapshot-delete ID'\) or raise the quota\n$/,
    );
    assert.deepEqual(JSON.parse((await serve.cli(['snapshots'])).stdout), [], 'the refused snapshot is not listed');
    const images = await docker.listImages({ all: true, filters: { label: [SNAPSHOT_LABEL.part] } });
    assert.deepEqual(images.filter((i) => i.Labels?.[LABEL.stateRoot] === stateRoot), [], 'and its image is gone');
    // Below the limit again, a snapshot is taken.
    assert.equal((await serve.cli(['call', 'terminal', '{"command":"rm big"}', '--task', source])).code, 0);
    const small = await serve.cli(['snapshot', source], { timeoutMs: 180_000 });
    assert.equal(small.code, 0, small.stderr);
    await serve.client.endTask({ taskId: source });
  });
});

describe('snapshots on the local backend', () => {
  let serve: ServeProcess;
  before(async () => {
    serve = await startServe();
  });
  after(async () => {
    await serve?.stop();
  });

  test('are refused, naming the backend and what to use instead', async () => {
    const t = task('local');
    const ran = await serve.cli(['call', 'terminal', '{"command":"true"}', '--task', t]);
    assert.equal(ran.code, 0, ran.stderr);
    const r = await serve.cli(['snapshot', t]);
    assert.equal(r.code, 5, r.stderr);
    assert.match(r.stderr, /^berth: FAILED_PRECONDITION: the local backend cannot snapshot or fork tasks.*use the docker backend/);
    await serve.client.endTask({ taskId: t });
  });
});
