/**
 * execute_code through `bin/berth serve --backend daytona`, against the
 * Daytona stand-in (a test double of Daytona's API backed by the local
 * Docker engine, not the cloud), started once for the file.
 *
 * The script runs inside the task's sandbox: its rpc.sock is made there by
 * the task's exec agent and each connection is relayed over the agent's PTY
 * stream to the executor. What a user notices: open() and terminal() see
 * the same files and the same machine, no code container is made on the
 * executor's Docker, the result carries no code-container notice, and the
 * seed document's three scripts run as on local.
 */
import assert from 'node:assert/strict';
import os from 'node:os';
import { after, before, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import type { ExecuteCodeResult as CodeResult } from '../../services/dispatcher/tools/code-execution/execute-code-result.js';
import { SANDBOX_IMAGE, dockerUnavailableReason, runTaskIds } from '../support/docker-fixtures.js';
import { startDaytonaStandIn, type RunningStandIn } from '../support/daytona-standin.js';
import { batchRefactorSeed, buildAndTestSeed, yamlSearchSeed } from '../support/seed-scripts.js';
import { startServe, type ServeProcess, waitForLog } from '../support/serve-process.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const { run: RUN, task } = runTaskIds();

describe('execute_code on berth serve --backend daytona (stand-in)', { skip: unavailable, timeout: 600_000 }, () => {
  let standIn: RunningStandIn;
  let serve: ServeProcess;

  before(async () => {
    standIn = await startDaytonaStandIn();
    serve = await startServe(['--backend', 'daytona'], {
      env: {
        DAYTONA_API_KEY: standIn.apiKey,
        DAYTONA_API_URL: standIn.apiUrl,
        DAYTONA_TARGET: 'stand-in',
        TERMINAL_DAYTONA_IMAGE: SANDBOX_IMAGE,
      },
    });
  });

  after(async () => {
    await serve?.stop();
    assert.equal(await standIn?.stop(), 0);
    assert.deepEqual(await docker.listContainers({ all: true, filters: { label: [standIn.containerLabel] } }), []);
  });

  const call = async (name: string, args: object, taskId: string) => {
    const r = await serve.client.callTool({ name, argumentsJson: JSON.stringify(args), taskId, sessionId: '' });
    return JSON.parse(r.resultJson) as Record<string, unknown>;
  };
  const runCode = async (code: string, taskId: string) => (await call('execute_code', { code }, taskId)) as unknown as CodeResult;
  const put = async (taskId: string, files: Record<string, string>) => {
    for (const [file, content] of Object.entries(files)) {
      const r = await call('write_file', { path: file, content }, taskId);
      assert.ok(!('error' in r), JSON.stringify(r));
    }
  };
  const sh = async (command: string, taskId: string) => {
    const r = await call('terminal', { command }, taskId);
    assert.equal(r.exit_code, 0, JSON.stringify(r));
    return String(r.output);
  };

  test('the script runs in the sandbox: open() and terminal() see the same files, and no code container is made', async () => {
    const t = task('daytona-same-sandbox');
    await call('write_file', { path: '/workspace/by-tool.txt', content: `sandbox side ${RUN}` }, t);
    const code = `import json, os
from hermes_tools import terminal, read_file
open("/workspace/opened-${RUN}.txt", "w").write("written by open()")
print(json.dumps({
    "terminal_hostname": terminal("hostname")["output"].strip(),
    "open_hostname": open("/etc/hostname").read().strip(),
    "read_file": read_file("/workspace/by-tool.txt")["content"],
    "open_reads_tool_file": open("/workspace/by-tool.txt").read(),
    "terminal_sees_opened": terminal("cat /workspace/opened-${RUN}.txt")["output"].strip(),
    "socket_mode": oct(os.stat(os.environ["HERMES_RPC_SOCKET"]).st_mode & 0o777),
    "socket_dir": os.path.dirname(os.path.dirname(os.environ["HERMES_RPC_SOCKET"])),
}))
`;
    const r = await runCode(code, t);
    assert.equal(r.status, 'success', JSON.stringify(r));
    const seen = JSON.parse(r.output) as Record<string, string>;
    assert.equal(seen.open_hostname, seen.terminal_hostname);
    assert.notEqual(seen.open_hostname, os.hostname(), 'not the executor host');
    assert.deepEqual(seen, {
      terminal_hostname: seen.terminal_hostname,
      open_hostname: seen.terminal_hostname,
      read_file: `1|sandbox side ${RUN}`,
      open_reads_tool_file: `sandbox side ${RUN}`,
      terminal_sees_opened: 'written by open()',
      socket_mode: '0o600',
      socket_dir: '/tmp/berth-code',
    });
    assert.equal(r.tool_calls_made, 3);
    assert.equal(r.notice, undefined, 'no code-container notice');
    await waitForLog(serve, /"msg":"execute_code success in the task's daytona environment \(daytona sandbox berth-[0-9a-f]{32}\)/);
    const codeContainers = await docker.listContainers({ all: true, filters: { label: [`berth.task=${t}`, 'berth.role=code'] } });
    assert.deepEqual(codeContainers, []);
    // Nor does the executor set up code containers (or count their cost against the tenant's quota).
    assert.doesNotMatch(serve.logs(), /per-task docker code containers|needs Docker for its code containers/);
    // The run dir went with the run.
    assert.equal(await sh('ls -A /tmp/berth-code | wc -l', t), '0');
    await serve.client.endTask({ taskId: t });
  });

  test('seed: find the *.yaml files that mention the database and preview them', async () => {
    const t = task('daytona-seed-yaml');
    const project = `/workspace/configs-${RUN}`;
    await put(t, yamlSearchSeed.files(project));
    yamlSearchSeed.assertResult(await runCode(yamlSearchSeed.code(project), t));
    await serve.client.endTask({ taskId: t });
  });

  test('seed: batch refactor with search_files and patch(replace_all=True), relative paths in the task cwd', async () => {
    const t = task('daytona-seed-refactor');
    const root = `/workspace/refactor-${RUN}`;
    await put(t, batchRefactorSeed.files(root));
    await sh(`cd ${root}`, t);
    batchRefactorSeed.assertResult(await runCode(batchRefactorSeed.code, t));
    // terminal() output drops the trailing newline.
    assert.equal(await sh(`cat ${root}/src/b.py`, t), batchRefactorSeed.patchedB.trimEnd());
    assert.equal(await sh(`grep -rl old_api_call ${root}/src | wc -l`, t), '0');
    await serve.client.endTask({ taskId: t });
  });

  test('seed: build-and-test pipeline through terminal() reporting passed/failed counts', async () => {
    const t = task('daytona-seed-tests');
    const project = `/workspace/project-${RUN}`;
    await put(t, buildAndTestSeed.files(project));
    buildAndTestSeed.assertResult(await runCode(buildAndTestSeed.code(project), t));
    await serve.client.endTask({ taskId: t });
  });
});
