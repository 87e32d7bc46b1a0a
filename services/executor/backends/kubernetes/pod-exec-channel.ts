/**
 * The per-command channel into a task's pod, for images that cannot run the
 * exec agent (no python3): every command and file operation is a `pods/exec`
 * of its own (pod-exec.ts), as `docker exec` is on the docker backend and
 * `apptainer exec` on singularity.
 *
 * A command runs under `setsid` and prints its process group id first
 * (shared/group-commands.ts), so a timeout, interrupt or kill is a second
 * exec that signals the whole group inside the pod (shared/process-group.ts):
 * closing the WebSocket would not stop it, on a cluster the exec outlives
 * its client. `pods/exec` takes neither a directory nor environment
 * variables, so the script starts with a `cd` and `export`s. Files go
 * through the same small shell helpers as singularity's (binary-safe over
 * stdin and stdout, bounded).
 */
import { randomBytes } from 'node:crypto';
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { shellQuote } from '../../../common/shell/quote.js';
import { fileTooLargeError, type FileOp } from '../shared/file-errors.js';
import { MAX_READ_FILE_BYTES } from '../shared/file-limits.js';
import {
  FILE_EXIT_ERRNO,
  groupCommand,
  pgidLinePrefix,
  readFileCommand,
  statCommand,
  writeFileCommand,
} from '../shared/group-commands.js';
import { PgidLineFilter } from '../shared/pgid-line-filter.js';
import { killGroupArgv } from '../shared/process-group.js';
import { endsLine, ptyEof } from '../shared/pty-input.js';
import {
  SandboxLostError,
  fileErrnoError,
  type ProcessExit,
  type SandboxChannel,
  type SandboxProcess,
  type SandboxStat,
  type SpawnOptions,
} from '../shared/sandbox-channel.js';
import type { KubeApi } from './kube-api.js';
import { PodExecProcess } from './pod-exec.js';

/** stderr kept from a file helper: a message, not a stream. */
const HELPER_MAX_STDERR_BYTES = 64 * 1024;

/** A name for environment variables the script may be given (anything else is refused, not spliced). */
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

interface HelperResult {
  readonly code: number | null;
  readonly stdout: Buffer;
  readonly stderr: string;
}

/** The script with the directory and variables `pods/exec` cannot set itself. */
export function scriptWithContext(options: Pick<SpawnOptions, 'script' | 'cwd' | 'env'>): string {
  const lines = [`cd -- ${shellQuote(options.cwd)} 2>/dev/null || cd /`];
  for (const [name, value] of Object.entries(options.env ?? {})) {
    if (!ENV_NAME.test(name)) throw new FailedPreconditionError(`environment variable name ${JSON.stringify(name)} is not a shell name`);
    lines.push(`export ${name}=${shellQuote(value)}`);
  }
  return `${lines.join('\n')}\n${options.script}`;
}

export class PodExecChannel implements SandboxChannel {
  readonly kind = 'pod-exec' as const;
  readonly #api: KubeApi;
  readonly #pod: string;
  readonly #description: string;
  readonly #logger: Logger | undefined;
  readonly #running = new Set<PodExecProcess>();
  #lost = false;
  #closed = false;

  constructor(api: KubeApi, pod: string, description: string, logger?: Logger) {
    this.#api = api;
    this.#pod = pod;
    this.#description = description;
    this.#logger = logger;
  }

  get isLost(): boolean {
    return this.#lost || this.#closed;
  }

