/**
 * The subprocess backend: each task gets a temp directory of its own on the
 * executor's host, and its commands run there as subprocesses of Berth's exec
 * agent (python3). It isolates nothing more than a directory, like Berth's
 * local backend; it is here to show a backend built only on
 * `berth/backend-kit`, in a package of its own.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import {
  FailedPreconditionError,
  findAgentScript,
  startStdioAgent,
  taskKeyString,
  withoutProviderSecrets,
  type AgentSpawn,
  type Backend,
  type BackendCapabilities,
  type BackendEnvironment,
  type Logger,
  type TaskKey,
} from 'berth/backend-kit';
import { SubprocessEnvironment, type TaskDirs } from './subprocess-environment.js';

export interface SubprocessBackendOptions {
  /** Parent of the per-task directories (made 0700 if missing). */
  readonly root: string;
  /** The environment commands inherit, before provider secrets are taken out; default `process.env`. */
  readonly baseEnv?: Readonly<Record<string, string | undefined>>;
  /** Secret-looking variable names passed to commands all the same (`terminal.env_passthrough`). */
  readonly envPassthrough?: readonly string[];
  /** Between SIGTERM and SIGKILL of a process group; default 1000 ms. */
  readonly killGraceMs?: number;
  readonly logger?: Logger;
}

export class SubprocessBackend implements Backend {
  readonly capabilities: BackendCapabilities = { name: 'subprocess', pty: true, hostFilesystem: true, sharesRpcDir: true };
  readonly #options: SubprocessBackendOptions;
  readonly #environments = new Set<SubprocessEnvironment>();
  #closed = false;

  constructor(options: SubprocessBackendOptions) {
    this.#options = options;
  }

  async createEnvironment(key: TaskKey): Promise<BackendEnvironment> {
    if (this.#closed) throw new FailedPreconditionError('the subprocess backend was closed');
    const { root, logger } = this.#options;
    await mkdir(root, { recursive: true, mode: 0o700 });
    const top = await mkdtemp(path.join(root, 'task-'));
    const dirs: TaskDirs = { root: top, work: path.join(top, 'work'), state: path.join(top, 'state') };
    try {
      await mkdir(dirs.work);
      await mkdir(dirs.state, { mode: 0o700 });
      await mkdir(path.join(top, 'tmp'));
      const env = {
        ...withoutProviderSecrets(this.#options.baseEnv ?? process.env, this.#options.envPassthrough),
        HOME: dirs.work,
        // mktemp and friends write inside the task's directory, so release removes what they made.
        TMPDIR: path.join(top, 'tmp'),
      };
      const children = new Set<ChildProcess>();
      const spawnAgent: AgentSpawn = (argv) => {
        const [command = 'python3', ...args] = argv;
        const child = spawn(command, args, { cwd: dirs.work, env, stdio: 'pipe' });
        children.add(child);
        child.once('close', () => children.delete(child));
        return child;
      };
      const description = `subprocess:${taskKeyString(key)}`;
      const connect = () =>
        startStdioAgent({
          spawn: spawnAgent,
          agentPath: findAgentScript(),
          description,
          ...(logger ? { logger } : {}),
          // A dropped stream leaves the agent waiting here, its background processes kept, to be found again.
          lingerPath: path.join(dirs.state, 'agent.sock'),
        });
      const environment: SubprocessEnvironment = new SubprocessEnvironment(
        {
          description,
          dirs,
          killGraceMs: this.#options.killGraceMs ?? 1000,
          logger,
          connect,
          children,
          onReleased: () => this.#environments.delete(environment),
        },
        await connect(),
      );
      this.#environments.add(environment);
      return environment;
    } catch (err) {
      await rm(top, { recursive: true, force: true });
      throw err;
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#environments].map((environment) => environment.dispose()));
  }
}
