/**
 * The executor's execute_code runner on the modal backend, through the
 * pinned `modal` SDK against the Modal stand-in (a test double of Modal's
 * control plane backed by the local Docker engine, not the cloud), started
 * once for the file. The script runs in the task's sandbox; its rpc.sock is
 * made there by the exec agent and relayed over the agent's one SDK exec
 * (stdin/stdout). What is particular to that stream: 1 MB either way and a
 * flood that never reads; timeout and interrupt kill inside the sandbox;
 * the run dir is gone after, and run dirs a persistent task's snapshot
 * carried are dropped when its next sandbox starts.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskCodeRunRequest, TaskCodeRunResult } from '../../services/common/task-client.js';
import { buildHermesToolsModule } from '../../services/dispatcher/code-execution/hermes-tools-module.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { ModalBackend } from '../../services/executor/backends/modal/modal-backend.js';
import { CodeRunner } from '../../services/executor/code-execution/code-runner.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { countProcessesScript } from '../support/backend-conformance.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { startModalStandin, type StandinProcess } from '../support/modal-standin-process.js';

const docker = new Dockerode();
const skip = await dockerUnavailableReason(docker);
const ALL_TOOLS = ['read_file', 'write_file', 'search_files', 'patch', 'terminal'];
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

describe('CodeRunner on the modal backend (socket relayed over the agent\'s SDK exec)', { skip, timeout: 600_000 }, () => {
  let standin: StandinProcess;
  let stateDir: string;
  let backend: ModalBackend;
  let environments: TaskEnvironments;
  let runner: CodeRunner;
  const saved = { ...process.env };
  const tenant = `code-${randomBytes(4).toString('hex')}`;
  let nextTask = 0;
  const keys: TaskKey[] = [];
  const newTask = (): TaskKey => {
    const key = { tenant, taskId: `code-${++nextTask}` };
    keys.push(key);
    return key;
  };
  const inSandbox = async (key: TaskKey, command: string) => {
    const r = await environments.exec(key, { command, timeoutMs: 30_000 });
    assert.equal(r.exitCode, 0, r.output);
    return r.output.trim();
  };

  before(async () => {
    standin = await startModalStandin();
    Object.assign(process.env, standin.env);
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'berth-modal-code-'));
    backend = await ModalBackend.start({ image: SANDBOX_IMAGE, stateDir, cpu: 1, memoryMiB: 512, persistent: false, logger: silentLogger() });
    environments = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
    runner = new CodeRunner(environments, { logger: silentLogger(), killGraceMs: 1000 });
  });

  afterEach(async () => {
    await Promise.all(keys.splice(0).map((key) => environments.release(key)));
  });

  after(async () => {
    await environments?.closeAll();
    await backend?.close();
    for (const name of ['MODAL_SERVER_URL', 'MODAL_TOKEN_ID', 'MODAL_TOKEN_SECRET']) {
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    }
    await standin?.stop();
    await rm(stateDir, { recursive: true, force: true });
  });

  function run(key: TaskKey, code: string, options: Partial<TaskCodeRunRequest> = {}): Promise<TaskCodeRunResult> {
    return runner.run(key, {
      code,
      stubModule: buildHermesToolsModule(ALL_TOOLS),
      mode: 'project',
      timeoutMs: 60_000,
      maxStdoutBytes: 50_000,
      maxStderrBytes: 10_000,
      envPassthrough: [],
      credentialEnv: [],
      allowedTools: ALL_TOOLS,
      allowHostSubprocess: false,
      onToolCall: async (call) => JSON.stringify({ echo: call.tool, args: JSON.parse(call.argsJson) as unknown }),
      ...options,
    });
  }

  it('runs the script in the sandbox and says so; the run dir is removed after', async () => {
    const key = newTask();
    await inSandbox(key, `echo "by terminal" > /tmp/seen.txt`);
    const r = await run(key, 'import os\nprint(open("/tmp/seen.txt").read().strip())\nprint(os.path.dirname(os.environ["HERMES_RPC_SOCKET"]))');
    assert.equal(r.exitCode, 0, r.stderr);
    const [seen, runDir] = r.stdout.trim().split('\n');
    assert.equal(seen, 'by terminal');
    assert.match(runDir ?? '', /^\/tmp\/berth-code\/code-[0-9a-f]{16}$/);
    assert.match(r.ranIn, /^the task's modal environment \(modal:berth-[0-9a-f]{40} \(.+\)\)$/);
    assert.deepEqual(r.notices, []);
    assert.equal(await inSandbox(key, `test -e ${runDir} && echo left || echo gone`), 'gone');
  });

  it("carries 1 MB tool results and 1 MB arguments whole over the SDK exec's stdin and stdout", async () => {
    const megabyte = 'y'.repeat(1024 * 1024);
    let argsBytes = 0;
    const code = `from hermes_tools import read_file, write_file
print(len(read_file("big")["content"]))
print(write_file("out", "z" * (1024 * 1024))["ok"])
`;
    const r = await run(newTask(), code, {
      onToolCall: async (call) => {
        if (call.tool === 'write_file') {
          argsBytes = call.argsJson.length;
          return '{"ok": true}';
        }
        return `{"content": "${megabyte}"}`;
      },
    });
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, `${megabyte.length}\nTrue\n`);
    assert.ok(argsBytes > 1024 * 1024);
  });

  it('is not held up by a script that floods requests and never reads the answers', async () => {
    const key = newTask();
    const big = JSON.stringify({ content: 'x'.repeat(256 * 1024) });
    const flood = `import json, os, socket
s = socket.socket(socket.AF_UNIX); s.connect(os.environ["HERMES_RPC_SOCKET"])
line = (json.dumps({"tool": "read_file", "args": {"path": "p"}, "token": os.environ["HERMES_RPC_TOKEN"]}) + "\\n").encode()
s.setblocking(False)
sent = 0
for _ in range(64):
    try:
        s.send(line); sent += 1
    except BlockingIOError:
        break
print("done")
`;
    const f = await run(key, flood, { onToolCall: async () => big });
    assert.equal(f.timedOut, false);
    assert.equal(f.stdout, 'done\n');
    // The agent's stream is still good for the task.
    assert.equal((await run(key, 'print(1)')).stdout, '1\n');
    assert.equal(await inSandbox(key, 'echo still'), 'still');
  });

  it("timeout kills the script's whole process group inside the sandbox", async () => {
    const key = newTask();
    const seconds = String(500_000 + Math.floor(Math.random() * 99_999));
    const code = `import subprocess, time
subprocess.Popen(["sleep", "${seconds}"])
print("started", flush=True)
time.sleep(300)
`;
    const r = await run(key, code, { timeoutMs: 3000 });
    assert.equal(r.timedOut, true);
    assert.equal(r.stdout, 'started\n');
    for (let i = 0; (await inSandbox(key, countProcessesScript(seconds))) !== 'count=0'; i++) {
      if (i > 100) assert.fail("the script's child survived the timeout");
      await sleep(100);
    }
  });

  it('interrupt for the task stops the script and reports it', async () => {
    const key = newTask();
    let called!: () => void;
    const started = new Promise<void>((resolve) => (called = resolve));
    const code = `import time\nfrom hermes_tools import terminal\nprint("before", flush=True)\nterminal("true")\ntime.sleep(300)\n`;
    const running = run(key, code, {
      onToolCall: async () => {
        called();
        return '{"output": "", "exit_code": 0}';
      },
    });
    await started;
    await sleep(300);
    assert.equal(environments.interrupt(key), 1);
    const r = await running;
    assert.equal(r.interrupted, true);
    assert.equal(r.stdout, 'before\n');
    assert.equal(await inSandbox(key, 'ls -A /tmp/berth-code | wc -l'), '0');
  });

  it("run dirs a persistent task's snapshot carried are dropped when its next sandbox starts", async () => {
    const persistent = await ModalBackend.start({ image: SANDBOX_IMAGE, stateDir, cpu: 1, memoryMiB: 512, persistent: true, logger: silentLogger() });
    const key = { tenant, taskId: `persist-${randomBytes(4).toString('hex')}` };
    try {
      const first = await persistent.createEnvironment(key);
      const r = await first.exec({ script: 'mkdir -p /tmp/berth-code/code-leftover && echo x > /tmp/berth-code/code-leftover/rpc.sock && echo kept > /tmp/kept.txt', timeoutMs: 30_000 });
      assert.equal(r.exitCode, 0);
      await first.dispose();
      const next = await persistent.createEnvironment(key);
      let output = '';
      const r2 = await next.exec({
        script: 'cat /tmp/kept.txt; ls -A /tmp/berth-code | wc -l; stat -c %a /tmp/berth-code',
        timeoutMs: 30_000,
        onOutput: (c) => (output += c.toString('utf8')),
      });
      assert.equal(r2.exitCode, 0, output);
      // The snapshot carried /tmp (kept.txt), but not the old run dir.
      assert.equal(output, 'kept\n0\n700\n');
      assert.equal(next.rpcRelay?.sandboxDir, '/tmp/berth-code');
      await next.dispose();
    } finally {
      await persistent.close();
    }
  });
});
