/**
 * execute_code's per-task code containers beside backends that share no
 * directory with the executor and run no exec agent that could relay the
 * socket: the ssh backend against a real sshd with its agent off (a host
 * without python3), the
 * singularity backend through the apptainer test double, code containers on
 * the real Docker engine. The script's tool calls are routed to the task's
 * own environment here the way the dispatcher routes them, so what the
 * script sees through its tools and through plain Python is observable.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { BerthError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import { buildHermesToolsModule } from '../../services/dispatcher/tools/code-execution/hermes-tools-module.js';
import type { TaskCodeRunRequest, TaskCodeRunResult, TaskCodeToolCall } from '../../services/common/task-client.js';
import type { Backend, TaskKey } from '../../services/executor/backend.js';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { SingularityBackend } from '../../services/executor/backends/singularity/singularity-backend.js';
import { SshBackend } from '../../services/executor/backends/ssh/ssh-backend.js';
import { CodeContainers, type CodeContainersOptions } from '../../services/executor/backends/docker/code-containers.js';
import { CodeRunner, codeContainerNotice } from '../../services/executor/code-execution/code-runner.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { doubleBackendOptions, doubleImageWithoutPython, doubleState, doubleUnavailableReason } from '../support/apptainer-double.js';
import { cleanupDocker, containerOfTask, containerState, dockerUnavailableReason, SANDBOX_IMAGE } from '../support/docker-fixtures.js';
import { startSshd, type StartedSshd } from '../../services/cli/bench/sshd-container.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const RUN = randomBytes(4).toString('hex');
const TENANT = `code-ctr-${RUN}`;
const TOOLS = ['read_file', 'write_file', 'terminal'];
const stateRoots: string[] = [];
let taskNo = 0;
const newKey = (): TaskKey => ({ tenant: TENANT, taskId: `t${++taskNo}` });
/** A task's code container by its labels (names are keyed by the executor's secret); `none` when there is none. */
const codeContainerOf = async (key: TaskKey) => (await containerOfTask(docker, key.taskId, 'code')) ?? 'none';

async function newStateRoot(): Promise<string> {
  const root = await mkdtemp(path.join(os.tmpdir(), 'berth-code-ctr-'));
  stateRoots.push(root);
  return root;
}

function containersOptions(
  stateRoot: string,
  backend: string,
  extra: Partial<CodeContainersOptions['docker']> = {},
  setting: CodeContainersOptions['setting'] = 'auto',
): CodeContainersOptions {
  return {
    setting,
    backend,
    docker: { image: SANDBOX_IMAGE, stateRoot, memoryMiB: 512, sweepIntervalMs: 0, logger: silentLogger(), ...extra },
    logger: silentLogger(),
  };
}

/** Answers a script's tool calls from the task's own environment, as the dispatcher would. */
function toolsOf(envs: TaskEnvironments, key: TaskKey) {
  return async (call: TaskCodeToolCall): Promise<string> => {
    const args = JSON.parse(call.argsJson) as Record<string, string>;
    if (call.tool === 'terminal') {
      const r = await envs.exec(key, { command: args.command ?? '', timeoutMs: 30_000 });
      return JSON.stringify({ output: r.output.trim(), exit_code: r.exitCode });
    }
    if (call.tool === 'read_file') {
      const r = await envs.readFile(key, args.path ?? '');
      return JSON.stringify({ content: r.content.toString('utf8') });
    }
    if (call.tool === 'write_file') {
      const r = await envs.writeFile(key, args.path ?? '', args.content ?? '');
      return JSON.stringify({ bytes_written: r.bytesWritten });
    }
    return JSON.stringify({ error: `no ${call.tool} here` });
  };
}

