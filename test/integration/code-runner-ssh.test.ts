/**
 * The executor's execute_code runner on the ssh backend, against a real
 * sshd: the script runs on the host, its rpc.sock made there by the task's
 * exec agent and relayed over the agent's stream to the same RPC server as
 * on local and docker. The socket's answers, limits, scrubbing, modes,
 * timeout and interrupt are spec §6's, seen through the relay.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskCodeRunRequest, TaskCodeRunResult } from '../../services/common/task-client.js';
import { buildHermesToolsModule } from '../../services/dispatcher/tools/code-execution/hermes-tools-module.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { SshBackend } from '../../services/executor/backends/ssh/ssh-backend.js';
import { CodeRunner } from '../../services/executor/code-execution/code-runner.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { countProcessesScript } from '../../services/conformance/process-probe.js';
import { startSshd, type StartedSshd } from '../../services/cli/bench/sshd-container.js';

const ALL_TOOLS = ['read_file', 'write_file', 'search_files', 'patch', 'terminal'];
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

describe('CodeRunner on the ssh backend (socket relayed by the exec agent)', { timeout: 300_000 }, () => {
  let sshd: StartedSshd;
  let stateDir: string;
  let backend: SshBackend;
  let environments: TaskEnvironments;
  let runner: CodeRunner;
  let nextTask = 0;
  const keys: TaskKey[] = [];
  const newTask = (): TaskKey => {
    const key = { tenant: 'code', taskId: `code-${++nextTask}` };
    keys.push(key);
    return key;
  };
  const onServer = async (script: string) => (await sshd.exec(['bash', '-c', script])).output;

  before(async () => {
    sshd = await startSshd();
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'berth-code-ssh-'));
    backend = new SshBackend({
      host: sshd.host,
      port: sshd.port,
      user: sshd.user,
      privateKey: sshd.keys.privateKey,
      knownHostsPath: path.join(stateDir, 'known_hosts'),
      pollIntervalMs: 100,
    });
    environments = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
    runner = new CodeRunner(environments, { logger: silentLogger(), killGraceMs: 1000 });
  });

  afterEach(async () => {
    await Promise.all(keys.splice(0).map((key) => environments.release(key)));
  });

  after(async () => {
    await environments?.closeAll();
    await backend?.close();
    await sshd?.stop();
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

  it('runs the script on the host and says so, with no code-container notice', async () => {
    const key = newTask();
    const r = await run(key, 'import socket\nprint(socket.gethostname())');
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout.trim(), sshd.containerId.slice(0, 12));
    assert.match(r.ranIn, /^the task's ssh environment \(ssh:sandbox@127\.0\.0\.1:\d+:\/home\/sandbox\/\.berth\/tasks\/[0-9a-f]{32}\)$/);
    assert.deepEqual(r.notices, []);
  });

  it('answers a bad token with Unauthorized and malformed lines with Invalid RPC request; the socket is 0600', async () => {
    let forwarded = 0;
    const code = `import json, os, socket, stat
tok = os.environ["HERMES_RPC_TOKEN"]
s = socket.socket(socket.AF_UNIX); s.connect(os.environ["HERMES_RPC_SOCKET"]); f = s.makefile("rb")
for line in [b'{"tool": "terminal", "args": {"command": "id"}, "token": "wrong"}', b"this is not json", json.dumps({"tool": "read_file", "args": "x", "token": tok}).encode(), json.dumps({"tool": "read_file", "args": {"path": "ok"}, "token": tok}).encode()]:
    s.sendall(line + b"\\n")
    print(f.readline().decode().strip())
print(oct(stat.S_IMODE(os.stat(os.environ["HERMES_RPC_SOCKET"]).st_mode)))
print(oct(stat.S_IMODE(os.stat(os.path.dirname(os.environ["HERMES_RPC_SOCKET"])).st_mode)))
`;
    const r = await run(newTask(), code, {
      onToolCall: async () => {
        forwarded++;
        return '{"answered": true}';
      },
    });
    assert.equal(r.exitCode, 0, r.stderr);
    const lines = r.stdout.trim().split('\n');
    assert.equal(lines[0], '{"error":"Unauthorized RPC request"}');
    assert.match(lines[1] ?? '', /^\{"error":"Invalid RPC request: not valid JSON/);
    assert.equal(lines[2], '{"error":"Invalid RPC request: \\"args\\" must be a JSON object"}');
    assert.equal(lines[3], '{"answered": true}');
    assert.deepEqual(lines.slice(4), ['0o600', '0o700']);
    assert.equal(forwarded, 1);
  });

  it('cuts off a request line over the cap, and is not held up by a flood that never reads', async () => {
    const over = `import os, socket
s = socket.socket(socket.AF_UNIX); s.connect(os.environ["HERMES_RPC_SOCKET"]); f = s.makefile("rb")
try:
    s.sendall(b"x" * (10 * 1024 * 1024))
except OSError:
    pass
print(f.readline().decode().strip())
`;
    const r = await run(newTask(), over);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, /^\{"error":"Invalid RPC request: request line longer than \d+ bytes"\}/);

    const flood = `import json, os, socket, threading, time
req = (json.dumps({"tool": "read_file", "args": {"path": "p"}, "token": os.environ["HERMES_RPC_TOKEN"]}) + "\\n").encode()
def flood():
    s = socket.socket(socket.AF_UNIX); s.connect(os.environ["HERMES_RPC_SOCKET"])
    try:
        while True:
            s.sendall(req * 100)
    except OSError:
        pass
for _ in range(4):
    threading.Thread(target=flood, daemon=True).start()
time.sleep(1.5)
print("done", flush=True)
os._exit(0)
`;
    const key = newTask();
    const big = JSON.stringify({ content: 'x'.repeat(200_000) });
    const f = await run(key, flood, { onToolCall: async () => big });
    assert.equal(f.timedOut, false);
    assert.equal(f.stdout, 'done\n');
    assert.equal((await run(key, 'print(1)')).stdout, '1\n');
  });

  it('carries 1 MB tool results and 1 MB arguments whole', async () => {
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

  it('caps stdout (head and tail, with the notice) and stderr (head)', async () => {
    const code = `import sys
sys.stdout.write("A" * 400 + "B" * 100000 + "C" * 600)
sys.stderr.write("E" * 5000)
sys.exit(2)
`;
    const r = await run(newTask(), code, { maxStdoutBytes: 1000, maxStderrBytes: 100 });
    assert.equal(r.exitCode, 2);
    assert.equal(r.stdout, 'A'.repeat(400) + '\n\n... [OUTPUT TRUNCATED - 100,000 chars omitted out of 101,000 total] ...\n\n' + 'C'.repeat(600));
    assert.equal(r.stderr, 'E'.repeat(100));
  });

  it('scrubs the environment the task exported, and removes the run dir on the host', async () => {
    const key = newTask();
    await environments.exec(key, { command: 'export DB_PASSWORD=hunter2 PLAIN_NAME=kept-out LANG=C.UTF-8', timeoutMs: 20_000 });
    const r = await run(key, 'import json, os\nprint(json.dumps(dict(os.environ)))');
    assert.equal(r.exitCode, 0, r.stderr);
    const env = JSON.parse(r.stdout) as Record<string, string>;
    assert.equal(env.DB_PASSWORD, undefined);
    assert.equal(env.PLAIN_NAME, undefined);
    assert.equal(env.LANG, 'C.UTF-8');
    assert.equal(env.PYTHONDONTWRITEBYTECODE, '1');
    const stubDir = env.PYTHONPATH?.split(':')[0] ?? '';
    assert.equal(path.posix.dirname(env.HERMES_RPC_SOCKET ?? ''), stubDir);
    assert.match(path.posix.basename(stubDir), /^code-[0-9a-f]{16}$/);
    assert.equal((await onServer(`test -e ${stubDir} && echo left || echo gone`)).trim(), 'gone');
  });

  it('project mode runs in the task cwd; strict mode in the run dir', async () => {
    const key = newTask();
    await environments.exec(key, { command: 'mkdir -p /tmp/proj-mode && cd /tmp/proj-mode', timeoutMs: 20_000 });
    const code = 'import os\nprint(os.getcwd())';
    assert.equal((await run(key, code)).stdout.trim(), '/tmp/proj-mode');
    const strict = (await run(key, code, { mode: 'strict' })).stdout.trim();
    assert.match(strict, /^\/home\/sandbox\/\.berth\/tasks\/[0-9a-f]{32}\/code-[0-9a-f]{16}$/);
  });

  it('a task directory too long for a socket path gets its run dirs in a private dir under /tmp, removed with the task', async () => {
    const longBackend = new SshBackend({
      host: sshd.host,
      port: sshd.port,
      user: sshd.user,
      privateKey: sshd.keys.privateKey,
      knownHostsPath: path.join(stateDir, 'known_hosts'),
      tasksDir: `.berth/${'long-tasks-dir-'.repeat(4)}`,
    });
    const longEnvs = new TaskEnvironments({ backend: longBackend, logger: silentLogger(), lifetimeSeconds: 0 });
    const longRunner = new CodeRunner(longEnvs, { logger: silentLogger() });
    const key = { tenant: 'code', taskId: 'long-home' };
    try {
      const r = await longRunner.run(key, {
        code: 'import os\nfrom hermes_tools import terminal\nprint(os.environ["HERMES_RPC_SOCKET"])\nprint(terminal("pwd")["echo"])',
        stubModule: buildHermesToolsModule(ALL_TOOLS),
        mode: 'strict',
        timeoutMs: 60_000,
        maxStdoutBytes: 50_000,
        maxStderrBytes: 10_000,
        envPassthrough: [],
        credentialEnv: [],
        allowedTools: ALL_TOOLS,
        allowHostSubprocess: false,
        onToolCall: async (call) => JSON.stringify({ echo: call.tool }),
      });
      assert.equal(r.exitCode, 0, r.stderr);
      const [socketPath, echoed] = r.stdout.trim().split('\n');
      assert.match(socketPath ?? '', /^\/tmp\/berth-rpc-[A-Za-z0-9]{8}\/code-[0-9a-f]{16}\/rpc\.sock$/);
      assert.equal(echoed, 'terminal');
      const base = path.posix.dirname(path.posix.dirname(socketPath ?? ''));
      assert.equal((await onServer(`stat -c %a ${base}`)).trim(), '700');
      await longEnvs.release(key);
      assert.equal((await onServer(`test -e ${base} && echo left || echo gone`)).trim(), 'gone');
    } finally {
      await longEnvs.closeAll();
      await longBackend.close();
    }
  });

  it("timeout kills the script's whole process group on the host", async () => {
    const seconds = String(500_000 + Math.floor(Math.random() * 99_999));
    const code = `import subprocess, time
subprocess.Popen(["sleep", "${seconds}"])
print("started", flush=True)
time.sleep(300)
`;
    const r = await run(newTask(), code, { timeoutMs: 3000 });
    assert.equal(r.timedOut, true);
    assert.equal(r.stdout, 'started\n');
    for (let i = 0; Number(/count=(\d+)/.exec(await onServer(countProcessesScript(seconds)))?.[1]) !== 0; i++) {
      if (i > 100) assert.fail('the script\'s child survived the timeout');
      await sleep(100);
    }
  });

  it('interrupt for the task stops the script and reports it', async () => {
    const key = newTask();
    const marker = `/tmp/interrupt-${key.taskId}-${process.pid}`;
    const running = run(key, `import time\nopen("${marker}", "w").write("x")\nprint("before", flush=True)\ntime.sleep(300)\n`);
    for (let i = 0; (await onServer(`test -e ${marker} && echo yes || echo no`)).trim() !== 'yes'; i++) {
      if (i > 300) assert.fail('the script did not start');
      await sleep(100);
    }
    assert.equal(environments.interrupt(key), 1);
    const r = await running;
    assert.equal(r.interrupted, true);
    assert.equal(r.stdout, 'before\n');
  });
});
