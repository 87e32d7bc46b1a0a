/**
 * End to end on the modal backend: `bin/berth serve --backend modal` as a
 * child process, pointed at the Modal stand-in (a test double of Modal's
 * control plane, backed by the local Docker engine) through MODAL_SERVER_URL
 * only, driven through the CLI and a gRPC client the way the README shows:
 * commands whose cwd and exports persist, files, a background process, a
 * timeout, an interrupt, EndTask, persistence across it, execute_code (the
 * script inside the task's sandbox, its rpc.sock relayed by the exec agent;
 * no code container) with the seed document's three scripts, and a bad token.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Dockerode from 'dockerode';
import { sandboxName } from '../../services/executor/backends/modal/modal-backend.js';
import { SANDBOX_IMAGE, dockerUnavailableReason, runTaskIds } from '../support/docker-fixtures.js';
import { startModalStandin, type StandinProcess } from '../support/modal-standin-process.js';
import { batchRefactorSeed, buildAndTestSeed, yamlSearchSeed } from '../support/seed-scripts.js';
import { startServe, type ServeProcess, waitForLog } from '../support/serve-process.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const { task } = runTaskIds();

/** Whether the stand-in runs the sandbox of task `taskId` of the default tenant. */
async function sandboxRuns(taskId: string): Promise<boolean> {
  const name = sandboxName({ tenant: 'default', taskId });
  return (await docker.listContainers({ filters: { label: [`berth.standin.name=${name}`] } })).length > 0;
}