function runScript(
  runner: CodeRunner,
  envs: TaskEnvironments,
  key: TaskKey,
  code: string,
  extra: Partial<TaskCodeRunRequest> = {},
): Promise<TaskCodeRunResult> {
  return runner.run(key, {
    code,
    stubModule: buildHermesToolsModule(TOOLS),
    mode: 'project',
    timeoutMs: 120_000,
    maxStdoutBytes: 50_000,
    maxStderrBytes: 10_000,
    envPassthrough: [],
    credentialEnv: [],
    allowedTools: TOOLS,
    allowHostSubprocess: false,
    onToolCall: toolsOf(envs, key),
    ...extra,
  });
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`${what} did not happen within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const gone = (key: TaskKey) => async () => (await containerState(docker, (await codeContainerOf(key)))) === undefined;

after(async () => {
  if (!unavailable) await cleanupDocker(docker, TENANT, stateRoots);
  await Promise.all(stateRoots.map((r) => rm(r, { recursive: true, force: true })));
});

describe('execute_code code containers beside the ssh backend (real sshd, real Docker)', { skip: unavailable, timeout: 600_000 }, () => {
  let sshd: StartedSshd;
  let stateRoot: string;
  const closers: (() => Promise<void>)[] = [];

  /** An ssh backend, its task environments, code containers and a runner; closed after the suite. */
  async function setUp(options: { lifetimeSeconds?: number; setting?: CodeContainersOptions['setting']; socketPath?: string } = {}) {
    const backend: Backend = new SshBackend({
      host: sshd.host,
      port: sshd.port,
      user: sshd.user,
      privateKey: sshd.keys.privateKey,
      keyName: 'test-key',
      knownHostsPath: path.join(stateRoot, 'known_hosts'),
      connectTimeoutMs: 10_000,
      // As on a host without python3: no exec agent, so no socket relay, and scripts need the code container.
      agent: 'off',
    });
    const envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: options.lifetimeSeconds ?? 0 });
    const extra = options.socketPath ? { socketPath: options.socketPath } : {};
    const containers = await CodeContainers.start(containersOptions(stateRoot, 'ssh', extra, options.setting));
    const runner = new CodeRunner(envs, { logger: silentLogger(), ...(containers ? { codeContainers: containers } : {}) });
    let closed: Promise<void> | undefined;
    const close = () =>
      (closed ??= (async () => {
        await envs.closeAll();
        await containers?.close();
        await backend.close();
      })());
    closers.push(close);
    return { envs, containers, runner, close };
  }

  before(async () => {
    sshd = await startSshd();
    stateRoot = await newStateRoot();
  });

  after(async () => {
    for (const close of closers) await close().catch(() => undefined);
    await sshd?.stop();
  });

  it('tool calls reach the ssh host, open() sees the code container; hardened, labelled, reused, removed on release', async () => {
    const { envs, runner } = await setUp();
    const key = newKey();
    await sshd.exec(['bash', '-c', `echo ssh-only-${RUN} > /home/sandbox/ssh-only.txt`]);
    const code = `import json, os
from hermes_tools import terminal, read_file
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
open("/tmp/from-open.txt", "w").write("container side")
print(json.dumps({
    "tool_hostname": terminal("hostname")["output"],
    "open_hostname": open("/etc/hostname").read().strip(),
    "tool_reads": read_file("/home/sandbox/ssh-only.txt")["content"].strip(),
    "open_sees_ssh_file": os.path.exists("/home/sandbox/ssh-only.txt"),
    "tool_sees_open_file": terminal("test -e /tmp/from-open.txt && echo yes || echo no")["output"],
    "uid": os.getuid(),
    "cap_eff": status["CapEff"].strip(),
    "no_new_privs": status["NoNewPrivs"].strip(),
    "seccomp": status["Seccomp"].strip(),
}))
`;
    const r = await runScript(runner, envs, key, code);
    assert.equal(r.exitCode, 0, r.stderr);
    const seen = JSON.parse(r.stdout) as Record<string, unknown>;
    const info = await docker.getContainer((await codeContainerOf(key))).inspect();
    assert.equal(seen.tool_hostname, sshd.containerId.slice(0, 12), 'terminal() ran on the ssh host');
    assert.equal(seen.open_hostname, info.Id.slice(0, 12), 'open() read the code container');
    assert.equal(seen.tool_reads, `ssh-only-${RUN}`);
    assert.equal(seen.open_sees_ssh_file, false);
    assert.equal(seen.tool_sees_open_file, 'no');
    assert.match(info.Config.Labels[LABEL.uid] ?? '', /^19\d{8}$/);
    assert.equal(String(seen.uid), info.Config.Labels[LABEL.uid], "the script ran as the code container's own uid");
    assert.equal(seen.cap_eff, '0000000000000000');
    assert.equal(seen.no_new_privs, '1');
    assert.equal(seen.seccomp, '2');
    assert.match(r.ranIn, new RegExp(`^a per-task code container \\(docker:${(await codeContainerOf(key))} \\([0-9a-f]{12}\\)\\) beside the task's ssh environment \\(`));
    assert.equal(r.interpreter, 'python3', 'project mode runs as strict in a code container');
    assert.ok(r.notices.includes(codeContainerNotice('ssh', 'project')), r.notices.join(' | '));
    assert.equal(info.Config.Labels[LABEL.task], key.taskId);
    assert.equal(info.Config.Labels[LABEL.tenant], TENANT);
    assert.match(info.Config.Labels[LABEL.executor] ?? '', /./);
    assert.equal(info.Config.Labels[LABEL.role], 'code');
    // The container's root is the agent's; the script ran as the task's own uid (cap_eff above: none).
    assert.equal(info.Config.User, '0:0');
    assert.deepEqual(info.HostConfig.CapDrop, ['ALL']);
    assert.deepEqual(info.HostConfig.SecurityOpt, ['no-new-privileges:true']);
    assert.equal(info.HostConfig.Memory, 512 * 1024 * 1024);

    // The task's next script reuses its container: the scratch file of the first is still there.
    const again = await runScript(runner, envs, key, 'print(open("/tmp/from-open.txt").read(), open("/etc/hostname").read().strip())');
    assert.equal(again.stdout, `container side ${info.Id.slice(0, 12)}\n`, again.stderr);

    assert.equal(await envs.release(key), true);
    assert.equal(await containerState(docker, (await codeContainerOf(key))), undefined, 'removed with the task');
  });

  it('two tasks get two containers; releasing one leaves the other', async () => {
    const { envs, runner } = await setUp();
    const [a, b] = [newKey(), newKey()];
    const [ra, rb] = await Promise.all(
      [a, b].map((key) => runScript(runner, envs, key, 'print(open("/etc/hostname").read().strip())')),
    );
    const ida = (await docker.getContainer((await codeContainerOf(a))).inspect()).Id;
    const idb = (await docker.getContainer((await codeContainerOf(b))).inspect()).Id;
    assert.notEqual(ida, idb);
    assert.equal(ra?.stdout, `${ida.slice(0, 12)}\n`);
    assert.equal(rb?.stdout, `${idb.slice(0, 12)}\n`);
    await envs.release(a);
    assert.equal(await containerState(docker, (await codeContainerOf(a))), undefined);
    assert.equal(await containerState(docker, (await codeContainerOf(b))), 'running');
    await envs.release(b);
    assert.equal(await containerState(docker, (await codeContainerOf(b))), undefined);
  });

  it('the idle reaper leaves a task alone while its script runs, then removes its code container', async () => {
    const { envs, runner } = await setUp({ lifetimeSeconds: 1 });
    const key = newKey();
    let heldThrough = false;
    const r = await runScript(runner, envs, key, 'from hermes_tools import terminal\nprint(terminal("gate")["output"])', {
      // The script waits on this call for three idle lifetimes; the task must still be there afterwards.
      onToolCall: async () => {
        await new Promise((resolve) => setTimeout(resolve, 3000));
        heldThrough = envs.has(key) && (await containerState(docker, (await codeContainerOf(key)))) === 'running';
        return JSON.stringify({ output: 'through' });
      },
    });
    assert.equal(r.stdout, 'through\n', r.stderr);
    assert.equal(heldThrough, true, 'the task was reaped while its script ran');
    await until('the idle task to be reaped with its code container', async () => !envs.has(key) && (await gone(key)()));
  });

  it('Interrupt of the task kills the script and its children in the code container', async () => {
    const { envs, runner } = await setUp();
    const key = newKey();
    const running = runScript(
      runner,
      envs,
      key,
      'import subprocess, time\nsubprocess.Popen(["sleep", "1000"])\nprint("spawned", flush=True)\ntime.sleep(1000)',
    );
    const sleeping = async () => {
      const env = await docker
        .getContainer((await codeContainerOf(key)))
        .exec({ Cmd: ['pgrep', '-x', 'sleep'], AttachStdout: true, AttachStderr: true })
        .catch(() => undefined);
      if (!env) return false;
      const stream = await env.start({});
      await new Promise((resolve) => {
        stream.on('end', resolve);
        stream.resume();
      });
      return (await env.inspect()).ExitCode === 0;
    };
    await until('the script to start its child', sleeping);
    assert.equal(envs.interrupt(key), 1);
    const r = await running;
    assert.equal(r.interrupted, true);
    assert.equal(r.stdout, 'spawned\n');
    assert.equal(await sleeping(), false, 'the child in the code container was killed');
  });

  it('executor shutdown (closeAll, then the code containers) removes every code container', async () => {
    const { envs, runner, close } = await setUp();
    const keys = [newKey(), newKey()];
    for (const key of keys) await runScript(runner, envs, key, 'print(1)');
    for (const key of keys) assert.equal(await containerState(docker, (await codeContainerOf(key))), 'running');
    await close();
    for (const key of keys) assert.equal(await containerState(docker, (await codeContainerOf(key))), undefined);
  });

  it('Docker unreachable: a clear FailedPrecondition naming the backend, nothing runs; it works once Docker answers', async () => {
    const socketPath = path.join(stateRoot, `no-docker-${RUN}.sock`);
    const { envs, runner } = await setUp({ socketPath });
    const key = newKey();
    const marker = `/home/sandbox/should-not-exist-${RUN}`;
    const hostMarker = path.join(os.tmpdir(), `berth-fallback-${RUN}`);
    const code = `from hermes_tools import terminal\nterminal("touch ${marker}")\nopen(${JSON.stringify(hostMarker)}, "w").write("ran")`;
    const calls: string[] = [];
    await assert.rejects(
      runScript(runner, envs, key, code, { onToolCall: async (c) => (calls.push(c.tool), '{}') }),
      (err: unknown) => {
        assert.ok(err instanceof BerthError);
        assert.equal(err.code, 'FAILED_PRECONDITION');
        assert.match(err.message, /^execute_code on the ssh backend runs the script in a per-task code container, which needs Docker/);
        assert.ok(err.message.includes(`the Docker daemon at ${socketPath} is not reachable`), err.message);
        assert.match(err.message, /The script was not run/);
        assert.match(err.message, /docker\.socket_path/);
        return true;
      },
    );
    assert.deepEqual(calls, []);
    assert.equal(existsSync(hostMarker), false, 'the script did not run on the executor host');
    assert.match((await sshd.exec(['bash', '-c', `test -e ${marker} && echo yes || echo no`])).output, /no/);
    assert.equal(await containerState(docker, (await codeContainerOf(key))), undefined);

    // auto: once Docker answers at that path, the next execute_code gets its container.
    await symlink('/var/run/docker.sock', socketPath);
    const r = await runScript(runner, envs, key, 'print("now")');
    assert.equal(r.stdout, 'now\n', r.stderr);
    await envs.release(key);
    assert.equal(await containerState(docker, (await codeContainerOf(key))), undefined);
  });

  it('code_container: docker fails at start when Docker is not reachable; off refuses execute_code', async () => {
    const socketPath = path.join(stateRoot, `no-docker-strict-${RUN}.sock`);
    await assert.rejects(CodeContainers.start(containersOptions(stateRoot, 'ssh', { socketPath }, 'docker')), (err: unknown) => {
      assert.ok(err instanceof BerthError);
      assert.equal(err.code, 'FAILED_PRECONDITION');
      assert.match(err.message, /needs Docker/);
      return true;
    });
    const { envs, runner, containers } = await setUp({ setting: 'off' });
    assert.equal(containers, undefined);
    await assert.rejects(runScript(runner, envs, newKey(), 'print(1)'), /code_execution\.code_container is off/);
  });
});

