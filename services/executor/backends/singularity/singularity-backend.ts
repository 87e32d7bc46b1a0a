/**
 * The `singularity` backend: one apptainer (or singularity) instance per task,
 * driven through the runtime's CLI.
 *
 * - `instance start --containall --no-home` with a persistent overlay
 *   directory (or `--writable-tmpfs`), the task's work and state directories
 *   bound in, memory and cpu limits. `docker://` images are converted once to
 *   a cached SIF.
 * - Commands, files and kills through the exec agent: one long-lived
 *   `exec --cleanenv instance://NAME python3 /berth/agent/berth_agent.pyz
 *   --stdio` per task (see singularity-agent-environment.ts). The agent's
 *   file is staged once on the executor under a content hash and bound
 *   read-only into every instance at /berth/agent.
 * - An image without a usable python3 (said once per image in the log, and
 *   by `berth doctor`) falls back to one `exec --cleanenv instance://NAME`
 *   per command, each under `setsid` so a timeout or interrupt kills its
 *   whole process group inside the instance, and files through small
 *   helper commands in the instance (binary-safe pipes): see
 *   singularity-exec-environment.ts.
 * - The environment is passed explicitly with `--env`: `--containall` (and
 *   `--cleanenv`) drop everything else, which is what we want for secrets,
 *   but passthrough variables must then be named.
 * - The instance is stopped on release; instances a previous executor with
 *   the same state root left behind are stopped when the backend starts.
 */
import { createHash } from 'node:crypto';
import { accessSync, constants as fsConstants } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type { Backend, BackendCapabilities, BackendEnvironment, DiagnosisPhase, DiagnosticFinding, TaskKey } from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import { withoutProviderSecrets } from '../shared/secret-names.js';
import { AGENT_FILE_NAME, findAgentScript, stageAgentScript, type StagedAgent } from '../shared/agent/agent-script.js';
import type { AgentChannel } from '../shared/agent/agent-channel.js';
import { AgentUnavailableError, startStdioAgent, type AgentSpawn } from '../shared/agent/stdio-agent.js';
import { SifCache } from './sif-cache.js';
import { SingularityAgentEnvironment } from './singularity-agent-environment.js';
import {
  AGENT_DIR,
  STATE_DIR,
  WORKSPACE_DIR,
  buildSifArgv,
  execArgv,
  instanceListArgv,
  instanceName,
  instancePrefix,
  instanceStartArgv,
  instanceStopArgv,
  needsConversion,
  parseInstanceList,
  resolveBinary,
  type Bind,
} from './singularity-argv.js';
import { runCli, spawnCli, stderrTail, type Cli } from './singularity-cli.js';
import { SingularityEnvironment } from './singularity-exec-environment.js';

export { STATE_DIR, WORKSPACE_DIR } from './singularity-argv.js';

/** Where the exec agent waits to be found again after its stream dropped (inside the instance). */
export const AGENT_LINGER_PATH = `${STATE_DIR}/agent/linger.sock`;

export interface SingularityBackendOptions {
  /** The runtime binary; resolved from PATH (apptainer, then singularity) when absent. */
  readonly binary?: string;
  /** Image: a SIF path, or a reference to convert once (`docker://...`). */
  readonly image: string;
  /** Per-task directories, converted images, overlays. */
  readonly stateRoot: string;
  /** Keep the overlay and workspace of a task after release (default true); else `--writable-tmpfs`. */
  readonly persistent?: boolean;
  readonly memoryMiB?: number;
  readonly cpus?: number;
  /** Process limit of each instance (terminal.container_pids). */
  readonly pidsLimit?: number;
  /** Names of secret-looking variables that may still be passed into instances. */
  readonly envPassthrough?: readonly string[];
  /** Values for passthrough names; default `process.env`. */
  readonly baseEnv?: Readonly<Record<string, string | undefined>>;
  /** Added to every instance's environment. */
  readonly env?: Readonly<Record<string, string>>;
  /** Added to the CLI's own environment (not the container's). */
  readonly cliEnv?: Readonly<Record<string, string>>;
  /** Between SIGTERM and SIGKILL of a process group; default 1000 ms. */
  readonly killGraceMs?: number;
  /** After a kill, how long to wait for the output pipes to close; default 1000 ms. */
  readonly pipeDrainMs?: number;
  /** Limit for `instance start` (image conversion not included); default 120 s. */
  readonly startTimeoutMs?: number;
  /** The agent's archive; default: this installation's (findAgentScript). */
  readonly agentScriptPath?: string;
  readonly logger?: Logger;
}

/** How commands reach a task's instance: its exec agent, or one `apptainer exec` each (no python3 in the image). */
export type SingularityTransport = 'agent' | 'apptainer-exec';

type TaskEnvironment = SingularityAgentEnvironment | SingularityEnvironment;

/** The environment of the CLI process: the executor's, without provider secrets. */
function cliEnvironment(base: Readonly<Record<string, string | undefined>>, extra: Readonly<Record<string, string>> | undefined) {
  return { ...withoutProviderSecrets(base), ...extra };
}

