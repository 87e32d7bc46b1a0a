/**
 * Runs execute_code scripts in a task's own environment (spec §6, DESIGN
 * "execute_code"), over any backend that shares a directory with its
 * sandbox (`rpcDir`):
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
 * Backends without an rpcDir fail with a clear error; nothing falls back to
 * running the script somewhere else.
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { FailedPreconditionError, InvalidArgumentError } from '../../common/errors.js';
import type { Logger } from '../../common/logging.js';
import type { TaskCodeRunRequest, TaskCodeRunResult } from '../../dispatcher/task-client.js';
import type { TaskKey } from '../backend.js';
import type { ForegroundTask, TaskEnvironments } from '../task-environment.js';
import { buildCodeEnv, encodeEnvRecords } from './code-env.js';
import { buildLauncherScript, buildProbeScript, parseProbeOutput, type ProbeResult } from './code-launch.js';
import { decodeStderrHead, StdoutCapture } from './code-output.js';
import { RpcSocketServer } from './rpc-socket-server.js';
import { RunDir } from './run-dir.js';

/** Between SIGTERM and SIGKILL of a script's process group (spec §6). */
export const CODE_KILL_GRACE_MS = 5000;

const PROBE_TIMEOUT_MS = 30_000;
/** The probe prints the environment; more than this is not an environment we can pass on. */
const MAX_PROBE_OUTPUT_BYTES = 4 * 1024 * 1024;

/** The error for a backend that has no directory to share a socket through. */
export function noRpcDirMessage(backend: string): string {
  return (
    `execute_code cannot run on the ${backend} backend: it has no directory shared between the executor and the ` +
    'sandbox for the script\'s tool socket. Running execute_code scripts in a per-task code container for the ssh ' +
    'and singularity backends is a later step; until then use the local or docker backend for execute_code.'
  );
}

export const HOST_SUBPROCESS_REFUSED =
  'execute_code on the local backend runs the script as a plain subprocess on the executor host, which is allowed ' +
  'only in single-user mode (no tenants configured, or allow_local_multi_tenant: true). Use the docker backend ' +
  'for multi-tenant execute_code.';

export const HOST_SUBPROCESS_NOTICE =
  'The script ran as a subprocess on the executor host (local backend, single-user mode), not in a container.';

export interface CodeRunnerOptions {
  readonly logger: Logger;
  /** Default {@link CODE_KILL_GRACE_MS}; tests shorten it. */
  readonly killGraceMs?: number;
}

export class CodeRunner {
  readonly #environments: TaskEnvironments;
  readonly #logger: Logger;
  readonly #killGraceMs: number;

  constructor(environments: TaskEnvironments, options: CodeRunnerOptions) {
    this.#environments = environments;
    this.#logger = options.logger;
    this.#killGraceMs = options.killGraceMs ?? CODE_KILL_GRACE_MS;
  }

