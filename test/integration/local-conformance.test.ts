/** The shared backend conformance suite on the local backend. */
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after } from 'node:test';
import { LocalBackend } from '../../services/executor/backends/local/local-backend.js';
import { runBackendConformance } from '../../services/conformance/backend-conformance.js';
import { runLifecycleConformance } from '../../services/conformance/lifecycle-conformance.js';

const roots: string[] = [];

const makeBackend = async () => {
  const root = await mkdtemp(path.join(os.tmpdir(), 'berth-local-conformance-'));
  roots.push(root);
  // The suite's `mktemp -d` lands inside root, which is removed at the end, not in the run's own temp directory.
  const tmp = path.join(root, 'tmp');
  await mkdir(tmp);
  return new LocalBackend({ stateRoot: path.join(root, 'tasks'), initialCwd: root, env: { TMPDIR: tmp } });
};

// No agent stream on local, so no dropped-stream case; scripts run as host subprocesses (allowed here).
runBackendConformance('local', makeBackend, { executeCode: true });
// No snapshots on local (docs/lifecycle.md): the refusal must name the backend.
runLifecycleConformance('local', makeBackend, { snapshots: false });

after(async () => {
  await Promise.all(roots.map((root) => rm(root, { recursive: true, force: true })));
});