describe('berth serve --backend modal (through the Modal stand-in)', { skip: unavailable, timeout: 600_000 }, () => {
  let standin: StandinProcess;
  let serve: ServeProcess;
  let env: Record<string, string>;

  before(async () => {
    standin = await startModalStandin();
    env = { ...standin.env, TERMINAL_MODAL_IMAGE: SANDBOX_IMAGE, TERMINAL_CONTAINER_MEMORY: '512' };
    serve = await startServe(['--backend', 'modal'], { env });
  });

  after(async () => {
    await serve?.stop();
    await standin?.stop();
  });

  /** `berth call`, which exits 1 when the command ran and failed (docs/ci.md). */
  const call = async (tool: string, args: object, taskId: string, exitStatus = 0) => {
    const r = await serve.cli(['call', tool, JSON.stringify(args), '--task', taskId], { timeoutMs: 120_000 });
    assert.equal(r.code, exitStatus, r.stderr);
    return JSON.parse(r.stdout) as Record<string, unknown>;
  };

  test('the README flow runs in a Modal sandbox', async () => {
    const t1 = task('readme');
    const who = await call('terminal', { command: 'id -un; pwd' }, t1);
    assert.deepEqual(who, { output: 'sandbox\n/workspace', exit_code: 0, error: null });
    assert.equal(await sandboxRuns(t1), true);

    await call('terminal', { command: 'mkdir -p /workspace/proj && cd /workspace/proj && export GREETING=hello' }, t1);
    assert.deepEqual(await call('terminal', { command: 'pwd; echo $GREETING' }, t1), { output: '/workspace/proj\nhello', exit_code: 0, error: null });

    const w = await call('write_file', { path: 'notes with space.txt', content: 'alpha\nbeta\n' }, t1);
    assert.equal(w.bytes_written, 11);
    const rd = await call('read_file', { path: '/workspace/proj/notes with space.txt' }, t1);
    assert.match(String(rd.content), /^1\|alpha\n2\|beta/);
    assert.equal((await call('terminal', { command: 'cat "notes with space.txt"' }, t1)).output, 'alpha\nbeta');

    const other = task('other');
    assert.equal((await call('terminal', { command: 'echo "[$GREETING]"; ls /workspace' }, other)).output, '[]');
  });

  test('background processes, a timeout, an interrupt, and EndTask terminating the sandbox', async () => {
    const t2 = task('bg');
    const start = await call('terminal', { command: 'echo hello-bg; sleep 1000', background: true }, t2);
    assert.equal(start.output, 'Background process started');
    let logText = '';
    for (let i = 0; i < 100 && !logText.includes('hello-bg'); i++) {
      logText = String((await call('process', { action: 'log', session_id: start.session_id }, t2)).output);
      if (!logText.includes('hello-bg')) await sleep(100);
    }
    assert.match(logText, /hello-bg/);
    const kill = await call('process', { action: 'kill', session_id: start.session_id }, t2);
    assert.deepEqual([kill.status, kill.completion_reason], ['killed', 'killed']);

    const timedOut = await call('terminal', { command: 'echo partial; sleep 30', timeout: 2 }, t2, 1);
    assert.equal(timedOut.exit_code, 124);
    assert.match(String(timedOut.output), /partial[\s\S]*Command timed out after 2s/);

    const running = serve.client.callTool({ name: 'terminal', argumentsJson: JSON.stringify({ command: 'echo started; sleep 999' }), taskId: t2, sessionId: '' });
    for (let i = 0; i < 100; i++) {
      const r = await serve.client.interrupt({ taskId: t2 });
      if (r.interrupted > 0) break;
      await sleep(100);
    }
    const interrupted = JSON.parse((await running).resultJson) as Record<string, unknown>;
    assert.equal(interrupted.exit_code, 130);
    assert.match(String(interrupted.output), /\[Command interrupted\]$/);
    assert.equal((await call('terminal', { command: 'ps -eo args | grep -c "[s]leep 999" || true' }, t2)).output, '0');

    assert.equal(await sandboxRuns(t2), true);
    assert.equal((await serve.client.endTask({ taskId: t2 })).released, true);
    assert.equal(await sandboxRuns(t2), false);
  });

  test("a persistent task's files survive EndTask: its next sandbox starts from a snapshot", async () => {
    const t3 = task('persist');
    await call('terminal', { command: 'echo remembered > /workspace/state.txt' }, t3);
    await serve.client.endTask({ taskId: t3 });
    assert.equal(await sandboxRuns(t3), false);
    assert.equal((await call('terminal', { command: 'cat /workspace/state.txt' }, t3)).output, 'remembered');
  });

  test('execute_code runs the script inside the sandbox: open() sees what terminal() wrote, and no code container is made', async () => {
    const t4 = task('code');
    await call('write_file', { path: '/workspace/from-tool.txt', content: 'sandbox side' }, t4);
    const code = `import json, os
from hermes_tools import terminal, read_file
terminal("echo written by terminal > /workspace/from-terminal.txt")
open("/workspace/from-open.txt", "w").write("written by open()")
print(json.dumps({
    "terminal_hostname": terminal("hostname")["output"].strip(),
    "open_hostname": open("/etc/hostname").read().strip(),
    "open_sees_terminal": open("/workspace/from-terminal.txt").read(),
    "open_sees_write_file": open("/workspace/from-tool.txt").read(),
    "read_file": read_file("/workspace/from-tool.txt")["content"],
    "terminal_sees_open": terminal("cat /workspace/from-open.txt")["output"],
    "socket_mode": oct(os.stat(os.environ["HERMES_RPC_SOCKET"]).st_mode & 0o777),
    "socket_dir": os.path.dirname(os.path.dirname(os.environ["HERMES_RPC_SOCKET"])),
}))
`;
    const r = JSON.parse((await serve.client.callTool({ name: 'execute_code', argumentsJson: JSON.stringify({ code }), taskId: t4, sessionId: '' })).resultJson) as Record<
      string,
      unknown
    >;
    assert.equal(r.status, 'success', JSON.stringify(r));
    const seen = JSON.parse(String(r.output)) as Record<string, string>;
    assert.deepEqual(seen, {
      terminal_hostname: seen.open_hostname,
      open_hostname: seen.open_hostname,
      open_sees_terminal: 'written by terminal\n',
      open_sees_write_file: 'sandbox side',
      read_file: '1|sandbox side',
      terminal_sees_open: 'written by open()',
      socket_mode: '0o600',
      socket_dir: '/tmp/berth-code',
    });
    assert.equal(r.tool_calls_made, 4);
    assert.equal(r.notice, undefined, 'no code-container notice');
    await waitForLog(serve, /"msg":"execute_code success in the task's modal environment \(modal:berth-[0-9a-f]{40} /);
    assert.deepEqual(await docker.listContainers({ all: true, filters: { label: [`berth.task=${t4}`, 'berth.role=code'] } }), []);
    // Nor does the executor set up code containers at all.
    assert.doesNotMatch(serve.logs(), /per-task docker code containers|needs Docker for its code containers/);
    // The run dir went with the run.
    assert.equal((await call('terminal', { command: 'ls -A /tmp/berth-code | wc -l' }, t4)).output, '0');
    await serve.client.endTask({ taskId: t4 });
  });

  const runCode = async (code: string, taskId: string) =>
    JSON.parse((await serve.client.callTool({ name: 'execute_code', argumentsJson: JSON.stringify({ code }), taskId, sessionId: '' })).resultJson) as {
      status: string;
      output: string;
      tool_calls_made: number;
      notice?: string;
    };

  const put = async (files: Record<string, string>, taskId: string) => {
    for (const [path, content] of Object.entries(files)) await call('write_file', { path, content }, taskId);
  };

  test('seed: find the *.yaml files that mention the database and preview them, in the sandbox', async () => {
    const t = task('seed-yaml');
    await put(yamlSearchSeed.files('/workspace/configs'), t);
    const r = await runCode(yamlSearchSeed.code('/workspace/configs'), t);
    yamlSearchSeed.assertResult(r);
    assert.equal(r.notice, undefined);
    await serve.client.endTask({ taskId: t });
  });

  test('seed: batch refactor with search_files and patch(replace_all=True), in the sandbox', async () => {
    const t = task('seed-refactor');
    await put(batchRefactorSeed.files('/workspace/refactor'), t);
    assert.equal((await call('terminal', { command: 'cd /workspace/refactor' }, t)).exit_code, 0);
    const r = await runCode(batchRefactorSeed.code, t);
    batchRefactorSeed.assertResult(r);
    assert.equal(r.notice, undefined);
    assert.equal((await call('terminal', { command: 'cat src/b.py; grep -c old_api_call src/*.py || true' }, t)).output,
      `${batchRefactorSeed.patchedB}src/a.py:0\nsrc/b.py:0\nsrc/c.py:0\nsrc/d.py:0`);
    await serve.client.endTask({ taskId: t });
  });

  test('seed: build-and-test pipeline through terminal() reporting passed/failed counts, in the sandbox', async () => {
    const t = task('seed-tests');
    // The sandbox image has no pytest: the project's own tiny runner prints the same summary line.
    await put(buildAndTestSeed.files('/workspace/project'), t);
    const r = await runCode(buildAndTestSeed.code('/workspace/project'), t);
    buildAndTestSeed.assertResult(r);
    assert.equal(r.notice, undefined);
    await serve.client.endTask({ taskId: t });
  });

  test('stopping the server terminates every sandbox it started', async () => {
    const t5 = task('left-running');
    await call('terminal', { command: 'true' }, t5);
    assert.equal(await sandboxRuns(t5), true);
    assert.equal(await serve.stop(), 0);
    assert.deepEqual(await standin.containers(), []);
  });

  test('a bad token stops the server at start with Modal named and the fix', async () => {
    await assert.rejects(startServe(['--backend', 'modal'], { env: { ...env, MODAL_TOKEN_SECRET: 'as-wrong' } }), (err: Error) => {
      assert.match(err.message, /Modal refused the credentials while looking up the app berth/);
      assert.match(err.message, /check MODAL_TOKEN_ID and MODAL_TOKEN_SECRET/);
      return true;
    });
  });
});
