/**
 * Runs execute_code scripts in a task's own environment (spec §6, DESIGN
 * "execute_code"), over any backend that shares a directory with its
 * sandbox (`rpcDir`), or whose exec agent relays a socket from inside it
 * (`rpcRelay`: the run dir and rpc.sock are then made in the sandbox by the
 * agent, and each connection is carried over the agent's stream; see
 * run-staging.ts):
 *
 * 1. A probe, run where the script will run, reports the interpreter, the
 *    sandbox user, the directory and the environment a process gets there.
 * 2. A fresh run dir in the rpcDir gets hermes_tools.py, script.py and
 *    `rpc.sock` (0600, owned by the sandbox user); it is private until then
 *    and handled through a descriptor, never a path the sandbox could
 *    redirect (run-dir.ts).
 * 3. The launcher starts the script with the scrubbed environment, in its own
 *    process group (the backend's exec): stdout capped head + tail, stderr's
 *    head in a file. Timeout and interrupt kill the group: SIGTERM, 5 s, SIGKILL.
 * 4. The script's tool calls arrive on the socket, are checked (token,
 *    request shape) and handed to `onToolCall`; the caller enforces the
 *    whitelist and call limit and dispatches them.
 *
 * Environments with neither (an ssh host without python3 for the agent, a
 * backend with no agent) run the script in the task's per-task code
 * container instead (the backend's {@link CodeRunnerEnvironments}): created on the
 * task's first execute_code, reused after, removed with the task. There the
 * probe is always strict (the task's shell state is on another machine) and
 * the script's tool calls still reach the task's own environment. Without
 * code containers (code_execution.code_container: off, or Docker not
 * answering) such backends fail with a clear error; nothing falls back to
 * running the script somewhere else.
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { FailedPreconditionError, InvalidArgumentError } from '../../common/errors.js';
import { InterruptedBeforeStartError, unlessAborted } from '../../common/interrupts.js';
import type { Logger } from '../../common/logging.js';
import type { TaskCodeRunRequest, TaskCodeRunResult } from '../../common/task-client.js';
import type { BackendEnvironment, CodeRunnerEnvironment, CodeRunnerEnvironments, RpcRelay, TaskKey } from '../backend.js';
import type { ShellStateRunner } from '../shell-state/shell-state-runner.js';
import type { ForegroundTask, TaskEnvironments } from '../task-environment.js';
import type { CodeRunOutcome } from '../executor-metrics.js';
import { buildCodeEnv, encodeEnvRecords } from './code-env.js';
import { buildLauncherScript, buildProbeScript, parseProbeOutput, type CodeMode, type ProbeResult } from './code-launch.js';
import { decodeStderrHead, StdoutCapture } from './code-output.js';
import { stageInSandbox, stageInSharedDir } from './run-staging.js';

/** Between SIGTERM and SIGKILL of a script's process group (spec §6). */
export const CODE_KILL_GRACE_MS = 5000;

const PROBE_TIMEOUT_MS = 30_000;
/** The probe prints the environment; more than this is not an environment we can pass on. */
const MAX_PROBE_OUTPUT_BYTES = 4 * 1024 * 1024;

/** The companion name of a task's code container (see TaskEnvironments). */
export const CODE_CONTAINER = 'execute_code container';

/** The error for a backend that has no directory to share a socket through, with code containers off. */
export function noRpcDirMessage(backend: string): string {
  return (
    `execute_code cannot run on the ${backend} backend: its environments share no directory with the executor for ` +
    'the script\'s tool socket, so scripts run in a per-task code container, and code_execution.code_container is off. ' +
    'Set it to auto or docker (Docker must be reachable from the executor), or use the local or docker backend.'
  );
}

/**
 * What a code-container result tells the model: where its files are. In
 * project mode, also that the task's cwd and interpreter did not apply.
 */
