/**
 * End to end: `bin/berth serve` as a child process on an ephemeral port,
 * driven through the CLI and a real gRPC client.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createRequire } from 'node:module';
import type * as ReflectionPb from 'nice-grpc-server-reflection/lib/proto/grpc/reflection/v1/reflection_pb.js';
import { ClientError, Status, createChannel, createClient } from 'nice-grpc';
import { HealthDefinition } from 'nice-grpc-server-health';
import { startServe, BERTH_BIN, type ServeProcess } from '../support/serve-process.js';

/** Alive means running: a zombie (exited, not yet reaped by an init that never reaps) counts as dead. */
function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

async function waitFor<T>(what: string, fn: () => T | undefined | false, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

async function waitForPidFile(path: string): Promise<number> {
  return waitFor(`pid file ${path}`, () => {
    if (!existsSync(path)) return undefined;
    const n = Number(readFileSync(path, 'utf8').trim());
    return Number.isInteger(n) && n > 0 ? n : undefined;
  });
}

describe('berth serve (local backend)', () => {
  let serve: ServeProcess;
  let scratch: string;

  before(async () => {
    serve = await startServe();
    scratch = mkdtempSync(join(tmpdir(), 'berth-e2e-scratch-'));
  });

  after(async () => {
    await serve.stop();
    rmSync(scratch, { recursive: true, force: true });
  });

  test('tools --toolsets terminal,file prints the OpenAI schemas of exactly those tools', async () => {
    const r = await serve.cli(['tools', '--toolsets', 'terminal,file']);
    assert.equal(r.code, 0, r.stderr);
    const tools = JSON.parse(r.stdout) as Array<{ type: string; function: { name: string; parameters: unknown } }>;
    assert.deepEqual(
      tools.map((t) => t.function.name),
      ['patch', 'process_manage', 'read_file', 'search_files', 'terminal', 'write_file'],
    );
    for (const t of tools) {
      assert.equal(t.type, 'function');
      assert.equal(typeof t.function.parameters, 'object');
    }
  });

  test('cwd and exported variables persist across calls of one task, and not into another task', async () => {
    const first = await serve.cli(['call', 'terminal', '{"command":"cd /tmp && export FOO=bar"}', '--task', 't1']);
    assert.equal(first.code, 0, first.stderr);
    assert.equal(JSON.parse(first.stdout).exit_code, 0);
    const second = await serve.cli(['call', 'terminal', '{"command":"pwd; echo $FOO"}', '--task', 't1']);
    assert.deepEqual(JSON.parse(second.stdout), { output: '/tmp\nbar', exit_code: 0, error: null });
    const other = await serve.cli(['call', 'terminal', '{"command":"echo \\"[$FOO]\\""}', '--task', 't2']);
    assert.equal(JSON.parse(other.stdout).output, '[]');
  });

  test('a non-zero exit is a normal result; the CLI exits 1 so a script can tell', async () => {
    const r = await serve.cli(['call', 'terminal', '{"command":"echo out; echo err >&2; exit 3"}', '--task', 'exit3']);
    assert.equal(r.code, 1);
    assert.equal(r.stderr, '');
    const result = JSON.parse(r.stdout);
    assert.equal(result.exit_code, 3);
    assert.match(result.output, /out\nerr/);
  });

  test('malformed JSON arguments are refused by the CLI with the place; sent anyway they are an error result, and the server keeps serving', async () => {
    const r = await serve.cli(['call', 'terminal', '{"command": "ls"', '--task', 'bad']);
    assert.equal(r.code, 2);
    assert.equal(r.stdout, '');
    assert.equal(
      r.stderr,
      `berth: ARGS_JSON is not valid JSON at character 17 (after '{"command": "ls"'): it ends too early; pass one JSON object in single quotes, e.g. berth call terminal '{"name":"value"}'\n`,
    );
    const sent = await serve.client.callTool({ name: 'terminal', argumentsJson: '{"command": "ls"', taskId: 'bad', sessionId: '' });
    assert.match(JSON.parse(sent.resultJson).error, /^Invalid JSON in tool arguments/);
    const ok = await serve.cli(['call', 'terminal', '{"command":"echo still here"}', '--task', 'bad']);
    assert.equal(JSON.parse(ok.stdout).output, 'still here');
  });

  test('unknown tool gives the spec error string, exit 3, and the closest tool on stderr', async () => {
    const r = await serve.cli(['call', 'terminl', '{"command":"ls"}']);
    assert.equal(r.code, 3);
    assert.deepEqual(JSON.parse(r.stdout), { error: 'Unknown tool: terminl' });
    assert.equal(r.stderr, "berth: no tool 'terminl' on this server; did you mean 'terminal'? ('berth tools' lists them)\n");
  });

  test("a missing required argument: the model's result keeps upstream's text, the CLI names the parameter", async () => {
    const r = await serve.cli(['call', 'terminal', '{}']);
    assert.equal(r.code, 3);
    assert.deepEqual(JSON.parse(r.stdout), { output: '', exit_code: -1, error: 'Invalid command: expected string, got NoneType', status: 'error' });
    assert.equal(r.stderr, `berth: terminal needs its argument 'command' (string); e.g. berth call terminal '{"command":"..."}'\n`);
  });

  test('wrong argument types get a clear error result', async () => {
    const r = await serve.cli(['call', 'terminal', '{"command": 42}']);
    assert.deepEqual(JSON.parse(r.stdout), {
      output: '',
      exit_code: -1,
      error: 'Invalid command: expected string, got int',
      status: 'error',
    });
  });

  test('an invalid task id is a usage error with a one-line message', async () => {
    const r = await serve.cli(['call', 'terminal', '{"command":"true"}', '--task', '../../etc']);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /^berth: INVALID_ARGUMENT: task_id must be/);
    assert.equal(r.stderr.trim().split('\n').length, 1);
  });

  test('a 10 MB argument string is refused clearly and the server keeps serving', async () => {
    const big = JSON.stringify({ command: `echo ${'x'.repeat(10 * 1024 * 1024)}` });
    await assert.rejects(
      serve.client.callTool({ name: 'terminal', argumentsJson: big, taskId: 'big', sessionId: '' }),
      (err: unknown) => err instanceof ClientError && err.code === Status.INVALID_ARGUMENT && /larger than/.test(err.details),
    );
    const r = await serve.client.callTool({
      name: 'terminal',
      argumentsJson: '{"command":"echo ok"}',
      taskId: 'big',
      sessionId: '',
    });
    assert.equal(JSON.parse(r.resultJson).output, 'ok');
  });

  test('NUL bytes in a command are reported, not crashed on', async () => {
    const r = await serve.client.callTool({
      name: 'terminal',
      argumentsJson: JSON.stringify({ command: 'echo a\u0000b' }),
      taskId: 'nul',
      sessionId: '',
    });
    assert.deepEqual(JSON.parse(r.resultJson), {
      output: '',
      exit_code: -1,
      error: 'Invalid command: contains a NUL character (\\0), which a shell cannot run',
      status: 'error',
    });
    const again = await serve.cli(['call', 'terminal', '{"command":"echo fine"}', '--task', 'nul']);
    assert.equal(JSON.parse(again.stdout).output, 'fine');
  });

  test('a client that disconnects mid-call gets its command killed', async () => {
    const pidFile = join(scratch, 'disconnect.pid');
    const abort = new AbortController();
    const call = serve.client.callTool(
      {
        name: 'terminal',
        argumentsJson: JSON.stringify({ command: `(echo $BASHPID > ${pidFile}; exec sleep 1000)`, timeout: 600 }),
        taskId: 'disconnect',
        sessionId: '',
      },
      { signal: abort.signal },
    );
    const pid = await waitForPidFile(pidFile);
    assert.ok(isAlive(pid));
    abort.abort();
    await assert.rejects(call);
    await waitFor('the command to be killed', () => !isAlive(pid));
  });

  test('Interrupt stops the running command with exit 130 and the spec suffix', async () => {
    const pidFile = join(scratch, 'interrupt.pid');
    const call = serve.client.callTool({
      name: 'terminal',
      argumentsJson: JSON.stringify({ command: `echo started; (echo $BASHPID > ${pidFile}; exec sleep 1000)` }),
      taskId: 'intr',
      sessionId: '',
    });
    const pid = await waitForPidFile(pidFile);
    const r = await serve.client.interrupt({ taskId: 'intr' });
    assert.equal(r.interrupted, 1);
    const result = JSON.parse((await call).resultJson);
    assert.equal(result.exit_code, 130);
    assert.match(result.output, /^started\n?[\s\S]*\n\[Command interrupted\]$/);
    await waitFor('the command to be killed', () => !isAlive(pid));
  });

  test('a foreground timeout gives 124 with the output printed so far', async () => {
    const r = await serve.cli(['call', 'terminal', '{"command":"echo before; sleep 30","timeout":1}', '--task', 'to']);
    const result = JSON.parse(r.stdout);
    assert.equal(result.exit_code, 124);
    // The notice follows the output as printed (its newline included), as in the reference tool.
    assert.equal(result.output, 'before\n\n[Command timed out after 1s]');
  });

  test('a foreground timeout with no output gives the notice without a leading newline', async () => {
    const r = await serve.cli(['call', 'terminal', '{"command":"sleep 30","timeout":1}', '--task', 'to-empty']);
    assert.deepEqual(JSON.parse(r.stdout), {
      output: '[Command timed out after 1s]',
      exit_code: 124,
      error: null,
      hint:
        'Exit 124: the command hit its timeout. Raise timeout= (foreground max 600s) or run it with background=true ' +
        'and notify_on_complete=true.',
    });
  });

  test('foreground guard, code-argument and exit-code texts reach the caller as the reference tool words them', async () => {
    const call = async (args: Record<string, unknown>) => {
      const r = await serve.cli(['call', 'terminal', JSON.stringify(args), '--task', 'texts']);
      return JSON.parse(r.stdout) as Record<string, unknown>;
    };
    assert.deepEqual(await call({ command: 'sleep 5 &' }), {
      output: '',
      exit_code: -1,
      error:
        "Foreground command uses '&' backgrounding. Re-send WITHOUT the '&' as terminal(command=\"<cmd>\", " +
        'background=true) — add notify_on_complete=true for bounded jobs — then run health checks and tests in ' +
        'follow-up terminal calls.',
      status: 'error',
    });
    assert.equal(
      (await call({ command: 'nohup ./server' })).error,
      'Foreground command uses shell-level background wrappers (nohup/disown/setsid). Re-send WITHOUT the wrapper ' +
        'as terminal(command="<cmd>", background=true, notify_on_complete=true) so Hermes tracks the process, then ' +
        'run readiness checks and tests in separate commands.',
    );
    assert.equal(
      (await call({ command: 'python3 -m http.server 8000' })).error,
      'This foreground command appears to start a long-lived server/watch process. Run it with background=true, ' +
        'verify readiness (health endpoint/log signal), then execute tests in a separate command.',
    );
    // Over the cap: run as a tracked background process with notify, as upstream promotes it.
    const promoted = await call({ command: 'true', timeout: 601 });
    assert.deepEqual([promoted.output, promoted.notify_on_complete], ['Background process started', true]);
    assert.match(String(promoted.promoted_from_foreground), /^Requested foreground timeout 601s exceeds the 600s cap, so /);
    assert.deepEqual(await call({ command: 'make', timeout: 0 }), {
      error: 'timeout must be a positive number of seconds (got 0).',
    });
    assert.deepEqual(await call({ command: 'make', notify: true }), {
      error:
        'notify/heartbeat only apply to background commands (foreground results return directly). Either drop ' +
        'them, or run as terminal(command=..., background=true, notify=...).',
    });
    assert.deepEqual(await call({ code: 'print(1)' }), {
      error:
        "terminal received a 'code' parameter, but it requires a shell command in 'command'. Use " +
        'execute_code(code=...) for Python; for shell, retry as terminal(command=...).',
    });
    assert.deepEqual(await call({ command: 'grep -q needle /dev/null' }), {
      output: '',
      exit_code: 1,
      error: null,
      exit_code_meaning: 'No matches found (not an error)',
    });
    const killed = await call({ command: '(kill -9 $BASHPID)' });
    assert.equal(killed.exit_code, 137);
    assert.equal(
      killed.exit_code_meaning,
      'Exit code 137 usually means the command was terminated by signal 9: SIGKILL — often the kernel OOM killer ' +
        'on memory exhaustion, or an explicit kill -9',
    );
  });

  test('EndTask releases the environment: the next call starts afresh', async () => {
    await serve.cli(['call', 'terminal', '{"command":"cd /tmp && export GONE=1"}', '--task', 'endme']);
    const r = await serve.client.endTask({ taskId: 'endme' });
    assert.equal(r.released, true);
    const after = await serve.cli(['call', 'terminal', '{"command":"echo \\"[$GONE]\\""}', '--task', 'endme']);
    assert.equal(JSON.parse(after.stdout).output, '[]');
  });

  test('file tools act in the task environment', async () => {
    const path = join(scratch, 'notes dir', 'a file.txt');
    const w = await serve.cli(['call', 'write_file', JSON.stringify({ path, content: 'alpha\nbeta\n' }), '--task', 'files']);
    assert.equal(JSON.parse(w.stdout).bytes_written, 11);
    const rd = await serve.cli(['call', 'read_file', JSON.stringify({ path }), '--task', 'files']);
    const read = JSON.parse(rd.stdout);
    assert.equal(read.total_lines, 2);
    assert.match(read.content, /^1\|alpha\n2\|beta/);
    const p = await serve.cli([
      'call',
      'patch',
      JSON.stringify({ path, old_string: 'beta', new_string: 'gamma' }),
      '--task',
      'files',
    ]);
    assert.equal(JSON.parse(p.stdout).success, true);
    assert.equal(readFileSync(path, 'utf8'), 'alpha\ngamma\n');
    const s = await serve.cli([
      'call',
      'search_files',
      JSON.stringify({ pattern: 'gamma', path: scratch }),
      '--task',
      'files',
    ]);
    const found = JSON.parse(s.stdout);
    assert.equal(found.matches.length, 1);
    assert.equal(found.matches[0].line, 2);
  });

  test('tools advertises only the current tool names; a call to an old name is answered under the new one', async () => {
    const r = await serve.cli(['tools']);
    assert.equal(r.code, 0, r.stderr);
    const names = (JSON.parse(r.stdout) as Array<{ function: { name: string } }>).map((t) => t.function.name);
    for (const current of ['process_manage', 'todo_list']) assert.ok(names.includes(current), `${current} in ${names.join(', ')}`);
    for (const old of ['process', 'todo', 'cronjob']) assert.ok(!names.includes(old), `${old} not in ${names.join(', ')}`);
    for (const called of ['todo', 'todo_list']) {
      const call = await serve.cli(['call', called, '{"todos":[]}', '--task', 'names']);
      assert.equal(call.code, 3, 'a tool error');
      assert.deepEqual(JSON.parse(call.stdout), { error: 'todo_list must be handled by the agent loop' });
    }
    const unknown = await serve.cli(['call', 'cronjob', '{}', '--task', 'names']);
    assert.deepEqual(JSON.parse(unknown.stdout), { error: 'Unknown tool: cronjob_manage' });
  });

  test('background processes are started by terminal and managed by process_manage, or process (its old name)', async () => {
    const start = JSON.parse(
      (await serve.cli(['call', 'terminal', '{"command":"echo hello-bg; sleep 1000","background":true}', '--task', 'bg']))
        .stdout,
    );
    assert.equal(start.output, 'Background process started');
    assert.match(start.session_id, /^proc_[0-9a-f]{12}$/);
    const list = JSON.parse((await serve.cli(['call', 'process_manage', '{"action":"list"}', '--task', 'bg'])).stdout);
    assert.ok(JSON.stringify(list).includes(start.session_id));
    let logText = '';
    for (let i = 0; i < 100 && !logText.includes('hello-bg'); i++) {
      const log = JSON.parse(
        (await serve.cli(['call', 'process', JSON.stringify({ action: 'log', session_id: start.session_id }), '--task', 'bg']))
          .stdout,
      );
      logText = log.output;
      if (!logText.includes('hello-bg')) await sleep(100);
    }
    assert.match(logText, /hello-bg/);
    const kill = JSON.parse(
      (await serve.cli(['call', 'process_manage', JSON.stringify({ action: 'kill', session_id: start.session_id }), '--task', 'bg']))
        .stdout,
    );
    assert.deepEqual(kill, {
      status: 'killed',
      session_id: start.session_id,
      completion_reason: 'killed',
      termination_source: 'process.kill',
      output: 'hello-bg\n',
    });
    await waitFor('the background process to be gone', () => !isAlive(start.pid));
    const missing = JSON.parse((await serve.cli(['call', 'process', '{"action":"poll"}', '--task', 'bg'])).stdout);
    assert.deepEqual(missing, { error: 'session_id is required for poll' });
  });

  test('Session streams output and answers each call by id', async () => {
    async function* requests() {
      yield {
        message: {
          $case: 'call' as const,
          value: {
            callId: 'c1',
            request: { name: 'terminal', argumentsJson: '{"command":"echo one; echo two"}', taskId: 's1', sessionId: 'sess' },
          },
        },
      };
      yield {
        message: {
          $case: 'call' as const,
          value: { callId: 'c2', request: { name: 'nope', argumentsJson: '{}', taskId: 's1', sessionId: 'sess' } },
        },
      };
    }
    const outputs: string[] = [];
    const results = new Map<string, string>();
    for await (const m of serve.client.session(requests())) {
      if (m.message?.$case === 'output') outputs.push(m.message.value.text);
      if (m.message?.$case === 'result') results.set(m.message.value.callId, m.message.value.resultJson);
    }
    assert.equal(JSON.parse(results.get('c1')!).output, 'one\ntwo');
    assert.deepEqual(JSON.parse(results.get('c2')!), { error: 'Unknown tool: nope' });
    assert.match(outputs.join(''), /one\ntwo/);
  });

  test('health reports SERVING', async () => {
    const channel = createChannel(serve.address);
    try {
      const health = createClient(HealthDefinition, channel);
      const r = await health.check({ service: '' });
      assert.equal(r.status, 1 /* SERVING */);
    } finally {
      channel.close();
    }
  });

  test('reflection lists the Dispatcher service', async () => {
    const { ServerReflectionService } = await import('nice-grpc-server-reflection');
    // google-protobuf modules are CommonJS with exports ESM cannot see statically.
    const pb = createRequire(import.meta.url)(
      'nice-grpc-server-reflection/lib/proto/grpc/reflection/v1/reflection_pb.js',
    ) as typeof ReflectionPb;
    const channel = createChannel(serve.address);
    try {
      const reflection = createClient(ServerReflectionService, channel);
      async function* one() {
        yield new pb.ServerReflectionRequest().setListServices('*');
      }
      const names: string[] = [];
      for await (const r of reflection.serverReflectionInfo(one())) {
        for (const s of r.getListServicesResponse()?.getServiceList() ?? []) names.push(s.getName());
      }
      assert.ok(names.includes('berth.v1.Dispatcher'), names.join(', '));
    } finally {
      channel.close();
    }
  });

  test('EndTask on a task that never ran releases nothing and says so', async () => {
    const r = await serve.client.endTask({ taskId: 'never-used' });
    assert.equal(r.released, false);
  });

  test('every call is logged as one JSON line with tenant, task, tool, backend, duration and outcome', async () => {
    await serve.cli(['call', 'terminal', '{"command":"true"}', '--task', 'logged']);
    const line = await waitFor('the call log line', () =>
      serve
        .logs()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .find((l) => l.msg === 'tool call' && l.task === 'logged'),
    );
    assert.equal(line.tenant, 'default');
    assert.equal(line.tool, 'terminal');
    assert.equal(line.backend, 'local');
    assert.equal(line.outcome, 'ok');
    assert.equal(typeof line.durationMs, 'number');
  });
});

