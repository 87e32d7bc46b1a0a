/**
 * Background processes on an ssh host. They are started detached (`nohup
 * setsid`) and write log, pid and exit files in the task's directory, so they
 * survive a dropped connection; the executor polls those files over SFTP and
 * picks up where it left off after a reconnect.
 */
import { randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import type { SFTPWrapper } from 'ssh2';
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type { BackgroundHandle, BackgroundOptions } from '../../backend.js';
import { deliverExit, deliverOutput } from '../shared/guards.js';
import type { SshConnection } from './ssh-connection.js';
import { readAll } from './ssh-files.js';
import {
  backgroundPaths,
  buildBackgroundStartCommand,
  buildKillCommand,
  buildStdinCloseCommand,
  buildStdinWriteCommand,
  parseExitFile,
  type BackgroundPaths,
} from './ssh-scripts.js';

/** Runs a short command and collects its output; rejects only when it could not run. */
export async function runShort(
  connection: SshConnection,
  command: string,
  options: { readonly stdin?: Uint8Array | string; readonly control?: boolean; readonly timeoutMs?: number } = {},
): Promise<{ exitCode: number | null; signal?: string; output: string }> {
  const signal = AbortSignal.timeout(options.timeoutMs ?? 30_000);
  const { channel } = await connection.exec(command, { ...(options.control ? { control: true } : {}), signal });
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let exitCode: number | null = null;
    let exitSignal: string | undefined;
    const onTimeout = () => {
      channel.close();
      reject(new UnavailableError(`an ssh helper command on ${connection.endpoint.host} did not finish in time`));
    };
    signal.addEventListener('abort', onTimeout, { once: true });
    channel.on('data', (chunk: Buffer) => chunks.push(chunk));
    channel.stderr.on('data', (chunk: Buffer) => chunks.push(chunk));
    // The exit status comes with 'close': an 'exit' event may fire before our listener is attached.
    channel.once('close', (code?: number | null, signalName?: string) => {
      exitCode = typeof code === 'number' ? code : null;
      exitSignal = signalName;
      signal.removeEventListener('abort', onTimeout);
      resolve({ exitCode, ...(exitSignal ? { signal: exitSignal } : {}), output: Buffer.concat(chunks).toString('utf8') });
    });
    channel.end(options.stdin === undefined ? undefined : Buffer.from(options.stdin));
  });
}

/** What {@link runShort} answers. */
export interface ShortResult {
  readonly exitCode: number | null;
  readonly signal?: string;
  readonly output: string;
}

/** Runs a short helper command on the host: on its own channel (runShort), or through the task's exec agent. */
export type ShortRunner = (
  command: string,
  options?: { readonly stdin?: Uint8Array | string; readonly control?: boolean; readonly timeoutMs?: number },
) => Promise<ShortResult>;

export interface BackgroundHost {
  readonly connection: SshConnection;
  /** How helper commands run; {@link runShort} on the connection unless set. */
  readonly run?: ShortRunner;
  readonly logger: Logger | undefined;
  readonly killGraceMs: number;
  readonly pollIntervalMs: number;
}

const SFTP_NO_SUCH_FILE = 2;
/**
 * Log bytes read per poll: a process that floods its log costs the executor
 * this much per poll, not the whole log at once (the process registry keeps
 * only a bounded tail of it anyway).
 */
const DRAIN_MAX_BYTES = 4 * 1024 * 1024;
/** Extra drains once the process exited, for output it wrote just before. */
const DRAIN_ROUNDS_AT_EXIT = 4;
const MAX_BACKOFF_MS = 5000;

/** One background process: its files, how far its log was read, and its exit. */
class RemoteProcess {
  readonly paths: BackgroundPaths;
  readonly pid: number;
  readonly options: BackgroundOptions;
  offset = 0;
  logHandle: { sftp: SFTPWrapper; handle: Buffer } | undefined;
  killRequested = false;
  stdinClosed = false;
  exited = false;
  readonly done: Promise<void>;
  markDone: () => void = () => {};

  constructor(paths: BackgroundPaths, pid: number, options: BackgroundOptions) {
    this.paths = paths;
    this.pid = pid;
    this.options = options;
    this.done = new Promise<void>((resolve) => (this.markDone = resolve));
  }
}

/** The background processes of one environment and the loop that polls them. */
export class BackgroundProcesses {
  readonly #host: BackgroundHost;
  readonly #root: string;
  readonly #running = new Set<RemoteProcess>();
  #timer: NodeJS.Timeout | undefined;
  #delayMs: number;
  #polling: Promise<void> | undefined;
  #stopped = false;

  readonly #run: ShortRunner;

  constructor(host: BackgroundHost, root: string) {
    this.#host = host;
    this.#run = host.run ?? ((command, options) => runShort(host.connection, command, options));
    this.#root = root;
    this.#delayMs = host.pollIntervalMs;
  }

  get size(): number {
    return this.#running.size;
  }