export function codeContainerNotice(backend: string, mode: CodeMode): string {
  const where =
    `The script ran in a per-task code container (docker), not in the task's ${backend} environment: its ` +
    `hermes_tools calls (terminal, read_file, write_file, ...) act on the ${backend} environment, while the script's ` +
    "own open(), os and subprocess calls see only the code container's files.";
  return mode === 'project'
    ? `${where} The task's working directory and VIRTUAL_ENV/CONDA_PREFIX belong to the ${backend} environment, so ` +
        "the script ran with the container's python3 in a scratch directory, as in strict mode."
    : where;
}

export const HOST_SUBPROCESS_REFUSED =
  'execute_code on the local backend runs the script as a plain subprocess on the executor host, which is allowed ' +
  'only in single-user mode (no tenants configured, or allow_local_multi_tenant: true). Use the docker backend ' +
  'for multi-tenant execute_code.';

export const HOST_SUBPROCESS_NOTICE =
  'The script ran as a subprocess on the executor host (local backend, single-user mode), not in a container.';

export interface CodeRunnerOptions {
  readonly logger: Logger;
  /** Code containers for backends whose environments have no rpcDir; absent: those refuse execute_code. */
  readonly codeContainers?: CodeRunnerEnvironments;
  /** Default {@link CODE_KILL_GRACE_MS}; tests shorten it. */
  readonly killGraceMs?: number;
  /** Told how each run ended; absent: metrics are off. */
  readonly onRun?: (outcome: CodeRunOutcome) => void;
}

/** How a run ended, for metrics. */
export function codeRunOutcome(result: TaskCodeRunResult): CodeRunOutcome {
  if (result.timedOut) return 'timeout';
  if (result.interrupted) return 'interrupted';
  return result.exitCode === 0 ? 'success' : 'error';
}

export class CodeRunner {
  readonly #environments: TaskEnvironments;
  readonly #logger: Logger;
  readonly #killGraceMs: number;
  readonly #codeContainers: CodeRunnerEnvironments | undefined;
  readonly #onRun: ((outcome: CodeRunOutcome) => void) | undefined;
  /** Each environment's last probe, reused while what it depends on is unchanged (see #probe). */
  readonly #probes = new WeakMap<BackendEnvironment, { readonly key: string; readonly probe: ProbeResult }>();

  constructor(environments: TaskEnvironments, options: CodeRunnerOptions) {
    this.#environments = environments;
    this.#logger = options.logger;
    this.#killGraceMs = options.killGraceMs ?? CODE_KILL_GRACE_MS;
    this.#codeContainers = options.codeContainers;
    this.#onRun = options.onRun;
  }

  /** Runs one script to the end (exit, timeout or interrupt). Setup failures reject with domain errors. */
  async run(key: TaskKey, request: TaskCodeRunRequest): Promise<TaskCodeRunResult> {
    const onRun = this.#onRun;
    if (onRun === undefined) return this.#runScript(key, request);
    let result: TaskCodeRunResult;
    try {
      result = await this.#runScript(key, request);
    } catch (err) {
      onRun('failed');
      throw err;
    }
    onRun(codeRunOutcome(result));
    return result;
  }