describe('berth CLI without a server', () => {
  test('call fails with one line naming the server and exits non-zero', async () => {
    const { execFile } = await import('node:child_process');
    const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        [BERTH_BIN, 'call', 'terminal', '{"command":"true"}', '--server', '127.0.0.1:1'],
        (err, _stdout, stderr) => resolve({ code: err ? (err.code as number) : 0, stderr }),
      );
    });
    assert.equal(r.code, 6);
    assert.match(r.stderr, /^berth: cannot reach the Berth server at 127\.0\.0\.1:1 .*; is 'berth serve' running\? Set --server or BERTH_SERVER\n$/);
  });

  test('unknown command is a usage error (exit 2)', async () => {
    const { execFile } = await import('node:child_process');
    const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      execFile(process.execPath, [BERTH_BIN, 'frobnicate'], (err, _o, stderr) =>
        resolve({ code: err ? (err.code as number) : 0, stderr }),
      );
    });
    assert.equal(r.code, 2);
    assert.equal(r.stderr, "berth: unknown command 'frobnicate' ('berth --help' lists the commands)\n");
  });
});

describe('berth serve shutdown', () => {
  test('SIGTERM mid-call: the client gets UNAVAILABLE and the command is killed', async () => {
    const serve = await startServe();
    const dir = mkdtempSync(join(tmpdir(), 'berth-e2e-shutdown-'));
    try {
      const pidFile = join(dir, 'pid');
      const call = serve.client.callTool({
        name: 'terminal',
        argumentsJson: JSON.stringify({ command: `(echo $BASHPID > ${pidFile}; exec sleep 1000)` }),
        taskId: 'shutdown',
        sessionId: '',
      });
      const pid = await waitForPidFile(pidFile);
      serve.child.kill('SIGTERM');
      await assert.rejects(call, (err: unknown) => err instanceof ClientError && err.code === Status.UNAVAILABLE);
      await waitFor('the command to be killed', () => !isAlive(pid));
      assert.equal(await serve.exited, 0, 'a clean shutdown exits 0');
    } finally {
      await serve.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('berth serve with tenants', () => {
  test('tenants never see each other\'s tasks, even with the same task id; no key is UNAUTHENTICATED', async () => {
    const { hashApiKey } = await import('../../services/common/config.js');
    const { writeFileSync } = await import('node:fs');
    const dir = mkdtempSync(join(tmpdir(), 'berth-e2e-tenants-'));
    const configFile = join(dir, 'config.yaml');
    writeFileSync(
      configFile,
      [
        '# two tenants on the local backend (explicitly allowed for this test)',
        'allow_local_multi_tenant: true',
        'tenants:',
        `  - { id: acme, api_key_sha256: ${hashApiKey('acme-key')} }`,
        `  - { id: globex, api_key_sha256: ${hashApiKey('globex-key')} }`,
        '',
      ].join('\n'),
    );
    const serve = await startServe(['--config', configFile]);
    try {
      const acme = (args: string[]) => serve.cli(args, { env: { BERTH_API_KEY: 'acme-key' } });
      const globex = (args: string[]) => serve.cli(args, { env: { BERTH_API_KEY: 'globex-key' } });
      await acme(['call', 'terminal', '{"command":"cd /tmp && export SECRET_OF=acme"}', '--task', 'shared']);
      const a = JSON.parse((await acme(['call', 'terminal', '{"command":"pwd; echo $SECRET_OF"}', '--task', 'shared'])).stdout);
      assert.equal(a.output, '/tmp\nacme');
      const g = JSON.parse((await globex(['call', 'terminal', '{"command":"echo \\"[$SECRET_OF]\\""}', '--task', 'shared'])).stdout);
      assert.equal(g.output, '[]');
      const anon = await serve.cli(['call', 'terminal', '{"command":"true"}', '--task', 'shared'], { env: { BERTH_API_KEY: '' } });
      assert.equal(anon.code, 5, 'Berth refused the call');
      assert.match(anon.stderr, /UNAUTHENTICATED/);
    } finally {
      await serve.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