  async start(options: BackgroundOptions, cwd: string): Promise<BackgroundHandle> {
    const paths = backgroundPaths(posix.join(this.#root, randomBytes(8).toString('hex')));
    const command = buildBackgroundStartCommand({
      paths,
      script: options.script,
      cwd,
      ...(options.env ? { env: options.env } : {}),
      ...(options.pty ? { pty: true } : {}),
    });
    const { exitCode, output } = await this.#run(command);
    const pid = /^pid:(\d+)$/m.exec(output)?.[1];
    if (exitCode !== 0 || pid === undefined) {
      throw new UnavailableError(`cannot start a background process on ${this.#host.connection.endpoint.host}: ${output.trim() || `exit ${exitCode}`}`);
    }
    const proc = new RemoteProcess(paths, Number(pid), options);
    this.#running.add(proc);
    this.#schedule(0);
    return {
      pid: proc.pid,
      write: (data) => this.#write(proc, data),
      closeStdin: () => this.#closeStdin(proc),
      kill: () => this.#kill(proc),
    };
  }

  /** Kills every running process (environment release). */
  async killAll(): Promise<void> {
    await Promise.all([...this.#running].map((p) => this.#kill(p).catch(() => undefined)));
  }

  /** Stops polling; processes not seen to exit get no exit report. */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
  }

  async #write(proc: RemoteProcess, data: string | Uint8Array): Promise<void> {
    if (proc.exited) throw new FailedPreconditionError('the process has exited');
    if (proc.stdinClosed) throw new FailedPreconditionError('stdin is closed');
    const { exitCode, output } = await this.#run(buildStdinWriteCommand(proc.paths), {
      stdin: data,
      timeoutMs: 20_000,
    });
    if (exitCode !== 0) {
      throw new FailedPreconditionError(`cannot write to stdin: ${output.trim() || (exitCode === 124 ? 'nobody reads it' : `exit ${exitCode}`)}`);
    }
  }

  async #closeStdin(proc: RemoteProcess): Promise<void> {
    if (proc.exited || proc.stdinClosed) return;
    proc.stdinClosed = true;
    await this.#run(buildStdinCloseCommand(proc.paths));
  }

  async #kill(proc: RemoteProcess): Promise<void> {
    if (proc.exited) return;
    proc.killRequested = true;
    await this.#run(buildKillCommand(proc.pid, this.#host.killGraceMs, proc.paths.exit), {
      control: true,
      timeoutMs: this.#host.killGraceMs + 30_000,
    });
    this.#schedule(0);
    // The exit shows up at the next poll; do not wait forever if the host went away.
    await Promise.race([proc.done, new Promise((r) => setTimeout(r, this.#host.pollIntervalMs * 4 + 5000).unref())]);
  }

  #schedule(delayMs: number): void {
    if (this.#stopped || this.#running.size === 0) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#polling ??= this.#pollAll().finally(() => {
        this.#polling = undefined;
        this.#schedule(this.#delayMs);
      });
    }, delayMs);
    // Polling must not keep the executor alive on its own.
    this.#timer.unref();
  }

  async #pollAll(): Promise<void> {
    try {
      const sftp = await this.#host.connection.sftp();
      await Promise.all([...this.#running].map((p) => this.#poll(sftp, p)));
      this.#delayMs = this.#host.pollIntervalMs;
    } catch (err) {
      // The host is unreachable or the connection dropped: back off, then try again (that reconnects).
      this.#delayMs = Math.min(MAX_BACKOFF_MS, this.#delayMs * 2);
      this.#host.logger?.debug({ err }, 'polling ssh background processes failed; retrying');
    }
  }

  async #poll(sftp: SFTPWrapper, proc: RemoteProcess): Promise<void> {
    if (proc.logHandle && proc.logHandle.sftp !== sftp) proc.logHandle = undefined; // from before a reconnect
    if (!proc.logHandle) {
      const handle = await new Promise<Buffer | undefined>((resolve, reject) =>
        sftp.open(proc.paths.log, 'r', (err, h) => {
          if (err && (err as { code?: unknown }).code === SFTP_NO_SUCH_FILE) resolve(undefined);
          else if (err) reject(err);
          else resolve(h);
        }),
      );
      if (!handle) return;
      proc.logHandle = { sftp, handle };
    }
    await this.#drain(sftp, proc);
    // A stat (one request) while running; the file is read only once it exists.
    const exists = await new Promise<boolean>((resolve, reject) =>
      sftp.stat(proc.paths.exit, (err) => {
        if (err && (err as { code?: unknown }).code === SFTP_NO_SUCH_FILE) resolve(false);
        else if (err) reject(err);
        else resolve(true);
      }),
    );
    if (!exists) return;
    const exitText = await new Promise<string>((resolve, reject) =>
      sftp.readFile(proc.paths.exit, (err, data) => (err ? reject(err) : resolve(data.toString('utf8')))),
    );
    const code = parseExitFile(exitText);
    if (code === undefined) return; // Being written; next time.
    // What the process wrote just before it exited; a flood beyond a few rounds is left unread.
    for (let round = 0; round < DRAIN_ROUNDS_AT_EXIT && (await this.#drain(sftp, proc)); round++);
    if (proc.logHandle) sftp.close(proc.logHandle.handle, () => undefined);
    proc.logHandle = undefined;
    this.#finish(proc, code);
  }

  /** Hands on what the log gained since the last drain, at most {@link DRAIN_MAX_BYTES}; true when more is left. */
  async #drain(sftp: SFTPWrapper, proc: RemoteProcess): Promise<boolean> {
    if (!proc.logHandle) return false;
    const data = await readAll(sftp, proc.logHandle.handle, proc.offset, DRAIN_MAX_BYTES);
    if (data.length === 0) return false;
    proc.offset += data.length;
    deliverOutput(proc.options.onOutput, data, this.#host.logger);
    return data.length >= DRAIN_MAX_BYTES;
  }

  #finish(proc: RemoteProcess, code: number): void {
    if (proc.exited) return;
    proc.exited = true;
    this.#running.delete(proc);
    // bash reports death by signal n as 128+n; a process we killed reports -n, as the local backend does.
    const reported = proc.killRequested && code > 128 ? -(code - 128) : code;
    deliverExit(proc.options.onExit, reported, this.#host.logger);
    proc.markDone();
  }
}
