/** The shared backend conformance suite on the ssh backend, against a real sshd in a container. */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after } from 'node:test';
import { SshBackend } from '../../services/executor/backends/ssh/ssh-backend.js';
import { SshEnvironment } from '../../services/executor/backends/ssh/ssh-environment.js';
import { runBackendConformance } from '../../services/conformance/backend-conformance.js';
import { startSshd, type StartedSshd } from '../../services/cli/bench/sshd-container.js';

let sshd: StartedSshd | undefined;
let stateDir: string | undefined;

runBackendConformance(
  'ssh',
  async () => {
    sshd = await startSshd();
    stateDir = await mkdtemp(path.join(os.tmpdir(), 'berth-ssh-conformance-'));
    return new SshBackend({
      host: sshd.host,
      port: sshd.port,
      user: sshd.user,
      privateKey: sshd.keys.privateKey,
      knownHostsPath: path.join(stateDir, 'known_hosts'),
      pollIntervalMs: 100,
    });
  },
  {
    sharedHost: true,
    timeScale: 2,
    // Background processes on ssh are detached (nohup/setsid, files in the task dir): they outlive the agent's channel.
    dropAgentStream: async (env) => {
      const channel = env instanceof SshEnvironment ? env.agentChannel : undefined;
      if (!channel) throw new Error(`no exec agent in ${env.description}`);
      channel.close();
    },
    backgroundAfterDrop: 'survives',
    executeCode: true,
  },
);

after(async () => {
  await sshd?.stop();
  if (stateDir) await rm(stateDir, { recursive: true, force: true });
});
