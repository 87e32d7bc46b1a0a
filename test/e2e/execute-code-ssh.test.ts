/**
 * execute_code through `bin/berth serve --backend ssh` against a real sshd.
 *
 * On a host with python3 the script runs on the host itself, in the task's
 * own environment: its rpc.sock is made there by the task's exec agent and
 * relayed over the agent's stream, so open() and terminal() see the same
 * files, and the seed document's three scripts run as on local. No code
 * container is made.
 *
 * On a host without python3 (no agent) the script runs in a per-task code
 * container on the executor's Docker, and its tool calls go through the
 * dispatcher to the task's ssh environment. What a user notices:
 * terminal()/read_file see the ssh host, open() sees the container; the
 * result says so; the container goes with EndTask, and with a killed
 * executor at the next one's start; without Docker execute_code says why
 * and runs nothing.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import type { ExecuteCodeResult as CodeResult } from '../../services/dispatcher/tools/code-execution/execute-code-result.js';
import { containerOfTask, containerState, dockerUnavailableReason, pruneIsolatedNetworks, removeLabelled, runTaskIds } from '../support/docker-fixtures.js';
import { batchRefactorSeed, buildAndTestSeed, yamlSearchSeed } from '../support/seed-scripts.js';
import { startServe, type ServeProcess, waitForLog } from '../support/serve-process.js';
import { startSshd, type StartedSshd } from '../../services/cli/bench/sshd-container.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const { run: RUN, ids: tasks, task } = runTaskIds();
/** The state of a task's code container, found by its labels; undefined when there is none. */
const codeContainerState = async (taskId: string) => {
  const name = await containerOfTask(docker, taskId, 'code');
  return name === undefined ? undefined : containerState(docker, name);
};

/** An sshd in a container, a key file for it, and the environment `berth serve --backend ssh` needs. */
async function sshFixture(prefix: string): Promise<{ sshd: StartedSshd; dir: string; env: Record<string, string> }> {
  const sshd = await startSshd();
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  const keyFile = path.join(dir, 'id_ed25519');
  await writeFile(keyFile, sshd.keys.privateKey, { mode: 0o600 });
  const env = {
    TERMINAL_SSH_HOST: sshd.host,
    TERMINAL_SSH_PORT: String(sshd.port),
    TERMINAL_SSH_USER: sshd.user,
    TERMINAL_SSH_KEY: keyFile,
    TERMINAL_SSH_KNOWN_HOSTS: path.join(dir, 'known_hosts'),
    TERMINAL_CONTAINER_MEMORY: '512',
  };
  return { sshd, dir, env };
}

async function call(s: ServeProcess, name: string, args: object, taskId: string): Promise<Record<string, unknown>> {
  const r = await s.client.callTool({ name, argumentsJson: JSON.stringify(args), taskId, sessionId: '' });
  return JSON.parse(r.resultJson) as Record<string, unknown>;
}

