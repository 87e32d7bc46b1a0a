/**
 * execute_code end to end: `bin/berth serve` as a child process, scripts in
 * real python3 calling tools back over the real socket and RunCode stream,
 * results through a real gRPC client. Covers the seed document's examples,
 * the secrets a script must never see, the script-call policy, interrupt,
 * timeout and concurrency.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { startServe, type ServeProcess } from '../support/serve-process.js';
import { pythonBinDir } from '../support/python-bin.js';
import { batchRefactorSeed, buildAndTestSeed, yamlSearchSeed } from '../support/seed-scripts.js';

interface CodeResult {
  status: string;
  output: string;
  tool_calls_made: number;
  duration_seconds: number;
  error?: string;
  notice?: string;
}

function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

async function waitFor<T>(what: string, fn: () => T | undefined, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** A scratch dir, a config file and the environment of one `berth serve`. */
function serveSetup(prefix: string, codeExecution: string, topLevel = '') {
  const scratch = mkdtempSync(join(tmpdir(), prefix));
  const work = join(scratch, 'work');
  mkdirSync(work);
  const config = join(scratch, 'config.yaml');
  writeFileSync(
    config,
    `${topLevel}terminal:\n  cwd: ${JSON.stringify(work)}\n  env_passthrough: [OPENAI_API_KEY]\ncode_execution:\n${codeExecution}`,
  );
  const env = {
    PATH: `${pythonBinDir(scratch)}:${process.env.PATH ?? ''}`,
    // No login profile: each new task's shell starts at once, whatever this machine's profile does.
    HOME: scratch,
    BERTH_CANARY_SECRET: 'canary-secret-4f1c',
    CANARY_PLAIN: 'canary-plain-9d2e',
    OPENAI_API_KEY: 'sk-canary-provider-7a3b',
  };
  return { scratch, work, config, env };
}