  /** Runs one script to the end (exit, timeout or interrupt). Setup failures reject with domain errors. */
  async run(key: TaskKey, request: TaskCodeRunRequest): Promise<TaskCodeRunResult> {
    if (request.code.trim() === '') throw new InvalidArgumentError('code must not be empty');
    if (request.timeoutMs <= 0) throw new InvalidArgumentError('timeout_ms must be positive');
    const backend = this.#environments.capabilities.name;
    const hostSubprocess = backend === 'local';
    return this.#environments.withForeground(
      key,
      async (task) => {
        if (task.env.rpcDir === undefined) throw new FailedPreconditionError(noRpcDirMessage(backend));
        if (hostSubprocess && !request.allowHostSubprocess) throw new FailedPreconditionError(HOST_SUBPROCESS_REFUSED);
        const logger = this.#logger.child({ tenant: key.tenant, task: key.taskId, tool: 'execute_code' });
        const notices = [...task.notices];
        if (hostSubprocess) notices.push(HOST_SUBPROCESS_NOTICE);
        const ranIn = hostSubprocess
          ? `a subprocess on the executor host (local backend, single-user mode; ${task.env.description})`
          : `the task's ${backend} environment (${task.env.description})`;
        return this.#run(task, task.env.rpcDir, request, { logger, notices, ranIn });
      },
      request.signal,
    );
  }

  async #run(
    task: ForegroundTask,
    rpcDir: { readonly hostPath: string; readonly sandboxPath: string },
    request: TaskCodeRunRequest,
    meta: { logger: Logger; notices: string[]; ranIn: string },
  ): Promise<TaskCodeRunResult> {
    const startedMs = performance.now();
    const interruptedResult = (interpreter: string): TaskCodeRunResult => ({
      stdout: '',
      stderr: '',
      exitCode: 130,
      timedOut: false,
      interrupted: true,
      ranIn: meta.ranIn,
      interpreter,
      notices: meta.notices,
    });

    const probe = await this.#probe(task, request.mode);
    if (probe === 'interrupted') return interruptedResult('');

    const runName = `code-${randomBytes(8).toString('hex')}`;
    const sandboxDir = path.posix.join(rpcDir.sandboxPath, runName);
    const owner = sandboxOwner(probe);
    const token = randomBytes(32).toString('hex');
    const dir = await RunDir.create(rpcDir.hostPath, runName);
    let server: RpcSocketServer | undefined;
    try {
      await dir.writeNew('hermes_tools.py', request.stubModule);
      await dir.writeNew('script.py', request.code);
      server = await RpcSocketServer.listen({
        path: dir.entry('rpc.sock'),
        token,
        ...(owner ? { owner } : {}),
        logger: meta.logger,
        onRequest: async ({ tool, args }) => {
          try {
            return await request.onToolCall({ tool, argsJson: JSON.stringify(args) });
          } catch (err) {
            return JSON.stringify({ error: `[TOOL_ERROR] Error executing ${tool}: ${(err as Error).message}` });
          }
        },
      });

      // Only now may the sandbox user touch the dir: everything in it is ours until here.
      if (owner) await dir.handTo(owner, ['hermes_tools.py', 'script.py']);

      const { env, droppedHermes, refusedPassthrough } = buildCodeEnv({
        base: probe.env,
        passthrough: request.envPassthrough,
        credentialNames: request.credentialEnv,
        socketPath: path.posix.join(sandboxDir, 'rpc.sock'),
        token,
        stubDir: sandboxDir,
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
      const result = await task.env.exec({
        script: buildLauncherScript({
          dir: request.mode === 'project' ? probe.cwd || sandboxDir : sandboxDir,
          interpreter: probe.interpreter,
          scriptPath: path.posix.join(sandboxDir, 'script.py'),
          stderrPath,
          maxStderrBytes: request.maxStderrBytes,
        }),
        stdin: encodeEnvRecords(env),
        timeoutMs: request.timeoutMs,
        signal: task.signal,
        killGraceMs: this.#killGraceMs,
        onOutput: (chunk) => stdout.push(chunk),
      });
      await server.close();
      // A limit that killed the script (out of memory, too many processes) is reported with its result.
      meta.notices.push(...(task.env.takeNotices?.() ?? []));
      const stderrBytes = await dir.readHead('stderr', request.maxStderrBytes);
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
          mode: request.mode,
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
      await server?.close();
      await dir.remove().catch((err: unknown) =>
        meta.logger.warn({ err, dir: dir.hostPath }, 'could not remove the execute_code run dir'),
      );
    }
  }

  /** Runs the probe where the script will run; project mode loads the task's shell state first. */
  async #probe(task: ForegroundTask, mode: 'project' | 'strict'): Promise<ProbeResult | 'interrupted'> {
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
      mode === 'project'
        ? await task.runner.run({ command: script, timeoutMs: PROBE_TIMEOUT_MS, stateless: true, signal: task.signal, onOutput })
        : await task.env.exec({ script, timeoutMs: PROBE_TIMEOUT_MS, signal: task.signal, onOutput });
    if (result.interrupted) return 'interrupted';
    const output = Buffer.concat(chunks).toString('utf8');
    const probe = overflow ? undefined : parseProbeOutput(output, nonce);
    if (probe === undefined) {
      const detail = overflow
        ? `its environment is larger than ${MAX_PROBE_OUTPUT_BYTES} bytes`
        : result.timedOut
          ? `it timed out after ${PROBE_TIMEOUT_MS / 1000}s`
          : `exit code ${result.exitCode}: ${output.replaceAll('\0', ' ').trim().slice(0, 500) || 'no output'}`;
      throw new FailedPreconditionError(`cannot prepare execute_code in ${task.env.description}: the environment probe failed (${detail})`);
    }
    return probe;
  }
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