describe('execute_code on berth serve --backend ssh, host with python3', { skip: unavailable, timeout: 600_000 }, () => {
  let sshd: StartedSshd;
  let dir: string;
  let serve: ServeProcess;

  before(async () => {
    const f = await sshFixture('berth-e2e-code-ssh-agent-');
    sshd = f.sshd;
    dir = f.dir;
    serve = await startServe(['--backend', 'ssh'], { env: f.env });
  });

  after(async () => {
    await serve?.stop('SIGKILL').catch(() => undefined);
    await sshd?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const runCode = async (code: string, taskId: string) => (await call(serve, 'execute_code', { code }, taskId)) as unknown as CodeResult;
  /** Writes files on the ssh host through the task (write_file), so they are where terminal() and the script look. */
  const put = async (taskId: string, files: Record<string, string>) => {
    for (const [file, content] of Object.entries(files)) {
      const r = await call(serve, 'write_file', { path: file, content }, taskId);
      assert.ok(!('error' in r), JSON.stringify(r));
    }
  };

  test('the script runs on the ssh host: open() and terminal() see the same files, and no code container is made', async () => {
    const t = task('ssh-same-host');
    await call(serve, 'write_file', { path: '/home/sandbox/written-by-tool.txt', content: `ssh side ${RUN}` }, t);
    const code = `import json, os
from hermes_tools import terminal, read_file
open("/tmp/opened-${RUN}.txt", "w").write("written by open()")
print(json.dumps({
    "terminal_hostname": terminal("hostname")["output"].strip(),
    "open_hostname": open("/etc/hostname").read().strip(),
    "read_file": read_file("/home/sandbox/written-by-tool.txt")["content"],
    "open_reads_tool_file": open("/home/sandbox/written-by-tool.txt").read(),
    "terminal_sees_opened": terminal("cat /tmp/opened-${RUN}.txt")["output"].strip(),
    "socket_mode": oct(os.stat(os.environ["HERMES_RPC_SOCKET"]).st_mode & 0o777),
    "uid": os.getuid(),
}))
`;
    const r = await runCode(code, t);
    assert.equal(r.status, 'success', JSON.stringify(r));
    assert.deepEqual(JSON.parse(r.output), {
      terminal_hostname: sshd.containerId.slice(0, 12),
      open_hostname: sshd.containerId.slice(0, 12),
      read_file: `1|ssh side ${RUN}`,
      open_reads_tool_file: `ssh side ${RUN}`,
      terminal_sees_opened: 'written by open()',
      socket_mode: '0o600',
      uid: 1000,
    });
    assert.equal(r.tool_calls_made, 3);
    assert.equal(r.notice, undefined, 'no code-container notice');
    await waitForLog(serve, /"msg":"execute_code success in the task's ssh environment \(ssh:sandbox@127\.0\.0\.1:\d+:\/home\/sandbox\/\.berth\/tasks\/[0-9a-f]{32}\)/);
    assert.equal(await codeContainerState(t), undefined);
    // The run dir went with the run.
    const left = await sshd.exec(['bash', '-c', 'ls -d ~/.berth/tasks/*/code-* 2>/dev/null | wc -l']);
    assert.equal(left.output.trim(), '0');
  });

  test('seed: find the *.yaml files that mention the database and preview them', async () => {
    const t = task('ssh-seed-yaml');
    const project = `/home/sandbox/configs-${RUN}`;
    await put(t, yamlSearchSeed.files(project));
    yamlSearchSeed.assertResult(await runCode(yamlSearchSeed.code(project), t));
  });

  test('seed: batch refactor with search_files and patch(replace_all=True)', async () => {
    const t = task('ssh-seed-refactor');
    const root = `/home/sandbox/refactor-${RUN}`;
    await put(t, batchRefactorSeed.files(root));
    // The script's relative paths resolve against the task's cwd, as terminal() would.
    const cd = await call(serve, 'terminal', { command: `cd ${root}` }, t);
    assert.equal(cd.exit_code, 0);
    batchRefactorSeed.assertResult(await runCode(batchRefactorSeed.code, t));
    const b = await sshd.exec(['cat', `${root}/src/b.py`]);
    assert.equal(b.output, batchRefactorSeed.patchedB);
    const grep = await sshd.exec(['bash', '-c', `grep -rl old_api_call ${root}/src || true`]);
    assert.equal(grep.output.trim(), '');
  });

  test('seed: build-and-test pipeline through terminal() reporting passed/failed counts', async () => {
    const t = task('ssh-seed-tests');
    const project = `/home/sandbox/project-${RUN}`;
    await put(t, buildAndTestSeed.files(project));
    buildAndTestSeed.assertResult(await runCode(buildAndTestSeed.code(project), t));
  });
});

describe('execute_code on berth serve --backend ssh, host without python3', { skip: unavailable, timeout: 600_000 }, () => {
  let sshd: StartedSshd;
  let dir: string;
  let sshEnv: Record<string, string>;
  let serve: ServeProcess;
  const serves: ServeProcess[] = [];

  const startSsh = async (extra: Record<string, string> = {}, args: string[] = []) => {
    const s = await startServe(['--backend', 'ssh', ...args], { env: { ...sshEnv, ...extra } });
    serves.push(s);
    return s;
  };

  before(async () => {
    const f = await sshFixture('berth-e2e-code-ssh-');
    ({ sshd, dir } = f);
    sshEnv = f.env;
    // No python3 on the host: no exec agent, so scripts need the code container.
    const hidden = await sshd.exec(['sh', '-c', 'mv "$(command -v python3)" /usr/local/python3.hidden && ! command -v python3'], 'root');
    assert.equal(hidden.exitCode, 0, hidden.output);
    serve = await startSsh();
  });

  after(async () => {
    for (const s of serves) await s.stop('SIGKILL').catch(() => undefined);
    for (const id of tasks) await removeLabelled(docker, LABEL.task, id);
    // Killed executors leave their isolated network and its rules in place (closed); this run's go now.
    if (!unavailable) await pruneIsolatedNetworks(docker);
    await sshd?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test("the script's tools reach the ssh host while open() sees its code container, and the result says so", async () => {
    const t = task('ssh-code');
    await call(serve, 'write_file', { path: '/home/sandbox/written-by-tool.txt', content: `ssh side ${RUN}` }, t);
    const code = `import json, os
from hermes_tools import terminal, read_file
open("/tmp/opened.txt", "w").write("container side")
print(json.dumps({
    "terminal_hostname": terminal("hostname")["output"].strip(),
    "open_hostname": open("/etc/hostname").read().strip(),
    "read_file": read_file("/home/sandbox/written-by-tool.txt")["content"],
    "open_sees_ssh_file": os.path.exists("/home/sandbox/written-by-tool.txt"),
    "terminal_sees_opened": terminal("cat /tmp/opened.txt 2>/dev/null || echo missing")["output"].strip(),
    "uid": os.getuid(),
    "cap_eff": [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff:")][0],
}))
`;
    const r = (await call(serve, 'execute_code', { code }, t)) as unknown as CodeResult;
    assert.equal(r.status, 'success', JSON.stringify(r));
    const seen = JSON.parse(r.output) as Record<string, unknown>;
    const info = await docker.getContainer((await containerOfTask(docker, t, 'code')) ?? 'no code container').inspect();
    assert.deepEqual(seen, {
      terminal_hostname: sshd.containerId.slice(0, 12),
      open_hostname: info.Id.slice(0, 12),
      read_file: `1|ssh side ${RUN}`,
      open_sees_ssh_file: false,
      terminal_sees_opened: 'missing',
      // The code container runs as its task's own uid (docker.task_uids), named by its label.
      uid: Number(info.Config.Labels[LABEL.uid]),
      cap_eff: '0000000000000000',
    });
    assert.ok(Number(seen.uid) >= 1_900_000_000, `a task uid from docker.task_uids, not a host account: ${String(seen.uid)}`);
    assert.equal(r.tool_calls_made, 3);
    assert.match(r.notice ?? '', /^The script ran in a per-task code container \(docker\), not in the task's ssh environment/);
    assert.match(r.notice ?? '', /as in strict mode/);
    assert.equal(info.Config.Labels[LABEL.task], t);
    assert.equal(info.Config.Labels[LABEL.tenant], 'default');
    assert.equal(info.Config.Labels[LABEL.role], 'code');
    await waitForLog(
      serve,
      new RegExp(`"msg":"execute_code success in a per-task code container \\(docker:${info.Name.slice(1)} [^"]*\\) beside the task's ssh environment`),
    );
  });

  test('two tasks get two code containers; EndTask removes only its own', async () => {
    const [a, b] = [task('ssh-code-a'), task('ssh-code-b')];
    const hostnames = await Promise.all(
      [a, b].map(async (t) => {
        const r = (await call(serve, 'execute_code', { code: 'print(open("/etc/hostname").read().strip())' }, t)) as unknown as CodeResult;
        assert.equal(r.status, 'success', JSON.stringify(r));
        return r.output.trim();
      }),
    );
    assert.notEqual(hostnames[0], hostnames[1]);
    assert.equal((await serve.client.endTask({ taskId: a })).released, true);
    assert.equal(await codeContainerState(a), undefined);
    assert.equal(await codeContainerState(b), 'running');
    await serve.client.endTask({ taskId: b });
    assert.equal(await codeContainerState(b), undefined);
  });

  test('Docker not reachable: execute_code says why, names the backend, and runs nothing', async () => {
    const config = path.join(dir, 'no-docker.yaml');
    const socket = path.join(dir, 'no-such-docker.sock');
    await writeFile(config, `docker:\n  socket_path: ${socket}\n`);
    const noDocker = await startSsh({}, ['--config', config]);
    const t = task('ssh-no-docker');
    const marker = `/home/sandbox/ran-${RUN}`;
    const hostMarker = path.join(os.tmpdir(), `berth-fallback-${RUN}`);
    const code = `from hermes_tools import terminal\nterminal("touch ${marker}")\nopen(${JSON.stringify(hostMarker)}, "w").write("ran")`;
    const r = (await call(noDocker, 'execute_code', { code }, t)) as unknown as CodeResult;
    assert.equal(r.status, 'error');
    assert.equal(r.tool_calls_made, 0);
    assert.match(r.error ?? '', /^execute_code on the ssh backend runs the script in a per-task code container, which needs Docker/);
    assert.ok(r.error?.includes(`the Docker daemon at ${socket} is not reachable`), r.error);
    assert.match(r.error ?? '', /The script was not run\. Start Docker/);
    assert.equal(existsSync(hostMarker), false);
    assert.match((await sshd.exec(['bash', '-c', `test -e ${marker} && echo yes || echo no`])).output, /no/);
    assert.equal(await codeContainerState(t), undefined);

    // code_container: docker refuses to start without Docker.
    await assert.rejects(startSsh({ BERTH_CODE_CONTAINER: 'docker' }, ['--config', config]), /which needs Docker/);
  });

  test("a killed executor's code container is removed when the next one starts", async () => {
    const stateRoot = await mkdtemp(path.join(os.tmpdir(), 'berth-e2e-code-orphan-'));
    try {
      const doomed = await startSsh({ BERTH_STATE_ROOT: stateRoot });
      const t = task('ssh-code-orphan');
      const r = (await call(doomed, 'execute_code', { code: 'print(1)' }, t)) as unknown as CodeResult;
      assert.equal(r.status, 'success', JSON.stringify(r));
      assert.equal(await codeContainerState(t), 'running');
      await doomed.stop('SIGKILL');
      // The next executor's start-up sweep removes it (or an executor of a test running beside this one got there first).
      await startSsh({ BERTH_STATE_ROOT: stateRoot });
      assert.equal(await codeContainerState(t), undefined);
    } finally {
      await rm(stateRoot, { recursive: true, force: true });
    }
  });
});