const noDouble = unavailable ?? doubleUnavailableReason();

describe('execute_code code containers beside the singularity backend (apptainer test double)', { skip: noDouble, timeout: 600_000 }, () => {
  it('tool calls reach the instance, open() sees the code container, which goes with the task', async () => {
    const double = await doubleState();
    stateRoots.push(double.stateDir);
    // An image without python3 runs no exec agent, so the script needs the code container (with it, see
    // test/e2e/execute-code-singularity.test.ts).
    const image = await doubleImageWithoutPython(double);
    const backend = await SingularityBackend.start(doubleBackendOptions(double, { image }));
    const envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
    const containers = await CodeContainers.start(containersOptions(await newStateRoot(), 'singularity'));
    assert.ok(containers);
    const runner = new CodeRunner(envs, { logger: silentLogger(), codeContainers: containers });
    try {
      const key = newKey();
      const code = `import json, os
from hermes_tools import terminal, write_file
write_file("/workspace/via-tool.txt", "instance side")
print(json.dumps({
    "tool_sees": terminal("cat /workspace/via-tool.txt")["output"],
    "open_sees": os.path.exists("/workspace/via-tool.txt"),
    "open_hostname": open("/etc/hostname").read().strip(),
}))
`;
      const r = await runScript(runner, envs, key, code, { mode: 'strict' });
      assert.equal(r.exitCode, 0, r.stderr);
      const seen = JSON.parse(r.stdout) as Record<string, unknown>;
      const info = await docker.getContainer((await codeContainerOf(key))).inspect();
      assert.deepEqual(seen, { tool_sees: 'instance side', open_sees: false, open_hostname: info.Id.slice(0, 12) });
      assert.match(r.ranIn, /beside the task's singularity environment \(singularity:/);
      assert.ok(r.notices.includes(codeContainerNotice('singularity', 'strict')));
      assert.equal((await envs.readFile(key, '/workspace/via-tool.txt')).content.toString(), 'instance side');
      await envs.release(key);
      assert.equal(await containerState(docker, (await codeContainerOf(key))), undefined);
    } finally {
      await envs.closeAll();
      await containers.close();
      await backend.close();
    }
  });
});
