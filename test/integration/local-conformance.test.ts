/** The shared backend conformance suite on the local backend. */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after } from 'node:test';
import { LocalBackend } from '../../services/executor/backends/local/local-backend.js';
import { runBackendConformance } from '../support/backend-conformance.js';

const roots: string[] = [];

runBackendConformance(
  'local',
  async () => {
    const root = await mkdtemp(path.join(os.tmpdir(), 'berth-local-conformance-'));
    roots.push(root);
    return new LocalBackend({ stateRoot: path.join(root, 'tasks'), initialCwd: root });
  },
  // No agent stream on local, so no dropped-stream case; scripts run as host subprocesses (allowed here).
  { executeCode: true },
);

after(async () => {
  await Promise.all(roots.map((root) => rm(root, { recursive: true, force: true })));
});
