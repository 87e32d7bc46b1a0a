/**
 * The fallback channel for images that cannot run the exec agent (no
 * python3): every operation is a `docker exec` through dockerode.
 *
 * Reading an exec follows testcontainers' DockerContainerClient.exec: demux
 * the stream, wait until it ended, then `exec.inspect()` for the exit code,
 * so no output is lost. Killing the client side of an exec would leave the
 * process running in the container, so each command's wrapper first prints
 * its pid (docker exec makes it a session and group leader) and a kill runs
 * `kill -TERM -- -PGID` (then SIGKILL) inside the container.
 */
import type { Duplex } from 'node:stream';
import type Dockerode from 'dockerode';
import { FailedPreconditionError } from '../../../common/errors.js';
import { fileTooLargeError } from '../shared/file-errors.js';
import { MAX_READ_FILE_BYTES } from '../shared/file-limits.js';
import { deliverOutput } from '../shared/guards.js';
import { atomicWriteScript } from '../shared/write-script.js';
import { endsLine, ptyEof } from '../shared/pty-input.js';
import { killGroupArgv } from '../shared/process-group.js';
import type { Logger } from '../../../common/logging.js';
import { dockerError, isConflict, isNotFound } from './docker-errors.js';
import { DockerStreamDemuxer } from './docker-stream-demuxer.js';
import type { TaskIdentity } from './task-identity.js';
import {
  SandboxLostError,
  fileErrnoError,
  type ProcessExit,
  type SandboxChannel,
  type SandboxProcess,
  type SandboxStat,
  type SpawnOptions,
} from '../shared/sandbox-channel.js';

/** Prints the process group id (its own pid) on the first stdout line, then becomes the command. */
export const EXEC_WRAPPER = `printf '%s\\n' "$$"; exec bash -c "$1"`;

/** Exit codes of the file helper scripts, mapped to errno names. */
const FILE_EXIT_ERRNO: Readonly<Record<number, string>> = {
  66: 'ENOENT',
  67: 'EISDIR',
  68: 'EACCES',
  69: 'ENOTDIR',
  70: 'ENOTREG',
  71: 'EFBIG',
};

/**
 * Regular files only (stderr names what it is otherwise), refused from their
 * size over the cap, and never more than the cap plus one byte read.
 */
const READ_SCRIPT =
  '[ -e "$1" ] || exit 66; [ -d "$1" ] && exit 67; [ -f "$1" ] || { stat -L -c %F -- "$1" >&2; exit 70; }; ' +
  `[ -r "$1" ] || exit 68; s=$(stat -L -c %s -- "$1"); [ "$s" -le ${MAX_READ_FILE_BYTES} ] || { echo "$s" >&2; exit 71; }; ` +
  `exec head -c ${MAX_READ_FILE_BYTES + 1} -- "$1"`;
/** Atomic: a temp file beside the file, renamed over it (write-script.ts). */
const WRITE_SCRIPT = atomicWriteScript({ isDirectory: 67, notDirectory: 69, denied: 68, notRegular: 70 });
/** stderr kept from a helper: a message, not a stream. */
const RUN_MAX_STDERR_BYTES = 64 * 1024;
const STAT_SCRIPT = 'if [ -e "$1" ]; then stat -L -c "%F|%s|%u" -- "$1"; else echo missing; fi';

interface RunResult {
  readonly code: number;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
}

export class DockerExecChannel implements SandboxChannel {
  readonly kind = 'docker-exec' as const;
  readonly #container: Dockerode.Container;
  readonly #daemon: string;
  readonly #description: string;
  readonly #logger: Logger | undefined;
  readonly #user: string;
  #lost = false;
  #closed = false;
  readonly #streams = new Set<Duplex>();

  /** Every exec runs as `identity`, the task's uid and gid (the container itself starts as root). */
  constructor(container: Dockerode.Container, description: string, identity: TaskIdentity, daemon: string, logger?: Logger) {
    this.#container = container;
    this.#user = `${identity.uid}:${identity.gid}`;
    this.#description = description;
    this.#daemon = daemon;
    this.#logger = logger;
  }

  get isLost(): boolean {
    return this.#lost || this.#closed;
  }

