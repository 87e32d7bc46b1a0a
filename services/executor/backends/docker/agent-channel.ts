/**
 * The executor's end of one exec agent connection: requests are framed and
 * multiplexed by id over the agent's Unix socket (see agent-protocol.ts).
 */
import type { Socket } from 'node:net';
import { FailedPreconditionError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type { FrameDecoder} from './agent-protocol.js';
import { FrameError, encodeFrame, type Frame, type FrameHeader } from './agent-protocol.js';
import {
  SandboxLostError,
  fileErrnoError,
  type ProcessExit,
  type SandboxChannel,
  type SandboxProcess,
  type SandboxStat,
  type SpawnOptions,
} from './sandbox-channel.js';

/** What the agent said when it connected. */
export interface AgentHello {
  readonly token: string;
  readonly version: number;
  readonly pid: number;
  readonly python: string;
}

/** An error reply from the agent. */
class AgentOpError extends Error {
  constructor(
    readonly errno: string,
    message: string,
  ) {
    super(message);
  }
}

interface Pending {
  readonly resolve: (frame: Frame) => void;
  readonly reject: (err: Error) => void;
}

interface ProcEntry {
  readonly onOutput: (chunk: Buffer) => void;
  readonly started: Pending;
  readonly exit: Pending;
  isStarted: boolean;
}

export class AgentChannel implements SandboxChannel {
  readonly kind = 'agent' as const;
  readonly hello: AgentHello;
  readonly #socket: Socket;
  readonly #decoder: FrameDecoder;
  readonly #logger: Logger | undefined;
  readonly #description: string;
  readonly #pending = new Map<number, Pending>();
  readonly #procs = new Map<number, ProcEntry>();
  #nextId = 1;
  #lost: Error | undefined;
  readonly #lostListeners: ((err: Error) => void)[] = [];

  /**
   * Takes over `socket` after the hello; `decoder` holds whatever followed
   * the hello in the same read.
   */
  constructor(socket: Socket, decoder: FrameDecoder, hello: AgentHello, description: string, logger?: Logger) {
    this.#socket = socket;
    this.#decoder = decoder;
    this.hello = hello;
    this.#description = description;
    this.#logger = logger;
    socket.setNoDelay?.(true);
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    socket.on('error', (err) => this.#fail(new SandboxLostError(`lost the exec agent of ${description}: ${err.message}`)));
    socket.on('close', () => this.#fail(new SandboxLostError(`the exec agent of ${description} disconnected`)));
  }

  get isLost(): boolean {
    return this.#lost !== undefined;
  }

  /** Calls `listener` once when the connection is lost (at once if it is). */
  onLost(listener: (err: Error) => void): void {
    if (this.#lost) listener(this.#lost);
    else this.#lostListeners.push(listener);
  }

  close(): void {
    this.#fail(new SandboxLostError(`the connection to the exec agent of ${this.#description} was closed`));
  }

  #fail(err: Error): void {
    if (this.#lost) return;
    this.#lost = err;
    this.#socket.destroy();
    for (const p of this.#pending.values()) p.reject(err);
    this.#pending.clear();
    for (const proc of this.#procs.values()) {
      if (!proc.isStarted) proc.started.reject(err);
      proc.exit.reject(err);
    }
    this.#procs.clear();
    for (const listener of this.#lostListeners.splice(0)) listener(err);
  }

  #onData(chunk: Buffer): void {
    let frames: Frame[];
    try {
      frames = this.#decoder.push(chunk);
    } catch (err) {
      const detail = err instanceof FrameError ? err.message : String(err);
      this.#logger?.error({ detail }, 'exec agent sent a malformed frame');
      this.#fail(new SandboxLostError(`the exec agent of ${this.#description} sent a malformed frame: ${detail}`));
      return;
    }
    for (const frame of frames) this.#dispatch(frame);
  }

  /** Handles the frames that arrived together with the hello. */
  drainBuffered(frames: readonly Frame[]): void {
    for (const frame of frames) this.#dispatch(frame);
  }

  #dispatch(frame: Frame): void {
    const { header } = frame;
    const proc = this.#procs.get(header.id);
    if (proc) {
      switch (header.op) {
        case 'started':
          proc.isStarted = true;
          proc.started.resolve(frame);
          return;
        case 'out':
          try {
            proc.onOutput(frame.body);
          } catch (err) {
            this.#logger?.warn({ err }, 'output consumer threw');
          }
          return;
        case 'exit':
          this.#procs.delete(header.id);
          proc.exit.resolve(frame);
          return;
        case 'error':
          this.#procs.delete(header.id);
          proc.started.reject(replyError(header));
          return;
        default:
          this.#logger?.warn({ op: header.op }, 'unexpected frame for a process');
          return;
      }
    }
    const pending = this.#pending.get(header.id);
    if (!pending) {
      this.#logger?.debug({ op: header.op, id: header.id }, 'frame for an unknown request');
      return;
    }
    this.#pending.delete(header.id);
    if (header.op === 'error') pending.reject(replyError(header));
    else pending.resolve(frame);
  }

  #send(header: FrameHeader, body?: Uint8Array): void {
    if (this.#lost) throw this.#lost;
    this.#socket.write(encodeFrame(header, body));
  }

  #request(op: string, fields: Record<string, unknown>, body?: Uint8Array): Promise<Frame> {
    if (this.#lost) return Promise.reject(this.#lost);
    const id = this.#nextId++;
    return new Promise<Frame>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      try {
        this.#send({ ...fields, op, id }, body);
      } catch (err) {
        this.#pending.delete(id);
        reject(err as Error);
      }
    });
  }

  async spawn(options: SpawnOptions): Promise<SandboxProcess> {
    if (this.#lost) throw this.#lost;
    const id = this.#nextId++;
    let startedResolve!: (f: Frame) => void;
    let startedReject!: (e: Error) => void;
    const started = new Promise<Frame>((res, rej) => {
      startedResolve = res;
      startedReject = rej;
    });
    let exitResolve!: (f: Frame) => void;
    let exitReject!: (e: Error) => void;
    const exitFrame = new Promise<Frame>((res, rej) => {
      exitResolve = res;
      exitReject = rej;
    });
    // Nobody may be waiting on the exit yet when the connection drops.
    exitFrame.catch(() => undefined);
    this.#procs.set(id, {
      onOutput: options.onOutput,
      started: { resolve: startedResolve, reject: startedReject },
      exit: { resolve: exitResolve, reject: exitReject },
      isStarted: false,
    });
    const stdin = options.stdin === undefined ? undefined : Buffer.from(options.stdin);
    try {
      this.#send(
        {
          op: 'spawn',
          id,
          script: options.script,
          env: options.env ?? {},
          cwd: options.cwd,
          pty: options.pty ?? false,
          keep_stdin: options.keepStdin ?? false,
        },
        stdin,
      );
    } catch (err) {
      this.#procs.delete(id);
      throw err;
    }
    let startedFrame: Frame;
    try {
      startedFrame = await started;
    } catch (err) {
      throw err instanceof AgentOpError
        ? new FailedPreconditionError(`cannot start a command in ${this.#description}: ${err.message}`)
        : err;
    }
    const pid = Number(startedFrame.header.pid);
    const exited = exitFrame.then(
      (frame): ProcessExit => {
        const c = (frame.header.counters ?? {}) as { oom_kill?: unknown; pids_max?: unknown };
        return {
          code: typeof frame.header.code === 'number' ? frame.header.code : null,
          signal: typeof frame.header.signal === 'number' ? frame.header.signal : null,
          counters: {
            ...(typeof c.oom_kill === 'number' ? { oomKills: c.oom_kill } : {}),
            ...(typeof c.pids_max === 'number' ? { pidsMaxHits: c.pids_max } : {}),
          },
        };
      },
    );
    // The caller awaits it later; a connection lost in between must not count as unhandled.
    exited.catch(() => undefined);
    const procOp = async (op: string, fields: Record<string, unknown>, body?: Uint8Array): Promise<void> => {
      try {
        await this.#request(op, { ...fields, proc: id }, body);
      } catch (err) {
        if (err instanceof AgentOpError) {
          throw new FailedPreconditionError(err.errno === 'ESRCH' ? 'the process has exited' : err.message);
        }
        throw err;
      }
    };
    return {
      pid,
      exited,
      write: (data) => procOp('stdin', {}, Buffer.from(data)),
      closeStdin: () => procOp('eof', {}),
      kill: (graceMs) => procOp('kill', { grace_ms: graceMs }),
    };
  }

  async readFile(absPath: string): Promise<Buffer> {
    try {
      return (await this.#request('read', { path: absPath })).body;
    } catch (err) {
      throw this.#fileError(err, absPath, 'read');
    }
  }

  async writeFile(absPath: string, data: Uint8Array): Promise<void> {
    try {
      await this.#request('write', { path: absPath }, data);
    } catch (err) {
      throw this.#fileError(err, absPath, 'write');
    }
  }

  async stat(absPath: string): Promise<SandboxStat> {
    let frame: Frame;
    try {
      frame = await this.#request('stat', { path: absPath });
    } catch (err) {
      throw this.#fileError(err, absPath, 'stat');
    }
    const h = frame.header;
    return {
      exists: h.exists === true,
      isDirectory: h.is_dir === true,
      sizeBytes: typeof h.size === 'number' ? h.size : 0,
      uid: typeof h.uid === 'number' ? h.uid : -1,
    };
  }

  /** One round trip; for health checks and latency measurements. */
  async ping(): Promise<void> {
    await this.#request('ping', {});
  }

  #fileError(err: unknown, absPath: string, op: 'read' | 'write' | 'stat'): Error {
    if (err instanceof AgentOpError) return fileErrnoError(err.errno, absPath, err.message, op);
    return err instanceof Error ? err : new Error(String(err));
  }
}

function replyError(header: FrameHeader): AgentOpError {
  const errno = typeof header.errno === 'string' ? header.errno : 'EIO';
  const message = typeof header.message === 'string' ? header.message : errno;
  return new AgentOpError(errno, message);
}
