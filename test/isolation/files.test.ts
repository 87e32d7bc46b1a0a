/**
 * Tenant B, from inside its own docker task, goes after tenant A's files:
 * A's persistent workspace volume, A's host directory (bind-mounted at
 * /run/berth in A's container: agent script, shell-state snapshots, the
 * agent's socket), A's execute_code RPC socket, A's processes, and the
 * Docker socket that would reach them all. B tries A's real paths, read on
 * the Docker host by this test (it runs there as root), so each attempt
 * would succeed if the path were reachable. Each check ends by confirming
 * the target exists and still holds A's data.
 *
 * Docker backend only: on the local backend every task runs as the same
 * host user in the host's filesystem, which `allow_local_multi_tenant: true`
 * accepts by name (see docs/security.md).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { dockerUnavailableReason, removeLabelled, taskNamesIn } from '../support/docker-fixtures.js';
import { startTwoTenants, TENANT_A, type TwoTenants } from '../support/two-tenants.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);

describe("tenant B cannot reach tenant A's files (docker backend)", { skip: unavailable }, () => {
  let t: TwoTenants;
  const run = randomBytes(4).toString('hex');
  const aTask = `iso-files-a-${run}`;
  const bTask = `iso-files-b-${run}`;
  /** A's paths as the Docker host sees them. */
  let hostDir = '';
  let volumeData = '';
  let rpcSocket = '';
  let aScript: Promise<unknown> | undefined;

  const json = (text: string) => JSON.parse(text) as Record<string, unknown>;
  const bTerminal = async (command: string) => json(await t.call(t.b, 'terminal', { command }, bTask));
  const aTerminal = async (command: string) => json(await t.call(t.a, 'terminal', { command }, aTask));

  before(async () => {
    t = await startTwoTenants({ backend: 'docker', env: { TERMINAL_CONTAINER_PERSISTENT: 'true' } });
    const setup = await aTerminal(
      'echo alpha-secret-file > /workspace/secret.txt && echo alpha-secret-home > ~/secret.txt && export A_SECRET=alpha-secret-env',
    );
    assert.equal(setup.exit_code, 0, JSON.stringify(setup));
    const bg = json(await t.call(t.a, 'terminal', { command: 'exec sleep 4711', background: true }, aTask));
    assert.match(String(bg.session_id), /^proc_/);
    const info = await docker.getContainer((await taskNamesIn(t.serve.stateRoot)).container({ tenant: TENANT_A, taskId: aTask })).inspect();
    hostDir = info.Config.Labels[LABEL.hostDir] ?? '';
    const workspace = info.Mounts.find((m) => m.Destination === '/workspace');
    volumeData = workspace?.Source ?? '';
    assert.ok(existsSync(join(hostDir, 'agent.sock')), `A's agent socket under ${hostDir}`);
    assert.equal(readFileSync(join(volumeData, 'secret.txt'), 'utf8'), 'alpha-secret-file\n');
    // An execute_code script of A that stays in flight, so its RPC socket exists during B's attempts.
    aScript = t.call(t.a, 'execute_code', { code: 'import time\ntime.sleep(60)' }, aTask).catch((err: unknown) => err);
    for (let i = 0; i < 300 && rpcSocket === ''; i++) {
      const run = readdirSync(hostDir).find((d) => d.startsWith('code-') && existsSync(join(hostDir, d, 'rpc.sock')));
      if (run !== undefined) rpcSocket = join(hostDir, run, 'rpc.sock');
      else await sleep(100);
    }
    assert.notEqual(rpcSocket, '', "A's execute_code socket never appeared");
    assert.equal((await bTerminal('true')).exit_code, 0);
  });

  after(async () => {
    if (t !== undefined) {
      await t.a.interrupt({ taskId: aTask }).catch(() => undefined);
      await aScript;
      await t.stop();
    }
    for (const id of [aTask, bTask]) await removeLabelled(docker, LABEL.task, id);
  });

  /** Runs B's attempt, checks it found nothing of A's, and returns its output. */
  const bFindsNothing = async (command: string) => {
    const r = await bTerminal(command);
    assert.doesNotMatch(String(r.output), /alpha-secret/, `B read A's data with: ${command}`);
    return String(r.output);
  };

  test("B cannot read A's workspace volume, by its host path or anywhere in B's filesystem", async () => {
    const out = await bFindsNothing(
      `cat '${volumeData}/secret.txt' 2>&1; ls /var/lib/docker 2>&1; ` +
        'grep -rls alpha-secret /workspace /home /tmp /var /run /mnt /media /srv /opt /root 2>/dev/null; echo done',
    );
    assert.match(out, /No such file or directory/);
    const read = json(await t.call(t.b, 'read_file', { path: `${volumeData}/secret.txt` }, bTask));
    assert.ok(read.error !== undefined && !JSON.stringify(read).includes('alpha-secret'), JSON.stringify(read));
    assert.equal((await aTerminal('cat /workspace/secret.txt ~/secret.txt')).output, 'alpha-secret-file\nalpha-secret-home');
  });

  test("B cannot read A's host directory (agent, shell-state snapshots)", async () => {
    const out = await bFindsNothing(`ls -la '${hostDir}' 2>&1; cat '${hostDir}'/state/* 2>&1; grep -rs alpha-secret /run/berth; echo done`);
    assert.match(out, /No such file or directory/);
    const search = json(await t.call(t.b, 'search_files', { pattern: 'alpha-secret', path: '/run' }, bTask));
    assert.doesNotMatch(JSON.stringify(search), /alpha-secret-env/);
    // The snapshot B looked for is there on the host, holding A's variable.
    const snapshots = readdirSync(join(hostDir, 'state')).map((f) => readFileSync(join(hostDir, 'state', f), 'utf8'));
    assert.ok(snapshots.some((s) => s.includes('alpha-secret-env')), "A's snapshot holds A_SECRET");
  });

  test("B cannot connect to A's /run/berth agent socket", async () => {
    const out = await bFindsNothing(
      `python3 -c "import socket; s = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect('${hostDir}/agent.sock'); print('connected')\nexcept OSError as e:\n    print(type(e).__name__)"`,
    );
    assert.equal(out, 'FileNotFoundError');
  });

  test("B sees none of A's processes and has no Docker socket to reach A's container", async () => {
    const out = await bFindsNothing(`ps -eo args | grep -c '[s]leep 4711'; ls /var/run/docker.sock /run/docker.sock 2>&1 | grep -c 'No such file'`);
    assert.equal(out, '0\n2');
    assert.equal((await aTerminal("ps -eo args | grep -c '[s]leep 4711'")).output, '1');
  });

  test("an execute_code script of B cannot reach A's RPC socket", async () => {
    const runName = rpcSocket.split('/').at(-2)!;
    const code = [
      'import json, os, socket',
      'out = {"own": sorted(os.listdir("/run/berth"))}',
      `for name, path in [("host_path", ${JSON.stringify(rpcSocket)}), ("same_name", "/run/berth/${runName}/rpc.sock")]:`,
      '    s = socket.socket(socket.AF_UNIX)',
      '    try:',
      '        s.connect(path)',
      '        out[name] = "connected"',
      '    except OSError as e:',
      '        out[name] = type(e).__name__',
      'print(json.dumps(out))',
    ].join('\n');
    const r = json(await t.call(t.b, 'execute_code', { code }, bTask));
    assert.equal(r.status, 'success', JSON.stringify(r));
    const seen = JSON.parse(String(r.output)) as { own: string[]; host_path: string; same_name: string };
    assert.equal(seen.host_path, 'FileNotFoundError');
    assert.equal(seen.same_name, 'FileNotFoundError');
    assert.ok(!seen.own.includes(runName), JSON.stringify(seen.own));
    assert.ok(existsSync(rpcSocket), "A's RPC socket is still there");
  });
});
