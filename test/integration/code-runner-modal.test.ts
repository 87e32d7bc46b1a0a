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
import { after, before, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import { silentLogger } from '../../services/common/logging.js';
import { ModalBackend } from '../../services/executor/backends/modal/modal-backend.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { agentCodeRunnerCases } from '../support/code-runner-agent-cases.js';
import { SANDBOX_IMAGE, dockerUnavailableReason } from '../support/docker-fixtures.js';
import { startModalStandin, type StandinProcess } from '../support/modal-standin-process.js';

const docker = new Dockerode();
const skip = await dockerUnavailableReason(docker);

describe('CodeRunner on the modal backend (socket relayed over the agent\'s SDK exec)', { skip, timeout: 600_000 }, () => {
  let standin: StandinProcess;
  let stateDir: string;
  let backend: ModalBackend;
  let environments: TaskEnvironments;
  const saved = { ...process.env };
  const tenant = `code-${randomBytes(4).toString('hex')}`;

  before(async () => {
    standin = await startModalStandin();
    Object.assign(process.env, standin.env);
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'berth-modal-code-'));
    backend = await ModalBackend.start({ image: SANDBOX_IMAGE, stateDir, cpu: 1, memoryMiB: 512, persistent: false, logger: silentLogger() });
    environments = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
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

  agentCodeRunnerCases({
    environments: () => environments,
    tenant,
    ranIn: /^the task's modal environment \(modal:berth-[0-9a-f]{40} \(.+\)\)$/,
    stream: "the SDK exec's stdin and stdout",
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