  close(): void {
    this.#closed = true;
    for (const proc of this.#running) proc.kill();
    this.#running.clear();
  }

  /**
   * After a dropped stream: true when the pod still runs commands (the
   * channel is used on; what ran on the dropped streams was stopped), false
   * when it is gone.
   */
  async recover(): Promise<boolean> {
    if (this.isLost) return false;
    try {
      return (await this.#helper(['true'])).code === 0;
    } catch {
      return false;
    }
  }

  /** Lets go of every open exec stream, as a broken connection would (tests). */
  dropStreams(): void {
    for (const proc of this.#running) proc.abandon();
  }

  /**
   * Starts `command` in the pod; `exited` resolves with its exit once the
   * exec closed and its output was read, and rejects when it could not
   * start or its stream dropped (a gone pod marks the channel lost).
   */
  #start(command: readonly string[]): { proc: PodExecProcess; exited: Promise<ProcessExit> } {
    if (this.isLost) throw new SandboxLostError(`${this.#description} is gone`);
    const proc = new PodExecProcess(this.#api, this.#pod, command);
    this.#running.add(proc);
    proc.stdin.on('error', () => undefined);
    const failed = new Promise<never>((_resolve, reject) => {
      proc.once('error', () => {
        this.#running.delete(proc);
        const err = proc.startError!;
        // 404 (pod gone) and 400 (its container not running) are the pod's end; Forbidden and the rest are said as they are.
        if (err instanceof UnavailableError && /is gone|cannot be exec'd into/.test(err.message)) {
          this.#lost = true;
          reject(new SandboxLostError(err.message, { cause: err }));
        } else {
          reject(err);
        }
      });
    });
    const ended = (s: NodeJS.ReadableStream & { readableEnded: boolean }) =>
      new Promise<void>((resolve) => (s.readableEnded ? resolve() : s.once('end', () => resolve())));
    const closed = new Promise<number | null>((resolve) =>
      proc.once('close', (code: number | null) => {
        this.#running.delete(proc);
        resolve(code);
      }),
    );
    const done = Promise.all([closed, ended(proc.stdout), ended(proc.stderr)]).then(([code]): ProcessExit => {
      if (code === null) {
        // No exit status: the stream dropped (or was let go of). Whether the pod is still there, recover() asks.
        if (this.#closed) throw new SandboxLostError(`the channel to ${this.#description} was closed`);
        throw new SandboxLostError(`the exec stream to ${this.#description} dropped while the command ran`);
      }
      return { code, signal: null };
    });
    const exited = Promise.race([failed, done]);
    exited.catch(() => undefined);
    return { proc, exited };
  }

  async spawn(options: SpawnOptions): Promise<SandboxProcess> {
    const nonce = randomBytes(8).toString('hex');
    const pty = options.pty ?? false;
    const filter = new PgidLineFilter(pgidLinePrefix(nonce));
    let resolvePid!: (pid: number) => void;
    const pidKnown = new Promise<number>((resolve) => (resolvePid = resolve));
    const started = this.#start(groupCommand(scriptWithContext(options), nonce, pty));
    const { proc } = started;
    proc.stdout.on('data', (chunk: Buffer) => options.onOutput(filter.push(chunk, resolvePid)));
    proc.stderr.on('data', (chunk: Buffer) => options.onOutput(chunk));
    const exited = started.exited.catch(async (err: unknown) => {
      // The stream dropped under the command: on a cluster the exec outlives its client, so its group is stopped here.
      const pgid = filter.pgid;
      if (err instanceof SandboxLostError && !this.isLost && pgid !== undefined && pgid > 1) await this.#killGroup(pgid, 0);
      throw err;
    });
    exited.catch(() => undefined);
    exited.then(
      () => resolvePid(-1),
      () => resolvePid(-1),
    );
    let stdinOpen = true;
    let atLineStart = true;
    const write = (data: Uint8Array | string) =>
      new Promise<void>((resolve, reject) => {
        if (!stdinOpen || proc.stdin.writableEnded || proc.stdin.destroyed) {
          reject(new FailedPreconditionError('stdin is closed'));
          return;
        }
        const bytes = Buffer.from(data);
        atLineStart = endsLine(bytes, atLineStart);
        proc.stdin.write(bytes, (err) => (err ? reject(new FailedPreconditionError(`cannot write to stdin: ${err.message}`)) : resolve()));
      });
    const closeStdin = async () => {
      if (!stdinOpen) return;
      stdinOpen = false;
      // A terminal (script(1)) takes ^D as the end of input; a plain exec takes a half-close.
      if (pty) proc.stdin.write(ptyEof(atLineStart));
      else proc.stdin.end();
    };
    if (options.stdin !== undefined && Buffer.byteLength(options.stdin) > 0) await write(options.stdin).catch(() => undefined);
    if (!options.keepStdin) await closeStdin();
    const pid = await pidKnown;
    // Not started at all (the pod is gone, exec refused): the caller learns it here, not from `exited`.
    if (pid < 0 && filter.pgid === undefined) await exited;
    return {
      pid,
      exited,
      write,
      closeStdin,
      kill: async (graceMs) => {
        if (pid > 1) await this.#killGroup(pid, graceMs);
      },
    };
  }

  /** SIGTERM to the group in the pod, SIGKILL after `graceMs`; failures are logged. */
  async #killGroup(pgid: number, graceMs: number): Promise<void> {
    const r = await this.#helper(killGroupArgv(pgid, graceMs)).catch((err: unknown) => {
      this.#logger?.warn({ err: (err as Error).message, pgid }, 'killing a process group in the pod failed');
      return undefined;
    });
    if (r && r.code !== 0) this.#logger?.warn({ pgid, stderr: r.stderr }, 'kill command failed');
  }

  /** Runs a helper to completion with `stdin`; its stdout up to the read cap plus one byte, a bounded stderr. */
  async #helper(command: readonly string[], stdin?: Uint8Array): Promise<HelperResult> {
    const { proc, exited } = this.#start(command);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const kept = { out: 0, err: 0 };
    const keep = (which: 'out' | 'err', into: Buffer[], max: number) => (chunk: Buffer) => {
      const room = max - kept[which];
      if (room <= 0) return;
      const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
      kept[which] += part.length;
      into.push(part);
    };
    proc.stdout.on('data', keep('out', out, MAX_READ_FILE_BYTES + 1));
    proc.stderr.on('data', keep('err', err, HELPER_MAX_STDERR_BYTES));
    proc.stdin.end(stdin && stdin.length > 0 ? Buffer.from(stdin) : undefined);
    const { code } = await exited;
    return { code, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8').trim() };
  }

  async readFile(absPath: string): Promise<Buffer> {
    const r = await this.#helper(readFileCommand(absPath, MAX_READ_FILE_BYTES));
    if (r.code !== 0) throw this.#fileError(r, absPath, 'read');
    if (r.stdout.length > MAX_READ_FILE_BYTES) throw fileTooLargeError(absPath, r.stdout.length);
    return r.stdout;
  }

  async writeFile(absPath: string, data: Uint8Array): Promise<void> {
    const r = await this.#helper(writeFileCommand(absPath), data);
    if (r.code !== 0) throw this.#fileError(r, absPath, 'write');
  }

  async stat(absPath: string): Promise<SandboxStat> {
    const r = await this.#helper(statCommand(absPath));
    const out = r.stdout.toString('utf8').trim();
    if (r.code !== 0 || out === '') throw this.#fileError(r, absPath, 'stat');
    if (out === 'missing') return { exists: false, isDirectory: false, sizeBytes: 0, uid: -1 };
    const [kind, size] = out.split(' ');
    return { exists: true, isDirectory: kind === 'dir', sizeBytes: Number(size) || 0, uid: -1 };
  }

  #fileError(r: HelperResult, absPath: string, op: FileOp): Error {
    const errno = r.code === null ? undefined : FILE_EXIT_ERRNO[r.code];
    if (errno === undefined) return new UnavailableError(`cannot ${op} ${absPath} in ${this.#description} (exit ${r.code}): ${r.stderr}`);
    return fileErrnoError(errno, absPath, r.stderr || `exit status ${r.code}`, op);
  }
}
