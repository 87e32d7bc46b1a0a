/**
 * execute_code's per-task code containers, for task environments that
 * share no directory with the executor and run no exec agent to relay a
 * socket (an ssh host or a singularity image without python3): the script
 * cannot get a Unix socket there, so it runs in a hardened
 * docker container of its task instead and reaches the terminal backend
 * only through its tool calls (script → socket → executor → RunCode →
 * dispatcher → the task's ssh/singularity environment).
 *
 * The containers are the docker backend's own (same hardening, labels,
 * agent, orphan sweep), named `berth-code-<hash>` and labelled
 * `berth.role=code`; never persistent (nothing outlives the task) and never
 * from a warm pool. One is created on a task's first execute_code, reused by
 * its later ones, and removed with the task's environment (the caller ties
 * it to the task: see TaskEnvironments' companions) and on shutdown.
 *
 * `code_execution.code_container`: `auto` uses Docker when it answers,
 * `docker` requires it at start, `off` refuses execute_code on such
 * backends. Where Docker does not answer, execute_code fails with an error
 * saying so; the script never runs anywhere else.
 */
import Dockerode from 'dockerode';
import type { CodeContainerSetting } from '../../../common/config.js';
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type { Backend, CodeRunnerEnvironment, CodeRunnerEnvironments, TaskKey } from '../../backend.js';
import type { DockerBackendOptions } from './docker-backend-options.js';
import { describeDaemon, dockerMessage } from './docker-errors.js';

/** How long the reachability check waits for the Docker daemon. */
const PING_TIMEOUT_MS = 10_000;

export interface CodeContainersOptions {
  readonly setting: CodeContainerSetting;
  /** The terminal backend's name, for messages. */
  readonly backend: string;
  /** The docker backend's settings (from `terminal.docker_*`, `docker.*`); role, persistence and pool are set here. */
  readonly docker: DockerBackendOptions;
  readonly logger: Logger;
}

/** The error when Docker does not answer: names the backend, says why Docker is needed and how to fix it. */
export function codeContainerUnreachableMessage(backend: string, daemon: string, detail: string): string {
  return (
    `execute_code on the ${backend} backend runs the script in a per-task code container, which needs Docker, ` +
    `and ${daemon} is not reachable (${detail}). The script was not run. Start Docker on the executor host ` +
    '(scripts/ensure-docker.sh), or point docker.socket_path (or DOCKER_HOST) at its socket; ' +
    'code_execution.code_container: off turns execute_code off for this backend instead.'
  );
}

export class CodeContainers implements CodeRunnerEnvironments {
  readonly #o: CodeContainersOptions;
  readonly #daemon: string;
  readonly #logger: Logger;
  #docker: Promise<Backend> | undefined;
  #closed = false;

  private constructor(options: CodeContainersOptions) {
    this.#o = options;
    this.#daemon = describeDaemon(options.docker.socketPath);
    this.#logger = options.logger.child({ component: 'code-containers' });
  }

  /**
   * Sets up code containers for `options.backend`. `docker`: Docker must
   * answer now, else this rejects. `auto`: when Docker does not answer yet,
   * each execute_code asks again (and fails with the reason until it does).
   * `off`: undefined; such backends refuse execute_code.
   */
  static async start(options: CodeContainersOptions): Promise<CodeContainers | undefined> {
    if (options.setting === 'off') return undefined;
    const containers = new CodeContainers(options);
    try {
      await containers.#backend();
    } catch (err) {
      if (options.setting === 'docker') throw err;
      containers.#logger.warn(
        { err: (err as Error).message },
        `execute_code on the ${options.backend} backend needs Docker for its code containers and fails until it answers`,
      );
      return containers;
    }
    containers.#logger.info(
      { daemon: containers.#daemon, image: options.docker.image },
      `execute_code on the ${options.backend} backend runs scripts in per-task docker code containers`,
    );
    return containers;
  }

  /** A new code container for the task (the caller disposes it). */
  async create(key: TaskKey): Promise<CodeRunnerEnvironment> {
    if (this.#closed) throw new UnavailableError('the executor is shutting down');
    const docker = await this.#backend();
    const env = await docker.createEnvironment(key);
    if (env.rpcDir === undefined) {
      await env.dispose();
      throw new FailedPreconditionError('the code container has no directory shared with the executor');
    }
    return env as CodeRunnerEnvironment;
  }

  /** Removes every code container still there and stops the docker backend. */
  async close(): Promise<void> {
    this.#closed = true;
    const docker = await this.#docker?.catch(() => undefined);
    await docker?.close();
  }

  /**
   * The docker backend, started once Docker answers. Until it does, every
   * call checks again and fails with FailedPrecondition (Docker missing is a
   * setup problem); once started, a daemon that goes away gives UNAVAILABLE
   * from the backend itself, and it recovers when the daemon is back.
   */
  #backend(): Promise<Backend> {
    this.#docker ??= this.#startBackend().catch((err: unknown) => {
      this.#docker = undefined;
      throw err;
    });
    return this.#docker;
  }

  async #startBackend(): Promise<Backend> {
    const socketPath = this.#o.docker.socketPath;
    const probe = new Dockerode({ ...(socketPath ? { socketPath } : {}), timeout: PING_TIMEOUT_MS });
    try {
      await probe.ping();
    } catch (err) {
      throw new FailedPreconditionError(codeContainerUnreachableMessage(this.#o.backend, this.#daemon, dockerMessage(err)), {
        cause: err,
      });
    }
    const { DockerBackend } = await import('./docker-backend.js');
    return DockerBackend.start({ ...this.#o.docker, role: 'code', persistent: false, warmPool: 0 });
  }
}
