/**
 * The `singularity` backend: one apptainer (or singularity) instance per task,
 * driven through the runtime's CLI.
 *
 * - `instance start --containall --no-home` with a persistent overlay
 *   directory (or `--writable-tmpfs`), the task's work and state directories
 *   bound in, memory and cpu limits. `docker://` images are converted once to
 *   a cached SIF.
 * - Commands, files and kills through the exec agent: one long-lived
 *   `exec --cleanenv instance://NAME python3 /berth/agent/berth_agent.py
 *   --stdio` per task (see singularity-agent-environment.ts). The agent's
 *   file is staged once on the executor under a content hash and bound
 *   read-only into every instance at /berth/agent.
 * - An image without a usable python3 (said once per image in the log, and
 *   by `berth doctor`) falls back to one `exec --cleanenv instance://NAME`
 *   per command, each under `setsid` so a timeout or interrupt kills its
 *   whole process group inside the instance, and files through small
 *   helper commands in the instance (binary-safe pipes).
 * - The environment is passed explicitly with `--env`: `--containall` (and
 *   `--cleanenv`) drop everything else, which is what we want for secrets,
 *   but passthrough variables must then be named.
 * - The instance is stopped on release; instances a previous executor with
 *   the same state root left behind are stopped when the backend starts.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes, createHash } from 'node:crypto';
import { accessSync, constants as fsConstants } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { FailedPreconditionError, InvalidArgumentError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type {
  Backend,
  BackendCapabilities,
  BackendEnvironment,
  BackgroundHandle,
  BackgroundOptions,
  ExecOptions,
  ExecResult,
  FileStat,
  TaskKey,
} from '../../backend.js';
import { fileErrorFromErrno, fileTooLargeError, type FileOp } from '../shared/file-errors.js';
import { MAX_READ_FILE_BYTES } from '../shared/file-limits.js';
import { assertNotReleased, deliverExit, deliverOutput } from '../shared/guards.js';
import { killGroupArgv, signalExitCode } from '../shared/process-group.js';
import { taskKeyString } from '../../backend.js';
import { ExecDeadline, interruptedBeforeStart } from '../shared/exec-deadline.js';
import { isProviderSecretName } from '../../shell-state-runner.js';
import { PgidLineFilter } from '../shared/pgid-line-filter.js';
import { AGENT_FILE_NAME, findAgentScript, stageAgentScript, type StagedAgent } from '../shared/agent-script.js';
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
  FILE_EXIT_ERRNO,
  groupCommand,
  instanceListArgv,
  instanceName,
  instancePrefix,
  instanceStartArgv,
  instanceStopArgv,
  needsConversion,
  parseInstanceList,
  pgidLinePrefix,
  readFileCommand,
  resolveBinary,
  statCommand,
  writeFileCommand,
  type Bind,
} from './singularity-argv.js';
import { runCli, spawnCli, stderrTail, type Cli } from './singularity-cli.js';

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
  /** berth_agent.py; default: sandbox-image/agent/berth_agent.py of this package. */
  readonly agentScriptPath?: string;
  readonly logger?: Logger;
}

/** How commands reach a task's instance: its exec agent, or one `apptainer exec` each (no python3 in the image). */
export type SingularityTransport = 'agent' | 'apptainer-exec';

type TaskEnvironment = SingularityAgentEnvironment | SingularityEnvironment;

/** The environment of the CLI process: the executor's, without provider secrets. */
function cliEnvironment(base: Readonly<Record<string, string | undefined>>, extra: Readonly<Record<string, string>> | undefined) {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(base)) {
    if (value !== undefined && !isProviderSecretName(name)) env[name] = value;
  }
  return { ...env, ...extra };
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

interface EnvironmentSetup {
  readonly cli: Cli;
  readonly name: string;
  readonly description: string;
  readonly env: Readonly<Record<string, string>>;
  readonly killGraceMs: number;
  readonly pipeDrainMs: number;
  readonly logger: Logger | undefined;
  /** Stops the instance and removes the task's directories. */
  readonly release: () => Promise<void>;
}