describe('execute_code through berth serve', () => {
  let serve: ServeProcess;
  let setup: ReturnType<typeof serveSetup>;

  before(async () => {
    setup = serveSetup('berth-e2e-code-', '  timeout: 60\n  max_tool_calls: 8\n', 'timezone: Asia/Kolkata\n');
    serve = await startServe(['--config', setup.config], { env: setup.env });
  });

  after(async () => {
    await serve.stop();
    rmSync(setup.scratch, { recursive: true, force: true });
  });

  async function runCode(code: string, taskId: string): Promise<CodeResult> {
    const r = await serve.client.callTool({ name: 'execute_code', argumentsJson: JSON.stringify({ code }), taskId, sessionId: 's' });
    return JSON.parse(r.resultJson) as CodeResult;
  }

  async function tool(name: string, args: unknown, taskId: string): Promise<Record<string, unknown>> {
    const r = await serve.client.callTool({ name, argumentsJson: JSON.stringify(args), taskId, sessionId: 's' });
    return JSON.parse(r.resultJson) as Record<string, unknown>;
  }

  test('the listed schema names the enabled functions and the configured limits', async () => {
    const r = await serve.cli(['tools', '--toolsets', 'code_execution,terminal']);
    assert.equal(r.code, 0, r.stderr);
    const tools = JSON.parse(r.stdout) as Array<{ function: { name: string; description: string; parameters: { required: string[] } } }>;
    const schema = tools.find((t) => t.function.name === 'execute_code')?.function;
    assert.ok(schema);
    assert.deepEqual(schema.parameters.required, ['code']);
    assert.match(schema.description, /: terminal\(command, timeout=None, workdir=None\), json_parse\(text\)/);
    assert.ok(!schema.description.includes('read_file'));
    assert.match(schema.description, /1-minute timeout, 50KB stdout cap, max 8 tool calls per script/);
  });

  test('empty, non-string and misdirected code are refused with the reference tool\'s errors', async () => {
    // Upstream's text now goes on from the spec's 'No code provided.' to say what to send instead.
    assert.deepEqual(await runCode('   ', 'empty'), {
      error:
        "No code provided. execute_code requires a non-empty 'code' parameter containing Python source. " +
        'To run shell commands, use terminal(command=...) instead.',
    });
    assert.deepEqual(await tool('execute_code', { code: ['print(1)'] }, 'empty'), {
      error:
        "execute_code received a list in 'code', but it requires Python source as a string. " +
        'Retry as execute_code(code="...").',
    });
    assert.deepEqual(await tool('execute_code', { command: 'ls' }, 'empty'), {
      error:
        "execute_code received a 'command' parameter, but it requires Python source in 'code'. " +
        'Use terminal(command=...) for shell commands; for Python, retry as execute_code(code=...).',
    });
  });

  test('scripts run with TZ set to the configured timezone', async () => {
    const r = await runCode('import os, time\nprint(os.environ.get("TZ"), time.strftime("%z"))\n', 'tz');
    assert.equal(r.status, 'success', JSON.stringify(r));
    assert.equal(r.output.trim(), 'Asia/Kolkata +0530');
  });

  test('a failed script carries a recovery hint; json_parse takes a leading BOM', async () => {
    const missing = await runCode('from hermes_tools import browser_navigate\n', 'hint');
    assert.equal(missing.status, 'error');
    assert.equal(
      (missing as CodeResult & { hint?: string }).hint,
      "'browser_navigate' is not available inside the execute_code sandbox. Importable tools here: patch, " +
        'read_file, search_files, terminal, write_file. For anything else, use the normal tool call instead of ' +
        'execute_code.',
    );
    const helper = await runCode('print(shell_quote("a b"))\n', 'hint');
    assert.equal(
      (helper as CodeResult & { hint?: string }).hint,
      'Import shell_quote before calling it: from hermes_tools import shell_quote',
    );
    const bom = await runCode('from hermes_tools import json_parse\nprint(json_parse("\\ufeff{\\"a\\": 1}")["a"])\n', 'hint');
    assert.equal(bom.status, 'success', JSON.stringify(bom));
    assert.equal(bom.output.trim(), '1');
  });

  /** Creates the files (absolute paths) on this host, as the task sees them. */
  function put(files: Record<string, string>): void {
    for (const [file, content] of Object.entries(files)) {
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, content);
    }
  }

  test('seed: find the *.yaml files that mention the database and preview them', async () => {
    const project = join(setup.work, 'configs');
    put(yamlSearchSeed.files(project));
    const r = await runCode(yamlSearchSeed.code(project), 'seed-yaml');
    yamlSearchSeed.assertResult(r);
    assert.match(r.notice ?? '', /subprocess on the executor host \(local backend, single-user mode\)/);
  });

  test('seed: batch refactor with search_files and patch(replace_all=True)', async () => {
    const root = join(setup.work, 'refactor');
    put(batchRefactorSeed.files(root));
    // The script's relative paths resolve against the task's cwd, as terminal() would.
    const cd = await tool('terminal', { command: `cd ${root}` }, 'seed-refactor');
    assert.equal(cd.exit_code, 0);
    const r = await runCode(batchRefactorSeed.code, 'seed-refactor');
    batchRefactorSeed.assertResult(r);
    const src = join(root, 'src');
    for (const name of ['a.py', 'b.py', 'c.py']) {
      const text = readFileSync(join(src, name), 'utf8');
      assert.ok(!text.includes('old_api_call'), `${name}: ${text}`);
      assert.ok(text.includes('new_api_call('), name);
    }
    assert.equal(readFileSync(join(src, 'b.py'), 'utf8'), batchRefactorSeed.patchedB);
  });

  test('seed: build-and-test pipeline through terminal() reporting passed/failed counts', async () => {
    const project = join(setup.work, 'project');
    put(buildAndTestSeed.files(project));
    const r = await runCode(buildAndTestSeed.code(project), 'seed-tests');
    buildAndTestSeed.assertResult(r);
  });

  test('a secret in the server environment is never visible to a script', async () => {
    const code = `import json, os
from hermes_tools import terminal
print(json.dumps({"env": dict(os.environ), "terminal": terminal("echo plain=$CANARY_PLAIN")["output"]}))
`;
    const r = await runCode(code, 'canary');
    assert.equal(r.status, 'success', JSON.stringify(r));
    const seen = JSON.parse(r.output) as { env: Record<string, string>; terminal: string };
    assert.equal(seen.env.BERTH_CANARY_SECRET, undefined);
    assert.equal(seen.env.OPENAI_API_KEY, undefined, 'provider keys never pass, even when passed through for terminal');
    assert.equal(seen.env.CANARY_PLAIN, undefined);
    assert.ok(!JSON.stringify(seen.env).includes('canary'));
    // The task's terminal still has what terminal is configured to see.
    assert.equal(seen.terminal, 'plain=canary-plain-9d2e');
  });

  test('the tool-call limit stops dispatching, and only dispatched calls count', async () => {
    const code = `from hermes_tools import terminal
import hermes_tools
refused = hermes_tools._call("process", {"action": "list"})
results = [terminal("true") for _ in range(10)]
errors = [r["error"] for r in results if r.get("error")]
print(len(errors))
print(errors[0])
print(refused["error"])
`;
    const r = await runCode(code, 'limit');
    assert.equal(r.status, 'success', JSON.stringify(r));
    assert.deepEqual(r.output.trim().split('\n'), [
      '2',
      'Tool call limit reached (8). No more tool calls allowed in this execution.',
      "Tool 'process' is not available in execute_code. Available: patch, read_file, search_files, terminal, write_file",
    ]);
    assert.equal(r.tool_calls_made, 8);
  });

  test('scripts cannot call execute_code or any tool outside the sandbox set', async () => {
    const code = `import hermes_tools
for name in ("execute_code", "process", "process_manage", "todo", "memory", "mcp-x_tool"):
    print(hermes_tools._call(name, {"code": "print(1)"})["error"])
`;
    const r = await runCode(code, 'whitelist');
    assert.equal(r.status, 'success', JSON.stringify(r));
    const available = 'Available: patch, read_file, search_files, terminal, write_file';
    assert.deepEqual(r.output.trim().split('\n'), [
      `Tool 'execute_code' is not available in execute_code. ${available}`,
      `Tool 'process' is not available in execute_code. ${available}`,
      `Tool 'process_manage' is not available in execute_code. ${available}`,
      `Tool 'todo' is not available in execute_code. ${available}`,
      `Tool 'memory' is not available in execute_code. ${available}`,
      `Tool 'mcp-x_tool' is not available in execute_code. ${available}`,
    ]);
    assert.equal(r.tool_calls_made, 0);
  });

  test('a bad token and a malformed line get their errors; terminal arguments that leave the foreground are dropped', async () => {
    const code = `import json, os, socket
from hermes_tools import terminal
s = socket.socket(socket.AF_UNIX); s.connect(os.environ["HERMES_RPC_SOCKET"]); f = s.makefile("rb")
s.sendall(b'{"tool": "terminal", "args": {"command": "true"}, "token": "guess"}\\n'); print(f.readline().decode().strip())
s.sendall(b'{"tool": "terminal", "args"\\n'); print(f.readline().decode().strip()[:40])
r = terminal("echo foreground")
bg = __import__("hermes_tools")._call("terminal", {"command": "echo still-foreground", "background": True, "pty": True, "notify": True, "notify_on_complete": True, "watch_patterns": ["x"], "heartbeat": 60, "persist_on_release": True})
print(r["output"], bg["output"], "session_id" in bg)
`;
    const r = await runCode(code, 'socket-errors');
    assert.equal(r.status, 'success', JSON.stringify(r));
    assert.deepEqual(r.output.trim().split('\n'), [
      '{"error":"Unauthorized RPC request"}',
      '{"error":"Invalid RPC request: not valid',
      'foreground still-foreground False',
    ]);
    assert.equal(r.tool_calls_made, 2);
  });

  test('terminal calls from a script go through the same approval guard as top-level calls', async () => {
    const victim = join(setup.work, 'keep-me');
    mkdirSync(join(victim, 'inner'), { recursive: true });
    const code = `import os
from hermes_tools import terminal
r = terminal("rm -rf ${victim}")
print(r.get("status"), r.get("approval_pending"), r.get("exit_code"))
print(os.path.isdir(${JSON.stringify(victim)}))
`;
    const r = await runCode(code, 'approval');
    assert.equal(r.status, 'success', JSON.stringify(r));
    assert.deepEqual(r.output.trim().split('\n'), ['pending_approval True -1', 'True']);
    assert.ok(existsSync(join(victim, 'inner')));
  });

  test('1 MB of arguments reaches the tool whole', async () => {
    const target = join(setup.work, 'big.txt');
    const code = `from hermes_tools import write_file, terminal
w = write_file(${JSON.stringify(target)}, "0123456789abcdef" * 65536)
print(w.get("bytes_written"), terminal("wc -c < ${target}")["output"].strip())
`;
    const r = await runCode(code, 'megabyte');
    assert.equal(r.status, 'success', JSON.stringify(r));
    assert.equal(r.output.trim(), '1048576 1048576');
  });

  test('non-zero exit reports stderr under the separator', async () => {
    const r = await runCode('print("partial")\nraise ValueError("boom")', 'traceback');
    assert.equal(r.status, 'error');
    assert.match(r.error ?? '', /ValueError: boom/);
    assert.match(r.output, /^partial\n\n--- stderr ---\nTraceback \(most recent call last\):[\s\S]*ValueError: boom\n$/);
  });

  test('concurrent scripts on different tasks keep their own state', async () => {
    const tasks = ['conc-a', 'conc-b', 'conc-c'];
    await Promise.all(tasks.map((t) => tool('terminal', { command: `export WHO=${t}` }, t)));
    const results = await Promise.all(
      tasks.map((t) =>
        runCode(`from hermes_tools import terminal\nprint("|".join(terminal("echo $WHO")["output"] for _ in range(5)))`, t),
      ),
    );
    assert.deepEqual(
      results.map((r) => r.output.trim()),
      tasks.map((t) => Array(5).fill(t).join('|')),
    );
  });

  test('Interrupt for the task stops a running script', async () => {
    const marker = join(setup.scratch, 'interrupt.marker');
    const code = `import time
print("working", flush=True)
open(${JSON.stringify(marker)}, "w").write("x")
time.sleep(300)
`;
    const call = runCode(code, 'code-intr');
    await waitFor('the script to start', () => (existsSync(marker) ? true : undefined));
    const i = await serve.client.interrupt({ taskId: 'code-intr' });
    assert.equal(i.interrupted, 1);
    const r = await call;
    assert.equal(r.status, 'interrupted');
    assert.equal(r.output, 'working\n\n[execution interrupted — user sent a new message]');
  });
});