  async #runScript(key: TaskKey, request: TaskCodeRunRequest): Promise<TaskCodeRunResult> {
    if (request.code.trim() === '') throw new InvalidArgumentError('code must not be empty');
    if (request.timeoutMs <= 0) throw new InvalidArgumentError('timeout_ms must be positive');
    const backend = this.#environments.capabilities.name;
    const hostSubprocess = backend === 'local';
    try {
      return await this.#runForeground(key, request, backend, hostSubprocess);
    } catch (err) {
      // Interrupted while the task's environment, its shell, a code container or the relay was still on its way.
      if (!(err instanceof InterruptedBeforeStartError)) throw err;
      return interruptedRun('', '', []);
    }
  }

  #runForeground(key: TaskKey, request: TaskCodeRunRequest, backend: string, hostSubprocess: boolean): Promise<TaskCodeRunResult> {
    return this.#environments.withForeground(
      key,
      async (task) => {
        const logger = this.#logger.child({ tenant: key.tenant, task: key.taskId, tool: 'execute_code' });
        const notices = [...task.notices];
        if (task.env.rpcDir === undefined && task.env.rpcRelay === undefined) {
          return this.#runInCodeContainer(key, task, request, { logger, notices, backend });
        }
        if (hostSubprocess && !request.allowHostSubprocess) throw new FailedPreconditionError(HOST_SUBPROCESS_REFUSED);
        if (hostSubprocess) notices.push(HOST_SUBPROCESS_NOTICE);
        const ranIn = hostSubprocess
          ? `a subprocess on the executor host (local backend, single-user mode; ${task.env.description})`
          : `the task's ${backend} environment (${task.env.description})`;
        const staging: Staging = task.env.rpcDir
          ? { rpcDir: task.env.rpcDir }
          : { relay: task.env.rpcRelay! };
        const target = { env: task.env, staging, runner: task.runner, signal: task.signal };
        return this.#run(target, request, { logger, notices, ranIn, mode: request.mode });
      },
      request.signal,
    );
  }

  /** The script runs in the task's code container; its tool calls still reach the task's own environment. */
  async #runInCodeContainer(
    key: TaskKey,
    task: ForegroundTask,
    request: TaskCodeRunRequest,
    meta: { logger: Logger; notices: string[]; backend: string },
  ): Promise<TaskCodeRunResult> {
    const containers = this.#codeContainers;
    if (containers === undefined) throw new FailedPreconditionError(noRpcDirMessage(meta.backend));
    // The container is the task's (later scripts use it): an interrupt ends the wait for it, not its start.
    const container: CodeRunnerEnvironment = await unlessAborted(
      task.companion(CODE_CONTAINER, () => containers.create(key)),
      task.signal,
      'the script',
    );
    const ranIn =
      `a per-task code container (${container.description}) beside the task's ${meta.backend} environment ` +
      `(${task.env.description})`;
    meta.notices.push(codeContainerNotice(meta.backend, request.mode));
    const target = { env: container, staging: { rpcDir: container.rpcDir }, signal: task.signal };
    // The task's shell state (cwd, VIRTUAL_ENV) is on the other machine: project mode cannot apply here.
    return this.#run(target, request, { logger: meta.logger, notices: meta.notices, ranIn, mode: 'strict' });
  }

  async #run(
    target: RunTarget,
    request: TaskCodeRunRequest,
    meta: { logger: Logger; notices: string[]; ranIn: string; mode: CodeMode },
  ): Promise<TaskCodeRunResult> {
    const { env: sandbox, staging: where, signal } = target;
    const startedMs = performance.now();
    if (signal.aborted) return interruptedRun(meta.ranIn, '', meta.notices);
    const probe = await this.#probe(target, meta.mode);
    if (probe === 'interrupted') return interruptedRun(meta.ranIn, '', meta.notices);

    const runName = `code-${randomBytes(8).toString('hex')}`;
    const token = randomBytes(32).toString('hex');
    const files = { stubModule: request.stubModule, code: request.code };
    const serve = {
      token,
      logger: meta.logger,
      onRequest: async ({ tool, args }: { tool: string; args: Record<string, unknown> }) => {
        try {
          return await request.onToolCall({ tool, argsJson: JSON.stringify(args) });
        } catch (err) {
          return JSON.stringify({ error: `[TOOL_ERROR] Error executing ${tool}: ${(err as Error).message}` });
        }
      },
    };
    // Through the agent the files and the socket are made by the sandbox user itself: nothing to hand over.
    // An interrupt while the relay starts (the agent's link may be replaced first) answers at once;
    // a run dir made after that is removed.
    const staging = await unlessAborted(
      'rpcDir' in where
        ? stageInSharedDir(where.rpcDir, runName, files, serve, sandboxOwner(probe))
        : stageInSandbox(sandbox, where.relay, runName, files, serve),
      signal,
      'the script',
      (late) => late.remove(),
    ).catch((err: unknown) => {
      if (err instanceof InterruptedBeforeStartError) return undefined;
      throw err;
    });
    if (staging === undefined) return interruptedRun(meta.ranIn, probe.interpreter, meta.notices);
    const sandboxDir = staging.sandboxDir;
    try {
      const { env, droppedHermes, refusedPassthrough } = buildCodeEnv({
        base: probe.env,
        passthrough: request.envPassthrough,
        credentialNames: request.credentialEnv,
        socketPath: path.posix.join(sandboxDir, 'rpc.sock'),
        token,
        stubDir: sandboxDir,
        ...(request.timezone ? { timezone: request.timezone } : {}),
      });
      if (droppedHermes.length > 0) {
        meta.logger.debug(
          { dropped: droppedHermes },
          `execute_code: dropped ${droppedHermes.length} non-allowlisted HERMES_* var(s); ` +
            'add them to terminal.env_passthrough to pass them',
        );
      }
      if (refusedPassthrough.length > 0) {
        meta.logger.warn({ refused: refusedPassthrough }, 'execute_code: provider credentials are never passed through');
      }

      const stdout = new StdoutCapture(request.maxStdoutBytes);
      const stderrPath = path.posix.join(sandboxDir, 'stderr');
      const result = await sandbox.exec({
        script: buildLauncherScript({
          dir: meta.mode === 'project' ? probe.cwd || sandboxDir : sandboxDir,
          interpreter: probe.interpreter,
          scriptPath: path.posix.join(sandboxDir, 'script.py'),
          stderrPath,
          maxStderrBytes: request.maxStderrBytes,
        }),
        stdin: encodeEnvRecords(env),
        timeoutMs: request.timeoutMs,
        signal,
        killGraceMs: this.#killGraceMs,
        onOutput: (chunk) => stdout.push(chunk),
      });
      await staging.closeServer();
      // A limit that killed the script (out of memory, too many processes) is reported with its result.
      meta.notices.push(...(sandbox.takeNotices?.() ?? []));
      const stderrBytes = await staging.readHead('stderr', request.maxStderrBytes);
      const outcome: TaskCodeRunResult = {
        stdout: stdout.text(),
        stderr: decodeStderrHead(stderrBytes, request.maxStderrBytes),
        exitCode: result.exitCode,
        timedOut: result.timedOut,
        interrupted: result.interrupted,
        ranIn: meta.ranIn,
        interpreter: probe.interpreter,
        notices: meta.notices,
      };
      meta.logger.info(
        {
          ranIn: meta.ranIn,
          interpreter: probe.interpreter,
          mode: meta.mode,
          ...(meta.mode !== request.mode ? { configuredMode: request.mode } : {}),
          tools: request.allowedTools,
          exitCode: result.exitCode,
          timedOut: result.timedOut,
          interrupted: result.interrupted,
          stdoutBytes: stdout.totalBytes,
          durationMs: Math.round(performance.now() - startedMs),
        },
        'execute_code script finished',
      );
      return outcome;
    } finally {
      await staging.remove().catch((err: unknown) =>
        meta.logger.warn({ err, dir: sandboxDir }, 'could not remove the execute_code run dir'),
      );
    }
  }

  /**
   * Runs the probe where the script will run; project mode loads the task's
   * shell state first. The result depends only on the environment's own
   * variables and, in project mode, the task's shell snapshot and cwd: the
   * runner saves each command's state to a new file, so an unchanged snapshot
   * path means no command changed the state since. Then the last probe is
   * reused, which saves a process start on every execute_code call after the
   * first (a fork and exec of bash cost 6-10 ms on the 2-core machines here).
   * What the cache cannot see: a virtualenv removed or repaired by other means
   * than a command (a script's own subprocess, write_file) between two runs.
   * A removed one then fails the launcher with its path in the error; the next
   * command through terminal refreshes the probe.
   */
  async #probe(target: RunTarget, mode: CodeMode): Promise<ProbeResult | 'interrupted'> {
    const key =
      mode === 'project' && target.runner ? `project\0${target.runner.snapshotPath}\0${target.runner.cwd}` : 'strict';
    const cached = this.#probes.get(target.env);
    if (cached?.key === key) return cached.probe;
    const probe = await this.#runProbe(target, mode);
    if (probe !== 'interrupted') this.#probes.set(target.env, { key, probe });
    return probe;
  }

  async #runProbe(target: RunTarget, mode: CodeMode): Promise<ProbeResult | 'interrupted'> {
    const { env, signal } = target;
    const nonce = `berth-probe-${randomBytes(8).toString('hex')}`;
    const chunks: Buffer[] = [];
    let kept = 0;
    let overflow = false;
    const onOutput = (chunk: Buffer) => {
      if (kept + chunk.length > MAX_PROBE_OUTPUT_BYTES) {
        overflow = true;
        return;
      }
      chunks.push(chunk);
      kept += chunk.length;
    };
    const script = buildProbeScript(nonce, mode);
    const result =
      mode === 'project' && target.runner
        ? await target.runner.run({ command: script, timeoutMs: PROBE_TIMEOUT_MS, stateless: true, signal, onOutput })
        : await env.exec({ script, timeoutMs: PROBE_TIMEOUT_MS, signal, onOutput });
    if (result.interrupted) return 'interrupted';
    const output = Buffer.concat(chunks).toString('utf8');
    const probe = overflow ? undefined : parseProbeOutput(output, nonce);
    if (probe === undefined) {
      const detail = overflow
        ? `its environment is larger than ${MAX_PROBE_OUTPUT_BYTES} bytes`
        : result.timedOut
          ? `it timed out after ${PROBE_TIMEOUT_MS / 1000}s`
          : `exit code ${result.exitCode}: ${output.replaceAll('\0', ' ').trim().slice(0, 500) || 'no output'}`;
      throw new FailedPreconditionError(`cannot prepare execute_code in ${env.description}: the environment probe failed (${detail})`);
    }
    return probe;
  }
}