  close(): void {
    this.#closed = true;
    for (const stream of this.#streams) stream.destroy();
    this.#streams.clear();
  }

  /** Creates and starts an exec; a vanished or stopped container marks the channel lost. */
  async #start(
    cmd: string[],
    options: { env?: Readonly<Record<string, string>>; cwd?: string; tty?: boolean },
  ): Promise<{ exec: Dockerode.Exec; stream: Duplex }> {
    if (this.isLost) throw new SandboxLostError(`the container ${this.#description} is gone`);
    try {
      const exec = await this.#container.exec({
        Cmd: cmd,
        AttachStdin: true,
        AttachStdout: true,
        AttachStderr: true,
        Tty: options.tty ?? false,
        User: this.#user,
        ...(options.env ? { Env: Object.entries(options.env).map(([k, v]) => `${k}=${v}`) } : {}),
        ...(options.cwd ? { WorkingDir: options.cwd } : {}),
      });
      const stream = (await exec.start({ hijack: true, stdin: true, Tty: options.tty ?? false })) as Duplex;
      this.#streams.add(stream);
      stream.once('close', () => this.#streams.delete(stream));
      return { exec, stream };
    } catch (err) {
      if (isNotFound(err) || isConflict(err)) {
        this.#lost = true;
        throw new SandboxLostError(`the container ${this.#description} is gone or stopped`, { cause: err });
      }
      throw dockerError(err, `running docker exec in ${this.#description}`, this.#daemon);
    }
  }

  /** Waits for the stream to end, then asks Docker for the exit code. */
  async #exitCode(exec: Dockerode.Exec, stream: Duplex): Promise<number> {
    await new Promise<void>((resolve) => {
      if (stream.readableEnded || stream.destroyed) resolve();
      else {
        stream.once('end', resolve);
        stream.once('close', resolve);
        stream.once('error', () => resolve());
      }
    });
    for (let attempt = 0; attempt < 40; attempt++) {
      let info: Dockerode.ExecInspectInfo;
      try {
        info = await exec.inspect();
      } catch (err) {
        if (isNotFound(err)) {
          this.#lost = true;
          throw new SandboxLostError(`the container ${this.#description} went away during docker exec`, { cause: err });
        }
        throw dockerError(err, `inspecting an exec in ${this.#description}`, this.#daemon);
      }
      if (!info.Running && info.ExitCode !== null && info.ExitCode !== undefined) return info.ExitCode;
      await new Promise((r) => setTimeout(r, 50));
    }
    return 1;
  }

