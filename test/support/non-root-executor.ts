/**
 * A docker backend run by an executor that is not root, as compose runs it
 * (uid 10001, the docker socket through its group): started by
 * test/integration/docker-agent-hardening.test.ts as that uid, with the
 * state root (owned by it) and a tenant as arguments. One task makes
 * /run/berth's attempts (host-dir-attempts.ts), is suspended and resumed,
 * and makes them again; prints what it saw as one JSON line and leaves no
 * container behind.
 */
import { silentLogger } from '../../services/common/logging.js';
import { AgentChannel } from '../../services/executor/backends/shared/agent/agent-channel.js';
import { DockerBackend } from '../../services/executor/backends/docker/docker-backend.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { SANDBOX_IMAGE } from './docker-fixtures.js';
import { HOST_DIR_ATTEMPTS, HOST_DIR_MODES } from './host-dir-attempts.js';

const [stateRoot, tenant] = process.argv.slice(2);
if (!stateRoot || !tenant) throw new Error('usage: non-root-executor.js STATE_ROOT TENANT');
// As compose runs it: docker.network bridge (a non-root executor cannot install the host rules of `isolated`).
const backend = await DockerBackend.start({ image: SANDBOX_IMAGE, stateRoot, network: 'bridge', persistent: false, sweepIntervalMs: 0, logger: silentLogger() });
const envs = new TaskEnvironments({ backend, logger: silentLogger(), lifetimeSeconds: 0 });
const key = { tenant, taskId: 'non-root' };
const run = async (command: string) => (await envs.exec(key, { command, timeoutMs: 60_000, maxOutputChars: 100_000 })).output.trim();
/** What the task sees of /run/berth, and whether its commands go through the agent. */
const look = async () => ({
  attempts: (await run(HOST_DIR_ATTEMPTS)).split('\n'),
  modes: (await run(HOST_DIR_MODES)).split('\n'),
  listing: (await run('ls -A /run/berth')).split('\n'),
  agent: backend.environmentOf(key)?.container.channel instanceof AgentChannel,
});
try {
  const first = await look();
  const suspended = (await envs.suspend(key)).suspended;
  const resumed = await look();
  process.stdout.write(`${JSON.stringify({ uid: process.getuid?.(), first, suspended, resumed })}\n`);
} finally {
  await envs.closeAll();
  await backend.close();
}
