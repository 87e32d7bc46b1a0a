/**
 * The executor's execute_code runner on the local backend: real python3,
 * real Unix sockets, real process groups. Tool calls are answered by a fake
 * dispatcher (`onToolCall`) so each socket behaviour is observable on its own.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, symlinkSync, mkdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { after, before, describe, it } from 'node:test';
import { BerthError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import { buildHermesToolsModule } from '../../services/dispatcher/tools/code-execution/hermes-tools-module.js';
import type { TaskCodeRunRequest, TaskCodeRunResult, TaskCodeToolCall } from '../../services/common/task-client.js';
import type { Backend, BackendEnvironment, TaskKey } from '../../services/executor/backend.js';
import { LocalBackend } from '../../services/executor/backends/local/local-backend.js';
import { CODE_KILL_GRACE_MS, CodeRunner, HOST_SUBPROCESS_NOTICE } from '../../services/executor/code-execution/code-runner.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { pythonBinDir, realPython } from '../support/python-bin.js';

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

async function until<T>(what: string, fn: () => T | undefined, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const ALL_TOOLS = ['read_file', 'write_file', 'search_files', 'patch', 'terminal'];

describe('CodeRunner on the local backend', () => {
  let root: string;
  let cwd: string;
  let environments: TaskEnvironments;
  let runner: CodeRunner;
  let nextTask = 0;
  const newTask = (): TaskKey => ({ tenant: 'default', taskId: `code-${++nextTask}` });

  before(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'berth-code-'));
    cwd = path.join(root, 'work');
    mkdirSync(cwd);
    const backend = new LocalBackend({
      stateRoot: path.join(root, 'state'),
      initialCwd: cwd,
      homeDir: root,
      envPassthrough: ['OPENAI_API_KEY'],
      baseEnv: {
        ...process.env,
        PATH: `${pythonBinDir(root)}:${process.env.PATH ?? ''}`,
        // A home without a login profile: the tasks' login shells start in milliseconds whatever this machine's profile does.
        HOME: root,
        BERTH_CANARY_SECRET: 'canary-secret-value',
        CANARY_PLAIN: 'canary-plain-value',
        OPENAI_API_KEY: 'sk-canary-provider',
        HERMES_KANBAN_DB: '/db',
      },
    });
    environments = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
    runner = new CodeRunner(environments, { logger: silentLogger() });
  });

  after(async () => {
    await environments.closeAll();
    await rm(root, { recursive: true, force: true });
  });

  function run(
    key: TaskKey,
    code: string,
    options: Partial<TaskCodeRunRequest> & { tools?: string[] } = {},
  ): Promise<TaskCodeRunResult> {
    const tools = options.tools ?? ALL_TOOLS;
    return runner.run(key, {
      code,
      stubModule: buildHermesToolsModule(tools),
      mode: 'project',
      timeoutMs: 60_000,
      maxStdoutBytes: 50_000,
      maxStderrBytes: 10_000,
      envPassthrough: [],
      credentialEnv: [],
      allowedTools: tools,
      allowHostSubprocess: true,
      onToolCall: async (call) => JSON.stringify({ echo: call.tool, args: JSON.parse(call.argsJson) as unknown }),
      ...options,
    });
  }

  it('runs a script and says where it ran', async () => {
    const r = await run(newTask(), 'print("hello")');
    assert.equal(r.stdout, 'hello\n');
    assert.equal(r.exitCode, 0);
    assert.match(r.ranIn, /subprocess on the executor host \(local backend, single-user mode/);
    assert.ok(r.notices.includes(HOST_SUBPROCESS_NOTICE));
  });

  it('relays tool calls and hands the script the parsed result', async () => {
    const calls: TaskCodeToolCall[] = [];
    const r = await run(
      newTask(),
      'from hermes_tools import read_file, terminal\nprint(read_file("a.txt")["args"])\nprint(terminal("ls", timeout=5)["echo"])',
      {
        onToolCall: async (call) => {
          calls.push(call);
          return JSON.stringify({ echo: call.tool, args: JSON.parse(call.argsJson) as unknown });
        },
      },
    );
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, "{'path': 'a.txt', 'offset': 1, 'limit': 2000}\nterminal\n");
    assert.deepEqual(
      calls.map((c) => [c.tool, JSON.parse(c.argsJson) as unknown]),
      [
        ['read_file', { path: 'a.txt', offset: 1, limit: 2000 }],
        ['terminal', { command: 'ls', timeout: 5 }],
      ],
    );
  });

  it('answers a bad token with Unauthorized and never forwards the call; the socket is 0600', async () => {
    let forwarded = 0;
    const code = `import os, socket, stat
s = socket.socket(socket.AF_UNIX); s.connect(os.environ["HERMES_RPC_SOCKET"]); f = s.makefile("rb")
s.sendall(b'{"tool": "terminal", "args": {"command": "id"}, "token": "wrong"}\\n'); print(f.readline().decode().strip())
s.sendall(b'{"tool": "terminal", "args": {"command": "id"}}\\n'); print(f.readline().decode().strip())
print(oct(stat.S_IMODE(os.stat(os.environ["HERMES_RPC_SOCKET"]).st_mode)))
`;
    const r = await run(newTask(), code, {
      onToolCall: async () => {
        forwarded++;
        return '{}';
      },
    });
    assert.equal(r.exitCode, 0, r.stderr);
    assert.deepEqual(r.stdout.trim().split('\n'), [
      '{"error":"Unauthorized RPC request"}',
      '{"error":"Unauthorized RPC request"}',
      '0o600',
    ]);
    assert.equal(forwarded, 0);
  });

  it('answers malformed lines with Invalid RPC request and keeps serving the connection', async () => {
    const code = `import json, os, socket
tok = os.environ["HERMES_RPC_TOKEN"]
s = socket.socket(socket.AF_UNIX); s.connect(os.environ["HERMES_RPC_SOCKET"]); f = s.makefile("rb")
for line in [b"this is not json", b"[1, 2]", json.dumps({"tool": "", "token": tok}).encode(), json.dumps({"tool": "read_file", "args": "x", "token": tok}).encode(), b"\\xff\\xfe", json.dumps({"tool": "read_file", "args": {"path": "ok"}, "token": tok}).encode()]:
    s.sendall(line + b"\\n")
    print(f.readline().decode().strip())
`;
    const r = await run(newTask(), code);
    assert.equal(r.exitCode, 0, r.stderr);
    const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as { error?: string; echo?: string });
    assert.equal(lines.length, 6);
    for (const line of lines.slice(0, 5)) assert.match(line.error ?? '', /^Invalid RPC request: /);
    assert.equal(lines[5]?.echo, 'read_file');
  });

  it('cuts off a request line over the cap without buffering it', async () => {
    const code = `import os, socket
s = socket.socket(socket.AF_UNIX); s.connect(os.environ["HERMES_RPC_SOCKET"]); f = s.makefile("rb")
try:
    s.sendall(b"x" * (10 * 1024 * 1024))
except OSError:
    pass
print(f.readline().decode().strip())
`;
    const r = await run(newTask(), code);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.match(r.stdout, /^\{"error":"Invalid RPC request: request line longer than \d+ bytes"\}/);
  });

  it('is not held up by a script that floods requests and never reads the answers', async () => {
    const code = `import json, os, socket, threading, time
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
    const big = JSON.stringify({ content: 'x'.repeat(200_000) });
    const key = newTask();
    const r = await run(key, code, { onToolCall: async () => big, timeoutMs: 60_000 });
    assert.equal(r.timedOut, false);
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, 'done\n');
    // The executor still serves the same task.
    assert.equal((await run(key, 'print(1)')).stdout, '1\n');
  });

  it('carries 1 MB tool results and 1 MB arguments whole', async () => {
    const megabyte = 'y'.repeat(1024 * 1024);
    let argsBytes = 0;
    const code = `from hermes_tools import read_file, write_file, terminal
r = read_file("big")
print(len(r["content"]))
w = write_file("out", "z" * (1024 * 1024))
print(w["ok"])
t = terminal("lines")
print(type(t).__name__, len(t), t.endswith("[RESULT TRUNCATED]"))
`;
    const r = await run(newTask(), code, {
      onToolCall: async (call) => {
        if (call.tool === 'write_file') {
          argsBytes = call.argsJson.length;
          return '{"ok": true}';
        }
        if (call.tool === 'terminal') {
          // Several lines (a capped result): sent as one JSON string line, handed over as text.
          return `{"output": "${megabyte}"}\n\n... [RESULT TRUNCATED]`;
        }
        return `{"content": "${megabyte}"}`;
      },
    });
    assert.equal(r.exitCode, 0, r.stderr);
    assert.equal(r.stdout, `${megabyte.length}\nTrue\nstr ${megabyte.length + 38} True\n`);
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

  it('scrubs the environment: no secrets, no provider keys even when passed through, only allowed names', async () => {
    const code = `import json, os
print(json.dumps(dict(os.environ)))
`;
    const r = await run(newTask(), code, { envPassthrough: ['OPENAI_API_KEY', 'CANARY_PLAIN'] });
    assert.equal(r.exitCode, 0, r.stderr);
    const env = JSON.parse(r.stdout) as Record<string, string>;
    assert.ok(!r.stdout.includes('canary-secret-value'));
    assert.ok(!r.stdout.includes('sk-canary-provider'));
    assert.equal(env.CANARY_PLAIN, 'canary-plain-value');
    assert.equal(env.HERMES_KANBAN_DB, undefined);
    assert.equal(env.PYTHONDONTWRITEBYTECODE, '1');
    assert.equal(env.PYTHONUTF8, '1');
    assert.equal(env.PYTHONIOENCODING, 'utf-8');
    const stubDir = env.PYTHONPATH?.split(':')[0] ?? '';
    assert.equal(path.dirname(env.HERMES_RPC_SOCKET ?? ''), stubDir);
    assert.match(path.basename(stubDir), /^code-[0-9a-f]{16}$/);
    assert.ok(!existsSync(stubDir), 'the staging dir is removed after the run');
    assert.ok(!(env.PYTHONPATH ?? '').includes('/work/main'), 'no Berth code on PYTHONPATH');
    // Without passthrough the plain canary is dropped too.
    const plain = await run(newTask(), code);
    assert.equal((JSON.parse(plain.stdout) as Record<string, string>).CANARY_PLAIN, undefined);
  });

  it('project mode runs in the task cwd with the task shell state; strict mode in the staging dir', async () => {
    const key = newTask();
    const sub = path.join(cwd, 'sub');
    mkdirSync(sub, { recursive: true });
    const venv = path.join(root, 'venv');
    mkdirSync(path.join(venv, 'bin'), { recursive: true });
    symlinkSync(realPython(), path.join(venv, 'bin', 'python'));
    await environments.exec(key, { command: `cd ${sub} && export VIRTUAL_ENV=${venv}`, timeoutMs: 10_000 });
    const code = 'import os, sys\nimport hermes_tools\nprint(os.getcwd())\nprint(os.environ.get("VIRTUAL_ENV"))';
    const project = await run(key, code);
    assert.equal(project.exitCode, 0, project.stderr);
    assert.deepEqual(project.stdout.trim().split('\n'), [sub, venv]);
    assert.equal(project.interpreter, path.join(venv, 'bin', 'python'));
    const strict = await run(key, code, { mode: 'strict' });
    assert.equal(strict.exitCode, 0, strict.stderr);
    assert.equal(strict.interpreter, 'python3');
    const strictCwd = strict.stdout.trim().split('\n')[0] ?? '';
    assert.match(path.basename(strictCwd), /^code-[0-9a-f]{16}$/);
    assert.ok(!existsSync(strictCwd), 'the staging dir is removed after the run');
  });

  it('follows the task state between runs: a venv activated or left, a cd, a new variable', async () => {
    const key = newTask();
    const venv = path.join(root, 'venv-between');
    mkdirSync(path.join(venv, 'bin'), { recursive: true });
    symlinkSync(realPython(), path.join(venv, 'bin', 'python'));
    const code = 'import os\nprint(os.getcwd(), os.environ.get("XDG_BETWEEN", "-"))';
    const states: Array<[string, string]> = [];
    const step = async (command: string | undefined) => {
      if (command !== undefined) await environments.exec(key, { command, timeoutMs: 10_000 });
      const r = await run(key, code);
      assert.equal(r.exitCode, 0, r.stderr);
      states.push([r.interpreter, r.stdout.trim()]);
    };
    await step(undefined);
    await step(undefined); // nothing changed in between
    await step(`export VIRTUAL_ENV=${venv} XDG_BETWEEN=1`);
    await step('cd /tmp');
    await step('unset VIRTUAL_ENV');
    assert.deepEqual(states, [
      ['python3', `${cwd} -`],
      ['python3', `${cwd} -`],
      [path.join(venv, 'bin', 'python'), `${cwd} 1`],
      [path.join(venv, 'bin', 'python'), '/tmp 1'],
      ['python3', '/tmp 1'],
    ]);
  });

  it('timeout kills the script\'s whole process group', async () => {
    const pidFile = path.join(root, 'timeout-child.pid');
    const code = `import subprocess, time
p = subprocess.Popen(["sleep", "300"])
open(${JSON.stringify(pidFile)}, "w").write(str(p.pid))
print("started", flush=True)
time.sleep(300)
`;
    const r = await run(newTask(), code, { timeoutMs: 5000 });
    assert.equal(r.timedOut, true);
    assert.equal(r.stdout, 'started\n');
    const child = Number(readFileSync(pidFile, 'utf8'));
    await until('the child to die', () => (isAlive(child) ? undefined : true), 10_000);
  });

  it(`a script that ignores SIGTERM is killed after the ${CODE_KILL_GRACE_MS / 1000} s grace`, async () => {
    const code = `import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ignoring", flush=True)
time.sleep(300)
`;
    const started = performance.now();
    const r = await run(newTask(), code, { timeoutMs: 8000 });
    const elapsed = performance.now() - started;
    assert.equal(r.timedOut, true);
    // A lower bound only: the grace was waited out (SIGTERM alone did nothing), then SIGKILL ended it.
    assert.ok(elapsed >= 8000 + CODE_KILL_GRACE_MS - 500, `killed after ${elapsed} ms`);
  });

  it('interrupt for the task stops the script and reports it', async () => {
    const key = newTask();
    const marker = path.join(root, `interrupt-${key.taskId}`);
    const code = `import time
open(${JSON.stringify(marker)}, "w").write("x")
print("before", flush=True)
time.sleep(300)
`;
    const running = run(key, code);
    await until('the script to start', () => (existsSync(marker) ? true : undefined), 60_000);
    assert.equal(environments.interrupt(key), 1);
    const r = await running;
    assert.equal(r.interrupted, true);
    assert.equal(r.stdout, 'before\n');
  });

  it('runs scripts of different tasks concurrently, each with its own socket and calls', async () => {
    const keys = [newTask(), newTask(), newTask()];
    const results = await Promise.all(
      keys.map((key) =>
        run(key, `from hermes_tools import terminal\nprint(sum(terminal("n")["n"] for _ in range(20)))`, {
          onToolCall: async () => JSON.stringify({ n: Number(key.taskId.split('-')[1]) }),
        }),
      ),
    );
    assert.deepEqual(
      results.map((r) => r.stdout.trim()),
      keys.map((k) => String(20 * Number(k.taskId.split('-')[1]))),
    );
  });

  it('refuses the local backend outside single-user mode', async () => {
    await assert.rejects(run(newTask(), 'print(1)', { allowHostSubprocess: false }), (err: unknown) => {
      assert.ok(err instanceof BerthError);
      assert.equal(err.code, 'FAILED_PRECONDITION');
      assert.match(err.message, /only in single-user mode/);
      return true;
    });
  });
});

describe('CodeRunner on a backend without an rpcDir', () => {
  it('without code containers fails with an error naming the backend and the setting, and runs nothing', async () => {
    const root = await mkdtemp(path.join(os.tmpdir(), 'berth-code-nodir-'));
    const local = new LocalBackend({ stateRoot: root, initialCwd: root });
    let execs = 0;
    const ssh: Backend = {
      capabilities: { name: 'ssh', pty: false, hostFilesystem: false, sharesRpcDir: false },
      async createEnvironment(key) {
        const env = await local.createEnvironment(key);
        const withoutDir: BackendEnvironment = {
          description: `ssh:${key.taskId}`,
          homeDir: env.homeDir,
          initialCwd: env.initialCwd,
          stateDir: env.stateDir,
          exec: (o) => {
            execs++;
            return env.exec(o);
          },
          startBackground: (o) => env.startBackground(o),
          readFile: (p) => env.readFile(p),
          writeFile: (p, d) => env.writeFile(p, d),
          stat: (p) => env.stat(p),
          dispose: () => env.dispose(),
        };
        return withoutDir;
      },
      close: () => local.close(),
    };
    const environments = new TaskEnvironments({ backend: ssh, logger: silentLogger(), lifetimeSeconds: 0 });
    try {
      const runner = new CodeRunner(environments, { logger: silentLogger() });
      await assert.rejects(
        runner.run(
          { tenant: 't', taskId: 'x' },
          {
            code: 'print(1)',
            stubModule: '',
            mode: 'project',
            timeoutMs: 10_000,
            maxStdoutBytes: 1000,
            maxStderrBytes: 1000,
            envPassthrough: [],
            credentialEnv: [],
            allowedTools: [],
            allowHostSubprocess: true,
            onToolCall: async () => '{}',
          },
        ),
        (err: unknown) => {
          assert.ok(err instanceof BerthError);
          assert.equal(err.code, 'FAILED_PRECONDITION');
          assert.match(err.message, /execute_code cannot run on the ssh backend/);
          assert.match(err.message, /per-task code container, and code_execution\.code_container is off/);
          return true;
        },
      );
      assert.equal(execs, 0);
    } finally {
      await environments.closeAll();
      await rm(root, { recursive: true, force: true });
    }
  });
});
