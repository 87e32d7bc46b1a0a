/**
 * Starting a task's stopped container again (resuming a suspended task):
 * the same container, so its filesystem changes, volumes and the runner's
 * shell state are all there. Its host directory is prepared afresh first,
 * exactly as for a new container (host-dir.ts): a new copy of the agent's
 * archive, account files and marker, so nothing the previous run's
 * commands did there reaches the agent that starts now as the container's
 * root. That agent dials a fresh agent socket with a fresh token; under
 * `docker.network: isolated` the new network namespace gets Docker's
 * embedded DNS closed again before any command runs.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { AgentListener } from './agent-listener.js';
import { AGENT_TOKEN_FILE } from './container-spec.js';
import { dockerError } from './docker-errors.js';
import type { ContainerFactory } from './container-factory.js';
import { writeTokenFile } from './host-dir.js';
import { SandboxContainer, runningProbe } from './sandbox-container.js';

/** Starts `stopped` (see SandboxContainer.stop) again and resolves with it once its agent has connected. */
export async function restartContainer(factory: ContainerFactory, stopped: SandboxContainer): Promise<SandboxContainer> {
  const o = factory.options;
  const container = o.docker.getContainer(stopped.id);
  await factory.prepareHostDir(stopped.hostDir, stopped.identity);
  const listener = await AgentListener.listen(path.join(stopped.hostDir, 'agent.sock'), stopped.name, { uid: 0, gid: 0 }, o.logger);
  const token = randomBytes(16).toString('hex');
  const tokenFile = path.join(stopped.hostDir, AGENT_TOKEN_FILE);
  const stop = new AbortController();
  let release: (() => void) | undefined;
  try {
    await writeTokenFile(tokenFile, token);
    release = await o.startGate.acquire('task');
    const agent = listener.expect(token, o.agentConnectTimeoutMs, stop.signal);
    agent.catch(() => undefined);
    try {
      await container.start();
    } catch (err) {
      // 304: it runs already (a resumption that failed after the start): its agent dialled the old socket, so start it over.
      if ((err as { statusCode?: number }).statusCode !== 304) throw dockerError(err, `starting ${stopped.name} again`, o.daemon);
      await container.restart({ t: 0 });
    }
    release();
    if (o.embeddedDns) await o.embeddedDns.close((await container.inspect()).State.Pid);
    listener.isAlive = runningProbe(container);
    const params = { name: stopped.name, hostDir: stopped.hostDir, identity: stopped.identity, labels: {} };
    const channel = await factory.connect(container, params, agent, stop.signal);
    return new SandboxContainer(o, container, stopped.name, stopped.hostDir, stopped.identity, listener, channel);
  } catch (err) {
    await listener.close();
    throw err;
  } finally {
    release?.();
    stop.abort();
    await rm(tokenFile, { force: true }).catch(() => undefined);
  }
}
