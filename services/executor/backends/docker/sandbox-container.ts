/**
 * One started sandbox container and the channel into it: renaming it (a
 * claimed warm pool container), asking why it was lost, stopping it for a
 * suspension and removing it. Starting one is container-factory.ts's;
 * starting a stopped one again, container-restart.ts's.
 */
import type Dockerode from 'dockerode';
import { UnavailableError } from '../../../common/errors.js';
import type { AgentListener } from './agent-listener.js';
import { dockerError, isConflict, isNotFound } from './docker-errors.js';
import type { TaskIdentity } from './task-identity.js';
import type { SandboxChannel } from '../shared/sandbox-channel.js';

/** What a container needs of its engine (the factory's options). */
export interface SandboxEngine {
  readonly docker: Dockerode;
  /** How error messages name the daemon. */
  readonly daemon: string;
  /**
   * Called when the container name is taken: removes the holder if it is a
   * leftover, throws if a live executor owns it.
   */
  readonly resolveNameConflict: (name: string) => Promise<void>;
}

/** What `docker inspect` says about a container we lost. */
export interface ContainerFate {
  readonly exists: boolean;
  readonly running: boolean;
  readonly exitCode?: number;
  readonly oomKilled?: boolean;
}

/** A started container and the channel into it. */
export class SandboxContainer {
  readonly id: string;
  readonly hostDir: string;
  /** The uid and gid its commands run as. */
  readonly identity: TaskIdentity;
  readonly channel: SandboxChannel;
  readonly startedAt: number;
  /** A shell snapshot written while the container waited in the warm pool (see BackendEnvironment.preparedSnapshot). */
  preparedSnapshot: string | undefined;
  #name: string;
  readonly #container: Dockerode.Container;
  readonly #listener: AgentListener;
  readonly #engine: SandboxEngine;
  #removing: Promise<void> | undefined;

  constructor(
    engine: SandboxEngine,
    container: Dockerode.Container,
    name: string,
    hostDir: string,
    identity: TaskIdentity,
    listener: AgentListener,
    channel: SandboxChannel,
  ) {
    this.#engine = engine;
    this.#container = container;
    this.id = container.id;
    this.#name = name;
    this.hostDir = hostDir;
    this.identity = identity;
    this.#listener = listener;
    this.channel = channel;
    this.startedAt = Date.now();
  }

  get name(): string {
    return this.#name;
  }

  /** Renames the container (a claimed pool container takes its task's name). */
  async rename(name: string): Promise<void> {
    const { docker, daemon } = this.#engine;
    try {
      await this.#container.rename({ name });
    } catch (err) {
      if (!isConflict(err)) throw dockerError(err, `renaming ${this.#name} to ${name}`, daemon);
      await this.#engine.resolveNameConflict(name);
      try {
        await docker.getContainer(this.id).rename({ name });
      } catch (again) {
        throw dockerError(again, `renaming ${this.#name} to ${name}`, daemon);
      }
    }
    this.#name = name;
  }

  /** Why the container is unusable: removed, stopped (OOM?), or still running. */
  async fate(): Promise<ContainerFate> {
    try {
      const info = await this.#container.inspect();
      return {
        exists: true,
        running: info.State.Running,
        exitCode: info.State.ExitCode,
        oomKilled: info.State.OOMKilled,
      };
    } catch (err) {
      if (isNotFound(err)) return { exists: false, running: false };
      throw dockerError(err, `inspecting ${this.#name}`, this.#engine.daemon);
    }
  }

  /**
   * Stops the container for a suspension: everything running in it ends
   * (SIGKILL: the shell state is on disk after every command), its
   * filesystem, volumes and host directory stay, and so does its name. The
   * channel and the agent socket are closed; restartContainer (container-restart.ts) makes
   * a new {@link SandboxContainer} of it.
   */
  async stop(): Promise<void> {
    this.channel.close();
    await this.#listener.close();
    try {
      await this.#container.stop({ t: 0 });
    } catch (err) {
      // 304: stopped already.
      if ((err as { statusCode?: number }).statusCode !== 304) throw dockerError(err, `stopping ${this.#name}`, this.#engine.daemon);
    }
  }

  /** Force-removes the container (killing everything in it). Idempotent; a missing container is fine. */
  remove(): Promise<void> {
    this.#removing ??= (async () => {
      this.channel.close();
      await this.#listener.close();
      await removeContainer(this.#container, this.#engine.daemon);
    })();
    return this.#removing;
  }
}

/**
 * Force-removes a container and returns once it is gone (its name is free
 * again); 404 means it is gone already. Never removes volumes.
 */
export async function removeContainer(container: Dockerode.Container, daemon: string): Promise<void> {
  try {
    await container.remove({ force: true, v: false });
    return;
  } catch (err) {
    if (isNotFound(err)) return;
    if (!isConflict(err)) throw dockerError(err, `removing container ${container.id}`, daemon);
  }
  // 409: someone else's removal is in progress; wait for it to finish.
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    try {
      await container.inspect();
    } catch (err) {
      if (isNotFound(err)) return;
      throw dockerError(err, `inspecting container ${container.id}`, daemon);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new UnavailableError(`${daemon} did not finish removing container ${container.id} within 30 s`);
}

/** Whether `container` still runs, for its agent listener (an engine that does not answer: assume it does). */
export function runningProbe(container: Dockerode.Container): () => Promise<boolean> {
  return async () => {
    try {
      return (await container.inspect()).State.Running;
    } catch (err) {
      return !isNotFound(err);
    }
  };
}
