/**
 * execute_code cases every backend whose script socket is relayed over the
 * exec agent's one stream must pass (modal's SDK exec, daytona's PTY): the
 * script runs in the task's sandbox, 1 MB crosses the stream either way, a
 * flooding script holds nothing up, a timeout kills the script's process
 * group there and an interrupt stops it. Call inside the backend's describe,
 * after its before() hook is registered.
 */
import assert from 'node:assert/strict';
import { afterEach, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { silentLogger } from '../../services/common/logging.js';
import type { TaskCodeRunRequest, TaskCodeRunResult } from '../../services/common/task-client.js';
import { buildHermesToolsModule } from '../../services/dispatcher/tools/code-execution/hermes-tools-module.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { CodeRunner } from '../../services/executor/code-execution/code-runner.js';
import type { TaskEnvironments } from '../../services/executor/task-environment.js';
import { countProcessesScript } from '../../services/conformance/process-probe.js';

const ALL_TOOLS = ['read_file', 'write_file', 'search_files', 'patch', 'terminal'];

export interface AgentCodeRunnerSuite {
  /** The backend's task environments, made by the caller's before() hook. */
  readonly environments: () => TaskEnvironments;
  readonly tenant: string;
  /** What a run's `ranIn` must say. */
  readonly ranIn: RegExp;
  /** The stream the socket is relayed over, for the test titles. */
  readonly stream: string;
}

export function agentCodeRunnerCases(suite: AgentCodeRunnerSuite): void {
  let runner: CodeRunner | undefined;
  let nextTask = 0;
  const keys: TaskKey[] = [];
  const newTask = (): TaskKey => {
    const key = { tenant: suite.tenant, taskId: `code-${++nextTask}` };
    keys.push(key);
    return key;
  };
  const inSandbox = async (key: TaskKey, command: string) => {
    const r = await suite.environments().exec(key, { command, timeoutMs: 30_000 });
    assert.equal(r.exitCode, 0, r.output);
    return r.output.trim();
  };
  const run = (key: TaskKey, code: string, options: Partial<TaskCodeRunRequest> = {}): Promise<TaskCodeRunResult> => {
    runner ??= new CodeRunner(suite.environments(), { logger: silentLogger(), killGraceMs: 1000 });
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
  };

  afterEach(async () => {
    await Promise.all(keys.splice(0).map((key) => suite.environments().release(key)));
  });

  it('runs the script in the sandbox and says so; the run dir is removed after', async () => {
    const key = newTask();
    await inSandbox(key, `echo "by terminal" > /tmp/seen.txt`);
    const r = await run(key, 'import os\nprint(open("/tmp/seen.txt").read().strip())\nprint(os.path.dirname(os.environ["HERMES_RPC_SOCKET"]))');
    assert.equal(r.exitCode, 0, r.stderr);
    const [seen, runDir] = r.stdout.trim().split('\n');
    assert.equal(seen, 'by terminal');
    assert.match(runDir ?? '', /^\/tmp\/berth-code\/code-[0-9a-f]{16}$/);
    assert.match(r.ranIn, suite.ranIn);
    assert.deepEqual(r.notices, []);
    assert.equal(await inSandbox(key, `test -e ${runDir} && echo left || echo gone`), 'gone');
  });

  it(`carries 1 MB tool results and 1 MB arguments whole over ${suite.stream}`, async () => {
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
    assert.equal(suite.environments().interrupt(key), 1);
    const r = await running;
    assert.equal(r.interrupted, true);
    assert.equal(r.stdout, 'before\n');
    assert.equal(await inSandbox(key, 'ls -A /tmp/berth-code | wc -l'), '0');
  });
}
