/** The shared backend conformance suite on the ssh backend, against a real sshd in a container. */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after } from 'node:test';
import { SshBackend } from '../../services/executor/backends/ssh/ssh-backend.js';
import { runBackendConformance } from '../support/backend-conformance.js';
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
  { sharedHost: true, timeScale: 2 },
);

after(async () => {
  await sshd?.stop();
  if (stateDir) await rm(stateDir, { recursive: true, force: true });
});