function isExecutable(file: string): boolean {
  try {
    accessSync(file, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Task directory name on the executor: a hash, because tenant and task ids may hold any characters. */
function taskDirName(key: TaskKey): string {
  return createHash('sha256').update(taskKeyString(key)).digest('hex').slice(0, 32);
}

export class SingularityBackend implements Backend {
  readonly #options: SingularityBackendOptions;
  readonly #cli: Cli;
  readonly #prefix: string;
  readonly #sifCache: SifCache;
  readonly #containerEnv: Readonly<Record<string, string>>;
  readonly #environments = new Map<string, TaskEnvironment>();
  #agent: Promise<StagedAgent> | undefined;
  #closed = false;

  private constructor(options: SingularityBackendOptions, cli: Cli) {
    this.#options = options;
    this.#cli = cli;
    this.#prefix = instancePrefix(path.resolve(options.stateRoot));
    this.#sifCache = new SifCache(path.join(options.stateRoot, 'sif'), async (output, source) => {
      const r = await runCli(this.#cli, buildSifArgv(output, source), { timeoutMs: 60 * 60_000 });
      if (r.exitCode !== 0) {
        throw new UnavailableError(`converting ${source} to a SIF failed (exit ${r.exitCode}): ${stderrTail(r.stderr)}`);
      }
    });
    const base = options.baseEnv ?? process.env;
    const passthrough: Record<string, string> = {};
    for (const name of options.envPassthrough ?? []) {
      const value = base[name];
      if (value !== undefined) passthrough[name] = value;
    }
    this.#containerEnv = { HOME: WORKSPACE_DIR, LANG: 'C.UTF-8', ...passthrough, ...options.env };
  }

  /**
   * Finds the runtime, checks it answers, and stops instances that an
   * earlier executor with the same state root left running.
   */
  static async start(options: SingularityBackendOptions): Promise<SingularityBackend> {
    const base = options.baseEnv ?? process.env;
    const binary = resolveBinary(options.binary ?? '', base.PATH ?? '', isExecutable);
    if (!binary) {
      throw new FailedPreconditionError(
        'neither apptainer nor singularity is on PATH: install one, or set terminal.singularity_binary',
      );
    }
    const cli: Cli = { binary, env: cliEnvironment(base, options.cliEnv) };
    const version = await runCli(cli, ['--version'], { timeoutMs: 30_000 });
    if (version.exitCode !== 0) {
      throw new FailedPreconditionError(`${binary} --version failed (exit ${version.exitCode}): ${stderrTail(version.stderr)}`);
    }
    await mkdir(options.stateRoot, { recursive: true, mode: 0o700 });
    const backend = new SingularityBackend(options, cli);
    await backend.#sweep();
    return backend;
  }

  get capabilities(): BackendCapabilities {
    // PTYs come from script(1) inside the instance; the instance is the boundary.
    return { name: 'singularity', pty: true, hostFilesystem: false, sharesRpcDir: false };
  }

  /** Names of running instances that belong to this executor's state root. */
  async ownInstances(): Promise<string[]> {
    const r = await runCli(this.#cli, instanceListArgv(), { timeoutMs: 30_000 });
    if (r.exitCode !== 0) throw new UnavailableError(`${this.#cli.binary} instance list failed: ${stderrTail(r.stderr)}`);
    return parseInstanceList(r.stdout.toString('utf8'))
      .map((i) => i.name)
      .filter((name) => name.startsWith(this.#prefix));
  }

  /** How commands reach the task's instance; undefined when the task has no environment here. */
  transportOf(key: TaskKey): SingularityTransport | undefined {
    return this.#environments.get(taskKeyString(key))?.transport;
  }

  /** How the task's commands reach its instance: through the exec agent, or one apptainer exec each. */
  async diagnose(key: TaskKey, phase: DiagnosisPhase): Promise<DiagnosticFinding[]> {
    const transport = phase === 'live' ? this.transportOf(key) : undefined;
    if (transport === 'agent') {
      return [{ verdict: 'ok', text: 'commands reach the instance through the exec agent (one apptainer exec per task); execute_code runs in the instance' }];
    }
    if (transport === 'apptainer-exec') {
      return [
        {
          verdict: 'warn',
          text:
            'the image cannot run the exec agent (no python3?): each command starts its own apptainer exec (slower), ' +
            'and execute_code runs in a per-task code container',
        },
      ];
    }
    return [];
  }

  /** The agent's file, staged once under `<stateRoot>/agent/<hash>/` (a failure is retried by the next task). */
  #stagedAgent(): Promise<StagedAgent> {
    if (!this.#agent) {
      const staging = stageAgentScript(this.#options.agentScriptPath ?? findAgentScript(), path.join(this.#options.stateRoot, 'agent'));
      staging.catch(() => {
        if (this.#agent === staging) this.#agent = undefined;
      });
      this.#agent = staging;
    }
    return this.#agent;
  }

  async #sweep(): Promise<void> {
    for (const name of await this.ownInstances()) {
      this.#options.logger?.info({ instance: name }, 'stopping an instance left by an earlier executor');
      await this.#stopInstance(name);
    }
    await rm(path.join(this.#options.stateRoot, 'tasks'), { recursive: true, force: true });
  }

  async #stopInstance(name: string): Promise<void> {
    const r = await runCli(this.#cli, instanceStopArgv(name), { timeoutMs: 60_000 });
    if (r.exitCode !== 0 && !/no instance found/i.test(r.stderr)) {
      this.#options.logger?.warn({ instance: name, stderr: stderrTail(r.stderr) }, 'instance stop failed');
    }
  }

  async createEnvironment(key: TaskKey): Promise<BackendEnvironment> {
    if (this.#closed) throw new UnavailableError('the singularity backend is closed');
    const id = taskKeyString(key);
    if (this.#environments.has(id)) {
      throw new FailedPreconditionError(`an environment for task ${id} already exists on this executor`);
    }
    const o = this.#options;
    const image = needsConversion(o.image) ? await this.#sifCache.get(o.image) : o.image;
    const agent = await this.#stagedAgent();
    const dirName = taskDirName(key);
    const taskDir = path.join(o.stateRoot, 'tasks', dirName);
    const persistentDir = path.join(o.stateRoot, 'persistent', dirName);
    const persistent = o.persistent ?? true;
    const workDir = persistent ? path.join(persistentDir, 'work') : path.join(taskDir, 'work');
    const stateDir = path.join(taskDir, 'state');
    // A leftover state dir is from an executor that died; its snapshot must not leak into the new task.
    await rm(taskDir, { recursive: true, force: true });
    await mkdir(stateDir, { recursive: true, mode: 0o700 });
    await mkdir(workDir, { recursive: true, mode: 0o700 });
    const overlayDir = persistent ? path.join(persistentDir, 'overlay') : undefined;
    if (overlayDir) await mkdir(overlayDir, { recursive: true, mode: 0o700 });

    const name = instanceName(this.#prefix, key);
    const binds: Bind[] = [
      { source: workDir, target: WORKSPACE_DIR },
      { source: stateDir, target: STATE_DIR },
      { source: agent.dir, target: AGENT_DIR, readOnly: true },
    ];
    const argv = instanceStartArgv({
      image,
      name,
      ...(overlayDir ? { overlayDir } : {}),
      binds,
      env: this.#containerEnv,
      ...(o.memoryMiB !== undefined ? { memoryMiB: o.memoryMiB } : {}),
      ...(o.cpus !== undefined ? { cpus: o.cpus } : {}),
      ...(o.pidsLimit !== undefined ? { pidsLimit: o.pidsLimit } : {}),
    });
    let started = await runCli(this.#cli, argv, { timeoutMs: o.startTimeoutMs ?? 120_000 });
    if (started.exitCode !== 0 && /already exists/i.test(started.stderr)) {
      // Left over from an executor that died after our sweep ran: replace it.
      await this.#stopInstance(name);
      started = await runCli(this.#cli, argv, { timeoutMs: o.startTimeoutMs ?? 120_000 });
    }
    if (started.exitCode !== 0) {
      await rm(taskDir, { recursive: true, force: true });
      throw new UnavailableError(`cannot start an instance of ${o.image} for task ${id} (exit ${started.exitCode}): ${stderrTail(started.stderr)}`);
    }
    const description = `singularity:${name}`;
    const logger = o.logger?.child({ backend: 'singularity', task: id, instance: name });
    const release = async () => {
      await this.#stopInstance(name);
      await rm(taskDir, { recursive: true, force: true });
      this.#environments.delete(id);
    };
    const spawn: AgentSpawn = (command) =>
      spawnCli(this.#cli, execArgv({ name, env: this.#containerEnv, pwd: WORKSPACE_DIR, command }));
    const connect = (): Promise<AgentChannel> =>
      startStdioAgent({
        spawn,
        agentPath: `${AGENT_DIR}/${AGENT_FILE_NAME}`,
        description,
        ...(logger ? { logger } : {}),
        // The fallback is a property of the image: said once per image, not per task.
        fallbackLogKey: `singularity image ${o.image}`,
        // Under the task's private state dir: a dropped stream leaves the agent (and background processes) here.
        lingerPath: AGENT_LINGER_PATH,
      });
    const killGraceMs = o.killGraceMs ?? 1000;
    let environment: TaskEnvironment;
    try {
      environment = new SingularityAgentEnvironment({ description, killGraceMs, logger, connect, release }, await connect());
    } catch (err) {
      if (!(err instanceof AgentUnavailableError && err.canFallBack)) {
        await this.#stopInstance(name);
        await rm(taskDir, { recursive: true, force: true });
        throw err;
      }
      environment = new SingularityEnvironment({
        cli: this.#cli,
        name,
        description,
        env: this.#containerEnv,
        killGraceMs,
        pipeDrainMs: o.pipeDrainMs ?? 1000,
        logger,
        release,
      });
    }
    this.#environments.set(id, environment);
    return environment;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#environments.values()].map((e) => e.dispose()));
  }
}