/** A running command inside the instance: its local CLI process and the group id it reported. */
interface GroupRun {
  readonly child: ChildProcess;
  readonly filter: PgidLineFilter;
  /** Kills the group inside the instance (and, failing that, the local CLI process); resolves when done. */
  kill(): Promise<void>;
}

/** The per-command path, for images without a usable python3: one `apptainer exec` per command and file operation. */
class SingularityEnvironment implements BackendEnvironment {
  /** How commands reach the instance (berth doctor says it). */
  readonly transport = 'apptainer-exec' as const;
  readonly description: string;
  readonly homeDir = WORKSPACE_DIR;
  readonly initialCwd = WORKSPACE_DIR;
  readonly stateDir = STATE_DIR;

  readonly #setup: EnvironmentSetup;
  readonly #running = new Set<GroupRun>();
  #disposing: Promise<void> | undefined;

  constructor(setup: EnvironmentSetup) {
    this.#setup = setup;
    this.description = setup.description;
  }

  #exec(command: readonly string[], env?: Readonly<Record<string, string>>): string[] {
    return execArgv({ name: this.#setup.name, env: { ...this.#setup.env, ...env }, pwd: WORKSPACE_DIR, command });
  }

  /** Runs a helper command in the instance to completion. */
  #helper(command: readonly string[], stdin?: Uint8Array) {
    return runCli(this.#setup.cli, this.#exec(command), { ...(stdin ? { stdin } : {}), timeoutMs: 120_000 });
  }

  /**
   * Starts a command under setsid in the instance. `onStarted` runs once the
   * group id line arrived (stdin may be written from then on).
   */
  #startGroup(
    script: string,
    options: {
      readonly env?: Readonly<Record<string, string>>;
      readonly pty?: boolean;
      readonly onOutput?: (chunk: Buffer) => void;
      readonly killGraceMs?: number;
    },
    onStarted: (run: GroupRun) => void,
  ): GroupRun {
    const nonce = randomBytes(8).toString('hex');
    let child: ChildProcess;
    try {
      child = spawnCli(this.#setup.cli, this.#exec(groupCommand(script, nonce, options.pty ?? false), options.env));
    } catch (err) {
      throw new UnavailableError(`cannot run ${this.#setup.cli.binary}: ${String(err)}`, { cause: err });
    }
    const filter = new PgidLineFilter(pgidLinePrefix(nonce));
    let killing: Promise<void> | undefined;
    let closed = false;
    child.once('close', () => (closed = true));
    const killLocal = () => {
      if (child.pid === undefined || closed) return;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    };
    const run: GroupRun = {
      child,
      filter,
      kill: () =>
        (killing ??= (async () => {
          const pgid = filter.pgid;
          const graceMs = options.killGraceMs ?? this.#setup.killGraceMs;
          if (pgid !== undefined) {
            const r = await runCli(this.#setup.cli, this.#exec(killGroupArgv(pgid, graceMs)), {
              timeoutMs: graceMs + 60_000,
            }).catch((err: unknown) => {
              this.#setup.logger?.warn({ err, pgid }, 'killing a process group in the instance failed');
              return undefined;
            });
            if (r && r.exitCode !== 0) this.#setup.logger?.warn({ pgid, stderr: stderrTail(r.stderr) }, 'kill command failed');
          }
          // The CLI process should end with its command; if it does not, end it here.
          if (!closed) {
            await new Promise<void>((resolve) => {
              const timer = setTimeout(() => {
                killLocal();
                resolve();
              }, pgid === undefined ? 0 : this.#setup.pipeDrainMs);
              child.once('close', () => {
                clearTimeout(timer);
                resolve();
              });
            });
          }
        })()),
    };
    child.stdout?.on('data', (chunk: Buffer) =>
      deliverOutput(options.onOutput, filter.push(chunk, () => onStarted(run)), this.#setup.logger),
    );
    child.stderr?.on('data', (chunk: Buffer) => deliverOutput(options.onOutput, chunk, this.#setup.logger));
    child.stdin?.on('error', () => undefined);
    this.#running.add(run);
    child.once('close', () => this.#running.delete(run));
    return run;
  }

  async exec(options: ExecOptions): Promise<ExecResult> {
    assertNotReleased(this, this.#disposing);
    const early = interruptedBeforeStart(options);
    if (early) return early;
    return new Promise<ExecResult>((resolve, reject) => {
      let run: GroupRun | undefined;
      // Before the group has started there is nothing to kill yet: its start kills it (below).
      const deadline = new ExecDeadline(options, () => void run?.kill());
      const sendStdin = (run: GroupRun) => {
        const stdin = run.child.stdin;
        if (!stdin) return;
        const bytes = options.stdin === undefined ? Buffer.alloc(0) : Buffer.from(options.stdin);
        if (options.pty) {
          // A terminal has no half-close: type the input, then EOF (^D; twice after an unterminated line).
          if (bytes.length > 0) stdin.write(bytes);
          stdin.write(bytes.length === 0 || bytes[bytes.length - 1] === 0x0a ? '\x04' : '\x04\x04');
        } else {
          stdin.end(bytes.length > 0 ? bytes : undefined);
        }
      };
      try {
        run = this.#startGroup(
          options.script,
          {
            ...(options.env ? { env: options.env } : {}),
            ...(options.pty ? { pty: true } : {}),
            ...(options.onOutput ? { onOutput: options.onOutput } : {}),
            ...(options.killGraceMs !== undefined ? { killGraceMs: options.killGraceMs } : {}),
          },
          (started) => {
            sendStdin(started);
            if (deadline.ended) void started.kill();
          },
        );
      } catch (err) {
        deadline.dispose();
        reject(err);
        return;
      }
      const started = run;
      started.child.once('error', (err) => {
        deadline.dispose();
        reject(
          (err as { code?: unknown }).code === 'ENOENT'
            ? new FailedPreconditionError(`the container runtime ${this.#setup.cli.binary} was not found`, { cause: err })
            : new UnavailableError(`cannot run ${this.#setup.cli.binary}: ${err.message}`, { cause: err }),
        );
      });
      started.child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
        deadline.dispose();
        const settle = () => {
          if (deadline.ended) {
            resolve(deadline.result(0));
          } else if (started.filter.pgid === undefined && code !== 0) {
            // The runtime failed before the command started (instance gone, bad argv).
            reject(new UnavailableError(`cannot run a command in ${this.description} (exit ${code ?? signal})`));
          } else {
            resolve(deadline.result(code ?? signalExitCode(signal)));
          }
        };
        if (deadline.ended) void started.kill().then(settle);
        else settle();
      });
    });
  }

  async startBackground(options: BackgroundOptions): Promise<BackgroundHandle> {
    assertNotReleased(this, this.#disposing);
    let killRequested = false;
    let exited = false;
    const stderrHead: Buffer[] = [];
    const started = new Promise<GroupRun>((resolve, reject) => {
      const run = this.#startGroup(
        options.script,
        {
          ...(options.env ? { env: options.env } : {}),
          ...(options.pty ? { pty: true } : {}),
          onOutput: (chunk) => {
            if (run.filter.pgid === undefined) stderrHead.push(chunk);
            else options.onOutput(chunk);
          },
        },
        (r) => resolve(r),
      );
      run.child.once('error', (err) => reject(new UnavailableError(`cannot run ${this.#setup.cli.binary}: ${err.message}`, { cause: err })));
      run.child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
        exited = true;
        if (run.filter.pgid === undefined) {
          reject(
            new UnavailableError(
              `cannot start a background process in ${this.description} (exit ${code ?? signal}): ${Buffer.concat(stderrHead).toString('utf8').trim()}`,
            ),
          );
          return;
        }
        let exitCode = code ?? signalExitCode(signal);
        // A process we killed reports -n, as the local backend does.
        if (killRequested && exitCode > 128) exitCode = -(exitCode - 128);
        deliverExit(options.onExit, exitCode, this.#setup.logger);
      });
    });
    const run = await started;
    let stdinClosed = false;
    let lastInputEndedLine = true;
    return {
      pid: run.filter.pgid ?? 0,
      write: (data) =>
        new Promise<void>((resolve, reject) => {
          const stdin = run.child.stdin;
          if (exited || stdinClosed || !stdin || stdin.destroyed) {
            reject(new FailedPreconditionError(exited ? 'the process has exited' : 'stdin is closed'));
            return;
          }
          const bytes = Buffer.from(data);
          if (bytes.length > 0) lastInputEndedLine = bytes[bytes.length - 1] === 0x0a;
          stdin.write(bytes, (err) => (err ? reject(new FailedPreconditionError(`cannot write to stdin: ${err.message}`)) : resolve()));
        }),
      closeStdin: () =>
        new Promise<void>((resolve) => {
          const stdin = run.child.stdin;
          if (stdinClosed || exited || !stdin || stdin.destroyed) {
            resolve();
            return;
          }
          stdinClosed = true;
          if (options.pty) {
            // ^D is EOF only at the start of a line; a first one flushes a partial line.
            stdin.write(lastInputEndedLine ? '\x04' : '\x04\x04', () => resolve());
          } else {
            stdin.end(() => resolve());
          }
        }),
      kill: async () => {
        if (exited) return;
        killRequested = true;
        await run.kill();
      },
    };
  }

  async readFile(absPath: string): Promise<Buffer> {
    this.#assertAbsolute(absPath);
    const r = await this.#helper(readFileCommand(absPath, MAX_READ_FILE_BYTES));
    if (r.exitCode === 0) {
      if (r.stdout.length > MAX_READ_FILE_BYTES) throw fileTooLargeError(absPath, r.stdout.length);
      return r.stdout;
    }
    throw this.#fileError(r.exitCode, absPath, r.stderr, 'read');
  }

  async writeFile(absPath: string, data: Uint8Array): Promise<void> {
    this.#assertAbsolute(absPath);
    const r = await this.#helper(writeFileCommand(absPath), data);
    if (r.exitCode !== 0) throw this.#fileError(r.exitCode, absPath, r.stderr, 'write');
  }

  async stat(absPath: string): Promise<FileStat> {
    this.#assertAbsolute(absPath);
    const r = await this.#helper(statCommand(absPath));
    const out = r.stdout.toString('utf8').trim();
    if (r.exitCode !== 0) throw this.#fileError(r.exitCode, absPath, r.stderr, 'stat');
    if (out === 'missing') return { exists: false, isDirectory: false, sizeBytes: 0 };
    const [kind, size] = out.split(' ');
    return { exists: true, isDirectory: kind === 'dir', sizeBytes: Number(size ?? 0) };
  }

  #assertAbsolute(absPath: string): void {
    assertNotReleased(this, this.#disposing);
    if (!absPath.startsWith('/')) throw new InvalidArgumentError(`path must be absolute: ${absPath}`);
  }

  #fileError(exitCode: number | null, absPath: string, stderr: string, op: FileOp): Error {
    const errno = exitCode === null ? undefined : FILE_EXIT_ERRNO[exitCode];
    return (
      (errno ? fileErrorFromErrno(errno, absPath, op, stderrTail(stderr)) : undefined) ??
      new UnavailableError(`file operation on ${absPath} in ${this.description} failed (exit ${exitCode}): ${stderrTail(stderr)}`)
    );
  }

  dispose(): Promise<void> {
    this.#disposing ??= (async () => {
      await Promise.all([...this.#running].map((r) => r.kill().catch(() => undefined)));
      await this.#setup.release();
    })();
    return this.#disposing;
  }
}
