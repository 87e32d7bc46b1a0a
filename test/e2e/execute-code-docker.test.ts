/**
 * execute_code on the docker backend through `bin/berth serve --backend
 * docker`: the script runs inside the task's own container as the sandbox
 * user, so it sees the same files as terminal(); its socket lives in the
 * bind-mounted /run/berth, owned by the sandbox user with mode 0600; the
 * server's secrets never enter the container. Containers are removed after.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { dockerUnavailableReason, removeLabelled, runTaskIds } from '../support/docker-fixtures.js';
import { startServe, type ServeProcess } from '../support/serve-process.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const { ids: tasks, task } = runTaskIds();

interface CodeResult {
  status: string;
  output: string;
  tool_calls_made: number;
  error?: string;
  notice?: string;
}

describe('execute_code on berth serve --backend docker', { skip: unavailable }, () => {
  let serve: ServeProcess;

  before(async () => {
    serve = await startServe(['--backend', 'docker'], {
      env: { TERMINAL_CONTAINER_PERSISTENT: 'false', BERTH_CANARY_SECRET: 'docker-canary-51e0' },
    });
  });

  after(async () => {
    await serve?.stop();
    for (const id of tasks) await removeLabelled(docker, LABEL.task, id);
  });

  async function call(name: string, args: object, taskId: string): Promise<Record<string, unknown>> {
    const r = await serve.client.callTool({ name, argumentsJson: JSON.stringify(args), taskId, sessionId: '' });
    return JSON.parse(r.resultJson) as Record<string, unknown>;
  }

  test("the script runs in the task container as the task's own uid and shares its files with terminal()", async () => {
    const t = task('code');
    await call('terminal', { command: 'mkdir -p /workspace/p && cd /workspace/p && echo from-terminal > t.txt' }, t);
    const code = `import json, os, stat
from hermes_tools import terminal, write_file
sock = os.environ["HERMES_RPC_SOCKET"]
st = os.stat(sock)
write_file("from-script.txt", "from-script")
print(json.dumps({
    "uid": os.getuid(), "cwd": os.getcwd(), "socket": sock,
    "socket_mode": oct(stat.S_IMODE(st.st_mode)), "socket_owner": st.st_uid,
    "terminal_sees": terminal("cat from-script.txt")["output"],
    "script_sees": open("t.txt").read().strip(),
    "env": sorted(os.environ),
    "canary": any("docker-canary" in v for v in os.environ.values()),
}))
`;
    const r = (await call('execute_code', { code }, t)) as unknown as CodeResult;
    assert.equal(r.status, 'success', JSON.stringify(r));
    assert.equal(r.notice, undefined, 'no host-subprocess notice in a container');
    const seen = JSON.parse(r.output) as {
      uid: number;
      cwd: string;
      socket: string;
      socket_mode: string;
      socket_owner: number;
      terminal_sees: string;
      script_sees: string;
      env: string[];
      canary: boolean;
    };
    const uid = Number(String((await call('terminal', { command: 'id -u' }, t)).output).trim());
    assert.ok(uid >= 1_900_000_000, `the task's uid ${uid}, one of docker.task_uids`);
    assert.equal(seen.uid, uid);
    assert.equal(seen.cwd, '/workspace/p');
    assert.match(seen.socket, /^\/run\/berth\/code-[0-9a-f]{16}\/rpc\.sock$/);
    assert.equal(seen.socket_mode, '0o600');
    assert.equal(seen.socket_owner, uid);
    assert.equal(seen.terminal_sees, 'from-script');
    assert.equal(seen.script_sees, 'from-terminal');
    assert.equal(seen.canary, false);
    assert.ok(seen.env.every((name) => !/KEY|TOKEN|SECRET/.test(name) || name === 'HERMES_RPC_TOKEN'), seen.env.join(','));
    assert.equal(r.tool_calls_made, 2);
  });

  test('Interrupt kills the script and its children inside the container', async () => {
    const t = task('code-timeout');
    const code = `import subprocess, time
subprocess.Popen(["sleep", "1000"])
print("spawned", flush=True)
time.sleep(1000)
`;
    // Interrupt takes the same kill path as the timeout (process group, 5 s grace), without waiting 300 s.
    const running = call('execute_code', { code }, t);
    let interrupted = 0;
    for (let i = 0; i < 300 && interrupted === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      const check = await call('terminal', { command: 'pgrep -x sleep >/dev/null && echo yes || echo no' }, t);
      if (check.output === 'yes') interrupted = (await serve.client.interrupt({ taskId: t })).interrupted;
    }
    const r = (await running) as unknown as CodeResult;
    assert.equal(r.status, 'interrupted');
    assert.equal(r.output, 'spawned\n\n[execution interrupted — user sent a new message]');
    const after = await call('terminal', { command: 'pgrep -x sleep >/dev/null && echo alive || echo gone' }, t);
    assert.equal(after.output, 'gone');
  });
});