  /** Runs a helper command to completion, collecting stdout and stderr apart. */
  async #run(cmd: string[], stdin?: Uint8Array): Promise<RunResult> {
    const { exec, stream } = await this.#start(cmd, {});
    const demux = new DockerStreamDemuxer();
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    // The helpers print at most a file (the read cap plus one byte) and a line of stderr; whatever a
    // tampered-with container sends beyond that is dropped, not kept.
    const kept = { stdout: 0, stderr: 0 };
    stream.on('data', (chunk: Buffer) => {
      for (const part of demux.push(chunk)) {
        const which = part.stream === 'stderr' ? 'stderr' : 'stdout';
        const room = (which === 'stderr' ? RUN_MAX_STDERR_BYTES : MAX_READ_FILE_BYTES + 1) - kept[which];
        if (room <= 0) continue;
        const data = part.data.length > room ? part.data.subarray(0, room) : part.data;
        kept[which] += data.length;
        (which === 'stderr' ? err : out).push(data);
      }
    });
    stream.end(stdin && stdin.length > 0 ? Buffer.from(stdin) : undefined);
    const code = await this.#exitCode(exec, stream);
    return { code, stdout: Buffer.concat(out), stderr: Buffer.concat(err) };
  }

  async spawn(options: SpawnOptions): Promise<SandboxProcess> {
    const pty = options.pty ?? false;
    const { exec, stream } = await this.#start(['bash', '-c', EXEC_WRAPPER, 'berth-exec', options.script], {
      ...(options.env ? { env: options.env } : {}),
      cwd: options.cwd,
      tty: pty,
    });
    const demux = new DockerStreamDemuxer();
    let header = Buffer.alloc(0);
    let resolvePid!: (pid: number) => void;
    const pidKnown = new Promise<number>((resolve) => (resolvePid = resolve));
    let pid = 0;
    const emit = (data: Buffer) => deliverOutput(options.onOutput, data, this.#logger);
    const onStdout = (data: Buffer) => {
      if (pid > 0) {
        emit(data);
        return;
      }
      header = Buffer.concat([header, data]);
      const nl = header.indexOf(0x0a);
      if (nl < 0) return;
      pid = Number(header.subarray(0, nl).toString('latin1').trim()) || -1;
      resolvePid(pid);
      emit(header.subarray(nl + 1));
    };
    stream.on('data', (chunk: Buffer) => {
      if (pty) onStdout(chunk);
      else {
        for (const part of demux.push(chunk)) {
          if (part.stream === 'stderr') emit(part.data);
          else onStdout(part.data);
        }
      }
    });
    stream.on('error', (err) => this.#logger?.debug({ err }, 'docker exec stream error'));
    const exited: Promise<ProcessExit> = this.#exitCode(exec, stream).then((code) => {
      resolvePid(-1);
      return { code, signal: null };
    });
    exited.catch(() => resolvePid(-1));
    let stdinOpen = true;
    const stdin = options.stdin === undefined ? undefined : Buffer.from(options.stdin);
    if (stdin && stdin.length > 0) stream.write(stdin);
    if (!options.keepStdin) {
      stdinOpen = false;
      // A PTY takes ^D as end of input; a plain exec takes a half-close.
      if (pty) stream.write(ptyEof(endsLine(stdin ?? Buffer.alloc(0))));
      else stream.end();
    }
    const knownPid = await pidKnown;
    return {
      pid: knownPid,
      exited,
      write: (data) =>
        new Promise<void>((resolve, reject) => {
          if (!stdinOpen || stream.writableEnded || stream.destroyed) {
            reject(new FailedPreconditionError('stdin is closed'));
            return;
          }
          stream.write(Buffer.from(data), (err) =>
            err ? reject(new FailedPreconditionError(`cannot write to stdin: ${err.message}`)) : resolve(),
          );
        }),
      closeStdin: async () => {
        if (!stdinOpen) return;
        stdinOpen = false;
        if (pty) stream.write('\x04');
        else stream.end();
      },
      kill: async (graceMs) => {
        if (knownPid <= 1) return;
        await this.#run(killGroupArgv(knownPid, graceMs)).catch(
          (err: unknown) => this.#logger?.warn({ err }, 'docker exec kill failed'),
        );
      },
    };
  }

  async readFile(absPath: string): Promise<Buffer> {
    const r = await this.#run(['bash', '-c', READ_SCRIPT, 'berth-read', absPath]);
    if (r.code !== 0) throw this.#fileError(r, absPath, 'read');
    if (r.stdout.length > MAX_READ_FILE_BYTES) throw fileTooLargeError(absPath, r.stdout.length);
    return r.stdout;
  }

  async writeFile(absPath: string, data: Uint8Array): Promise<void> {
    const r = await this.#run(['bash', '-c', WRITE_SCRIPT, 'berth-write', absPath], data);
    if (r.code !== 0) throw this.#fileError(r, absPath, 'write');
  }

  async stat(absPath: string): Promise<SandboxStat> {
    const r = await this.#run(['bash', '-c', STAT_SCRIPT, 'berth-stat', absPath]);
    const line = r.stdout.toString('utf8').trim();
    if (r.code !== 0 || line === '') throw this.#fileError(r, absPath, 'stat');
    if (line === 'missing') return { exists: false, isDirectory: false, sizeBytes: 0, uid: -1 };
    const [type = '', size = '0', uid = '-1'] = line.split('|');
    return { exists: true, isDirectory: type === 'directory', sizeBytes: Number(size) || 0, uid: Number(uid) };
  }

  #fileError(r: RunResult, absPath: string, op: 'read' | 'write' | 'stat'): Error {
    const errno = FILE_EXIT_ERRNO[r.code] ?? 'EIO';
    return fileErrnoError(errno, absPath, r.stderr.toString('utf8').trim() || `exit status ${r.code}`, op);
  }
}
