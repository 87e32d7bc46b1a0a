/**
 * execute_code through `bin/berth serve` on the singularity backend, driven
 * by the apptainer test double (test/fixtures/apptainer-double/apptainer).
 *
 * The image has python3, so each task's instance runs the exec agent, and
 * the script runs inside the instance itself: its rpc.sock is made there
 * (under the task's state directory) by the agent and each connection is
 * relayed over the agent's stream. open() and terminal() see the same files,
 * the seed document's three scripts run as on local, and no code container
 * is made. (An image without python3 falls back to the per-task code
 * container: test/integration/code-container.test.ts.)
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import type { ExecuteCodeResult as CodeResult } from '../../services/dispatcher/tools/code-execution/execute-code-result.js';
import { APPTAINER_DOUBLE, DOUBLE_IMAGE, doubleState, doubleUnavailableReason } from '../support/apptainer-double.js';
import { containerOfTask, dockerUnavailableReason, runTaskIds } from '../support/docker-fixtures.js';
import { batchRefactorSeed, buildAndTestSeed, yamlSearchSeed } from '../support/seed-scripts.js';
import { startServe, type ServeProcess, waitForLog } from '../support/serve-process.js';

const docker = new Dockerode();
const unavailable = (await dockerUnavailableReason(docker)) ?? doubleUnavailableReason();
const { run: RUN, task } = runTaskIds();

const execFileAsync = promisify(execFile);

async function call(s: ServeProcess, name: string, args: object, taskId: string): Promise<Record<string, unknown>> {
  const r = await s.client.callTool({ name, argumentsJson: JSON.stringify(args), taskId, sessionId: '' });
  return JSON.parse(r.resultJson) as Record<string, unknown>;
}

describe('execute_code on berth serve, singularity backend (apptainer test double)', { skip: unavailable, timeout: 600_000 }, () => {
  let dir: string;
  let doubleDir: string;
  let doubleEnv: Record<string, string>;
  let serve: ServeProcess;

  before(async () => {
    const double = await doubleState();
    doubleDir = double.stateDir;
    doubleEnv = double.env;
    dir = await mkdtemp(path.join(os.tmpdir(), 'berth-e2e-code-singularity-'));
    const configFile = path.join(dir, 'config.yaml');
    await writeFile(
      configFile,
      [
        'terminal:',
        '  backend: singularity',
        `  singularity_binary: ${JSON.stringify(APPTAINER_DOUBLE)}`,
        `  singularity_image: ${JSON.stringify(DOUBLE_IMAGE)}`,
        '  container_persistent: false',
        '',
      ].join('\n'),
    );
    serve = await startServe(['--config', configFile], { env: double.env });
  });

  after(async () => {
    await serve?.stop('SIGKILL').catch(() => undefined);
    // A killed server stops no instance: each one's processes would outlive the run.
    if (doubleEnv !== undefined) await execFileAsync(APPTAINER_DOUBLE, ['instance', 'stop', '--all'], { env: { ...process.env, ...doubleEnv } });
    await rm(dir, { recursive: true, force: true });
    await rm(doubleDir, { recursive: true, force: true });
  });

  const runCode = async (code: string, taskId: string) => (await call(serve, 'execute_code', { code }, taskId)) as unknown as CodeResult;
  const put = async (taskId: string, files: Record<string, string>) => {
    for (const [file, content] of Object.entries(files)) {
      const r = await call(serve, 'write_file', { path: file, content }, taskId);
      assert.ok(!('error' in r), JSON.stringify(r));
    }
  };
  const shell = async (taskId: string, command: string) => {
    const r = await call(serve, 'terminal', { command }, taskId);
    assert.equal(r.exit_code, 0, JSON.stringify(r));
    return String(r.output);
  };

  test('the script runs in the instance: open() and terminal() see the same files, and no code container is made', async () => {
    const t = task('sing-same-instance');
    await shell(t, `echo "terminal side ${RUN}" > /workspace/written-by-terminal.txt`);
    const code = `import json, os
from hermes_tools import terminal, read_file
open("/workspace/opened.txt", "w").write("written by open()")
print(json.dumps({
    "open_reads_terminal_file": open("/workspace/written-by-terminal.txt").read().strip(),
    "read_file": read_file("/workspace/written-by-terminal.txt")["content"],
    "terminal_sees_opened": terminal("cat /workspace/opened.txt")["output"].strip(),
    "same_instance": terminal("cat /proc/sys/kernel/hostname")["output"].strip() == open("/proc/sys/kernel/hostname").read().strip(),
    "socket_dir": os.path.dirname(os.path.dirname(os.environ["HERMES_RPC_SOCKET"])),
    "socket_mode": oct(os.stat(os.environ["HERMES_RPC_SOCKET"]).st_mode & 0o777),
}))
`;
    const r = await runCode(code, t);
    assert.equal(r.status, 'success', JSON.stringify(r));
    assert.deepEqual(JSON.parse(r.output), {
      open_reads_terminal_file: `terminal side ${RUN}`,
      read_file: `1|terminal side ${RUN}`,
      terminal_sees_opened: 'written by open()',
      same_instance: true,
      socket_dir: '/berth/state',
      socket_mode: '0o600',
    });
    assert.equal(r.tool_calls_made, 3);
    assert.equal(r.notice, undefined, 'no code-container notice');
    await waitForLog(serve, /"msg":"execute_code success in the task's singularity environment \(singularity:[^)]+\)/);
    assert.equal(await containerOfTask(docker, t, 'code'), undefined);
    // The run dir went with the run.
    assert.equal((await shell(t, 'ls -d /berth/state/code-* 2>/dev/null | wc -l')).trim(), '0');
  });

  test('seed: find the *.yaml files that mention the database and preview them', async () => {
    const t = task('sing-seed-yaml');
    const project = `/workspace/configs-${RUN}`;
    await put(t, yamlSearchSeed.files(project));
    yamlSearchSeed.assertResult(await runCode(yamlSearchSeed.code(project), t));
  });

  test('seed: batch refactor with search_files and patch(replace_all=True)', async () => {
    const t = task('sing-seed-refactor');
    const root = `/workspace/refactor-${RUN}`;
    await put(t, batchRefactorSeed.files(root));
    // The script's relative paths resolve against the task's cwd, as terminal() would.
    await shell(t, `cd ${root}`);
    batchRefactorSeed.assertResult(await runCode(batchRefactorSeed.code, t));
    // terminal() output drops the trailing newline.
    assert.equal(await shell(t, `cat ${root}/src/b.py`), batchRefactorSeed.patchedB.trimEnd());
    assert.equal((await shell(t, `grep -rl old_api_call ${root}/src || true`)).trim(), '');
  });

  test('seed: build-and-test pipeline through terminal() reporting passed/failed counts', async () => {
    const t = task('sing-seed-tests');
    const project = `/workspace/project-${RUN}`;
    await put(t, buildAndTestSeed.files(project));
    buildAndTestSeed.assertResult(await runCode(buildAndTestSeed.code(project), t));
  });
});
