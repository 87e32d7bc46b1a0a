/**
 * The conformance suite Berth holds its own backends to, on this one: what
 * a backend package runs in its CI (`npm test`, i.e. `node --test`).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after } from 'node:test';
import { runBackendConformance } from 'berth/conformance';
import { SubprocessBackend } from '../src/index.js';
import type { SubprocessEnvironment } from '../src/subprocess-environment.js';

let root: string | undefined;

runBackendConformance(
  'subprocess',
  async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'berth-subprocess-conformance-'));
    return new SubprocessBackend({ root });
  },
  {
    // Tasks share the host: a second task checks that a released one left nothing running.
    sharedHost: true,
    dropAgentStream: async (env) => (env as SubprocessEnvironment).agentChannel.dropStream(),
    backgroundAfterDrop: 'survives',
    executeCode: true,
  },
);

after(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});