describe('execute_code timeout through berth serve', () => {
  let serve: ServeProcess;
  let setup: ReturnType<typeof serveSetup>;

  before(async () => {
    setup = serveSetup('berth-e2e-code-timeout-', '  timeout: 4\n  mode: strict\n');
    serve = await startServe(['--config', setup.config], { env: setup.env });
  });

  after(async () => {
    await serve.stop();
    rmSync(setup.scratch, { recursive: true, force: true });
  });

  test('kills the whole process group and says so with ⏰', async () => {
    const pidFile = join(setup.scratch, 'grandchild.pid');
    const code = `import subprocess, time
p = subprocess.Popen(["bash", "-c", "sleep 300 & echo $! > ${pidFile}; wait"])
print("spawned", flush=True)
time.sleep(300)
`;
    const r = await serve.client.callTool({ name: 'execute_code', argumentsJson: JSON.stringify({ code }), taskId: 'to', sessionId: '' });
    const result = JSON.parse(r.resultJson) as CodeResult;
    assert.equal(result.status, 'timeout');
    assert.equal(result.error, 'Script timed out after 4s and was killed.');
    assert.equal(result.output, 'spawned\n\n\n⏰ Script timed out after 4s and was killed.');
    const grandchild = await waitFor('the pid file', () => (existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8')) : undefined));
    await waitFor('the grandchild to die', () => (isAlive(grandchild) ? undefined : true), 10_000);
  });
});