/** The result of a script interrupted before it started: nothing ran, nothing was printed. */
function interruptedRun(ranIn: string, interpreter: string, notices: string[]): TaskCodeRunResult {
  return { stdout: '', stderr: '', exitCode: 130, timedOut: false, interrupted: true, ranIn, interpreter, notices };
}

/** Where a run's files and socket go: a directory shared with the executor, or inside the sandbox by its agent. */
type Staging = { readonly rpcDir: { readonly hostPath: string; readonly sandboxPath: string } } | { readonly relay: RpcRelay };

/** Where one script runs: an environment, and how its run dir and socket are made. */
interface RunTarget {
  readonly env: BackendEnvironment;
  readonly staging: Staging;
  /** The task's shell state, for project mode; absent where it does not apply (a code container). */
  readonly runner?: ShellStateRunner;
  /** Aborted by `interrupt` for the task, or by the caller. */
  readonly signal: AbortSignal;
}

/**
 * The sandbox user, when it differs from the executor's: the run dir and the
 * socket must be theirs (mode 0600 admits nobody else). Only root can hand
 * them over; otherwise the script could not even reach its socket, so say so.
 */
export function sandboxOwner(probe: Pick<ProbeResult, 'uid' | 'gid'>, ourUid = process.getuid?.()): { uid: number; gid: number } | undefined {
  if (ourUid === undefined || probe.uid === undefined || probe.uid === ourUid) return undefined;
  if (ourUid !== 0) {
    throw new FailedPreconditionError(
      `execute_code cannot give its socket to the sandbox user (uid ${probe.uid}): the executor runs as uid ${ourUid} ` +
        'and only root can change a file\'s owner. Run the executor as root, or the sandbox as the executor\'s user.',
    );
  }
  return { uid: probe.uid, gid: probe.gid ?? probe.uid };
}
