/**
 * The executor's end of one exec agent connection: requests are framed and
 * multiplexed by id over one byte stream (see agent-protocol.ts). The
 * stream is whatever the backend has: the Unix socket the agent dialled,
 * or the stdin/stdout of `python3 berth_agent.py --stdio` (stdio-agent.ts).
 *
 * The channel can outlive one stream: when a stream drops (EOF, reset; never
 * after a protocol fault, which loses the channel for good) and the backend
 * gave a way to find the agent again ({@link AgentChannelOptions.reattach}),
 * foreground work fails, background processes stay, and once the agent is
 * back on a new stream they are bound to it (`resume`), so their output,
 * stdin, exit and kill carry on.
 */
import { timingSafeEqual } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { FailedPreconditionError, ResourceExhaustedError } from '../../../../common/errors.js';
import type { Logger } from '../../../../common/logging.js';
import { fileTooLargeError } from '../file-errors.js';
import { MAX_READ_FILE_BYTES } from '../file-limits.js';
import { deliverOutput } from '../guards.js';
import { RelayListener } from './agent-relay.js';
import type { AgentHello, FrameDecoder } from './agent-protocol.js';
import {
  FILE_CHUNK_BYTES,
  FrameError,
  MAX_OUTBOUND_FRAME_BYTES,
  encodeFrame,
  type Frame,
  type FrameHeader,
} from './agent-protocol.js';
import {
  SandboxLostError,
  fileErrnoError,
  type ProcessExit,
  type SandboxChannel,
  type SandboxProcess,
  type SandboxStat,
  type SpawnOptions,
} from '../sandbox-channel.js';

/** An error reply from the agent. */
class AgentOpError extends Error {
  constructor(
    readonly errno: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Bytes the executor may have queued for an agent that is not reading them
 * (beyond the one frame being queued): one frame of the largest size, so a
 * spawn with an 8 MiB script followed at once by other requests never
 * trips it. Requests wait for their replies and file content moves in
 * chunks, so a reading agent drains this in milliseconds; an agent that
 * stops reading is cut off here (memory) or at the answer deadline (time),
 * whichever comes first, instead of growing the executor.
 */
export const MAX_UNSENT_BYTES = MAX_OUTBOUND_FRAME_BYTES;

/** Requests and processes one channel may have open at once. */
export const MAX_OPEN_REQUESTS = 1024;

/**
 * How long the agent has to answer a request (a kill: this beyond its
 * grace). A live agent answers in milliseconds; one that does not answer is
 * stuck or is not our agent, and its channel is closed.
 */
export const REQUEST_TIMEOUT_MS = 60_000;

/**
 * How long the channel waits for its agent to come back after the stream
 * dropped (the agent redials, or a new stdio start finds it) before it
 * counts the agent as lost.
 */
export const REATTACH_TIMEOUT_MS = 15_000;

/** A stream to an agent, just past its hello. */
export interface AgentStream {
  readonly stream: Duplex;
  /** Holds whatever followed the hello in the same read. */
  readonly decoder: FrameDecoder;
  readonly hello: AgentHello;
  /** Frames that arrived together with the hello. */
  readonly buffered: readonly Frame[];
}

/**
 * Finds the agent of `previous` again after its stream dropped: resolves
 * with a new stream whose hello says `resumed`; rejects when it cannot
 * (the sandbox is gone, nobody dialled in). `signal` aborts when the
 * channel stops waiting.
 */
export type AgentReattach = (previous: AgentHello, signal: AbortSignal) => Promise<AgentStream>;

/** Tuning of one channel; defaults are the production values. */
export interface AgentChannelOptions {
  /** {@link REQUEST_TIMEOUT_MS} unless set (tests shorten it). */
  readonly requestTimeoutMs?: number;
  /**
   * How a dropped stream (EOF, reset: no protocol fault) is survived:
   * background processes are kept and bound to the new stream. Absent, or
   * an agent without the `resume` capability: a drop loses the channel.
   */
  readonly reattach?: AgentReattach;
  /** {@link REATTACH_TIMEOUT_MS} unless set. */
  readonly reattachTimeoutMs?: number;
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
  /** Outlives a dropped stream (the agent keeps it running); a foreground process does not. */
  readonly background: boolean;
}

/**
 * The ids a `resumed` answer names, or undefined when it is malformed: each
 * must be one the executor asked about, so no more than were asked.
 */
export function parseResumed(frame: Frame, asked: ReadonlySet<number>): Set<number> | undefined {
  const procs = frame.header.procs;
  if (frame.header.op !== 'resumed' || !Array.isArray(procs) || procs.length > asked.size) return undefined;
  const alive = new Set<number>();
  for (const id of procs) {
    if (typeof id !== 'number' || !asked.has(id)) return undefined;
    alive.add(id);
  }
  return alive;
}

export type { AgentHello } from './agent-protocol.js';

/** Frames the agent sends about a relayed socket's connections. */
const RELAY_EVENTS = new Set(['conn', 'cdata', 'cack', 'cend', 'cclosed']);

/** A Unix socket inside the sandbox, relayed over the agent's stream (see {@link AgentChannel.listen}). */
export interface AgentSocketRelay {
  /** Closes the socket and its connections; `removeDir`: a directory (the run dir) the agent removes after. */
  close(removeDir?: string): Promise<void>;
}

export class AgentChannel implements SandboxChannel {
  readonly kind = 'agent' as const;
  readonly hello: AgentHello;
  #socket!: Duplex;
  #decoder!: FrameDecoder;
  /** The current stream ended (or failed) without a protocol fault; set until a new one is bound. */
  #streamDown = false;
  /** Finding the agent again after a dropped stream; requests wait for it. */
  #reattaching: Promise<void> | undefined;
  readonly #reattachAbort = new AbortController();
  #closing = false;
  readonly #options: AgentChannelOptions;
  readonly #logger: Logger | undefined;
  readonly #description: string;
  readonly #pending = new Map<number, Pending & { readonly timer: NodeJS.Timeout }>();
  readonly #procs = new Map<number, ProcEntry>();
  readonly #relays = new Map<number, RelayListener>();
  readonly #requestTimeoutMs: number;
  #nextId = 1;
  #lost: Error | undefined;
  readonly #lostListeners: ((err: Error) => void)[] = [];

  /**
   * Takes over `socket` (a socket, or any Duplex byte stream) after the
   * hello; `decoder` holds whatever followed the hello in the same read.
   */
  constructor(
    socket: Duplex,
    decoder: FrameDecoder,
    hello: AgentHello,
    description: string,
    logger?: Logger,
    options: AgentChannelOptions = {},
  ) {
    this.#requestTimeoutMs = options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS;
    this.#options = options;
    this.hello = hello;
    this.#description = description;
    this.#logger = logger;
    this.#bind(socket, decoder);
  }

  /** Makes `socket` the channel's stream. */
  #bind(socket: Duplex, decoder: FrameDecoder): void {
    this.#socket = socket;
    this.#decoder = decoder;
    this.#streamDown = false;
    const description = this.#description;
    (socket as { setNoDelay?: (noDelay: boolean) => void }).setNoDelay?.(true);
    const current = () => this.#socket === socket && !this.#streamDown && !this.#lost;
    const disconnected = () => {
      if (current()) this.#onDrop(new SandboxLostError(`the exec agent of ${description} disconnected`));
    };
    socket.on('data', (chunk: Buffer) => {
      if (current()) this.#onData(chunk);
    });
    socket.on('error', (err) => {
      if (current()) this.#onDrop(new SandboxLostError(`lost the exec agent of ${description}: ${err.message}`));
    });
    // A stream made of two pipes may end its readable side without ever closing as a whole.
    socket.on('end', disconnected);
    socket.on('close', disconnected);
    // A stream handed over paused (so that nothing was read before these listeners) flows from here.
    socket.resume();
    if (socket.destroyed) disconnected();
  }

  get isLost(): boolean {
    return this.#lost !== undefined;
  }

  /** The stream dropped and the agent is being looked for again; requests wait meanwhile. */
  get isReattaching(): boolean {
    return this.#reattaching !== undefined;
  }

  /**
   * After a {@link SandboxLostError}: waits until the channel has its agent
   * again (a dropped stream was resumed); false when the channel is lost.
   */
  async recover(): Promise<boolean> {
    try {
      await this.#attached();
      return true;
    } catch {
      return false;
    }
  }

  /** Resolves once the channel has a stream (at once unless a dropped one is being replaced); throws once lost. */
  async #attached(): Promise<void> {
    if (this.#reattaching) await this.#reattaching;
    if (this.#lost) throw this.#lost;
  }

  /**
   * The stream ended or failed, with no protocol fault. With a way to
   * reattach, foreground work fails now (the agent ends it) and background
   * processes wait for the agent to be found again; otherwise the channel
   * is lost.
   */
  #onDrop(err: SandboxLostError): void {
    if (this.#lost || this.#streamDown) return;
    this.#streamDown = true;
    const reattach = this.#options.reattach;
    const canResume = reattach !== undefined && this.hello.capabilities.includes('resume') && this.hello.resumeKey !== '';
    if (!canResume || this.#closing || this.#reattaching) {
      // A drop while resuming ends it: the agent is unreachable or not answering.
      this.#fail(err);
      return;
    }
    this.#socket.destroy();
    for (const p of this.#pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    this.#pending.clear();
    for (const [id, proc] of this.#procs) {
      if (proc.background && proc.isStarted) continue;
      if (!proc.isStarted) proc.started.reject(err);
      proc.exit.reject(err);
      this.#procs.delete(id);
    }
    for (const relay of this.#relays.values()) relay.closeAll();
    this.#relays.clear();
    this.#logger?.warn({ background: this.#procs.size }, 'the stream to the exec agent dropped; finding it again');
    this.#reattaching = this.#reattach(reattach, err).finally(() => {
      this.#reattaching = undefined;
    });
    this.#reattaching.catch(() => undefined);
  }

  async #reattach(reattach: AgentReattach, cause: SandboxLostError): Promise<void> {
    const timeoutMs = this.#options.reattachTimeoutMs ?? REATTACH_TIMEOUT_MS;
    let timer: NodeJS.Timeout | undefined;
    try {
      const next = await Promise.race([
        reattach(this.hello, this.#reattachAbort.signal),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`not found again within ${timeoutMs} ms`)), timeoutMs);
          timer.unref();
        }),
      ]);
      clearTimeout(timer);
      if (this.#lost) {
        dismiss(next.stream);
        throw this.#lost;
      }
      const h = next.hello;
      if (!h.resumed || h.pid !== this.hello.pid || h.version !== this.hello.version || !sameKey(h.resumeKey, this.hello.resumeKey)) {
        dismiss(next.stream);
        throw new Error(`another agent answered (pid ${h.pid}, resumed ${h.resumed})`);
      }
      this.#bind(next.stream, next.decoder);
      for (const frame of next.buffered) this.#dispatch(frame);
      const asked = new Set(this.#procs.keys());
      const answer = await this.#send1('resume', { procs: [...asked] });
      const alive = parseResumed(answer, asked);
      if (!alive) {
        const err = new SandboxLostError(`the exec agent of ${this.#description} answered resume with a malformed frame`);
        this.#fail(err);
        throw err;
      }
      for (const id of asked) {
        if (alive.has(id)) continue;
        this.#procs.get(id)?.exit.reject(cause);
        this.#procs.delete(id);
      }
      this.#logger?.info({ background: alive.size, ended: asked.size - alive.size }, 'the exec agent was found again after its stream dropped');
    } catch (err) {
      clearTimeout(timer);
      const lost =
        err instanceof SandboxLostError
          ? err
          : new SandboxLostError(
              `the stream to the exec agent of ${this.#description} dropped and the agent could not be reached again: ${(err as Error).message}`,
            );
      this.#fail(lost);
      throw lost;
    }
  }

  /** Calls `listener` once when the connection is lost (at once if it is). */
  onLost(listener: (err: Error) => void): void {
    if (this.#lost) listener(this.#lost);
    else this.#lostListeners.push(listener);
  }

  /** Ends the channel; the agent is told to end everything it started (it does not wait to be found again). */
  close(): void {
    this.#closing = true;
    this.#fail(new SandboxLostError(`the connection to the exec agent of ${this.#description} was closed`));
  }

  /**
   * For tests: the stream breaks as a lost connection would (no goodbye, no
   * protocol fault), and the channel knows it at once.
   */
  dropStream(): void {
    if (this.#lost || this.#streamDown) return;
    this.#onDrop(new SandboxLostError(`the stream to the exec agent of ${this.#description} broke`));
  }

  /**
   * For tests: handles `chunk` as if the agent had sent it on the current
   * stream (a protocol fault from a real sandbox, which no command there
   * can cause: the agent's stream is private to it).
   */
  receiveForTest(chunk: Buffer): void {
    if (!this.#lost && !this.#streamDown) this.#onData(chunk);
  }

  #fail(err: Error): void {
    if (this.#lost) return;
    this.#lost = err;
    this.#reattachAbort.abort(err);
    if (this.#closing && !this.#streamDown) dismiss(this.#socket);
    else this.#socket.destroy();
    for (const p of this.#pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    this.#pending.clear();
    for (const proc of this.#procs.values()) {
      if (!proc.isStarted) proc.started.reject(err);
      proc.exit.reject(err);
    }
    this.#procs.clear();
    for (const relay of this.#relays.values()) relay.closeAll();
    this.#relays.clear();
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
    if (RELAY_EVENTS.has(header.op)) {
      const relay = this.#relays.get(header.id);
      if (relay) relay.dispatch(header, frame.body);
      else this.#logger?.debug({ op: header.op, id: header.id }, 'relay frame for an unknown socket');
      return;
    }
    const proc = this.#procs.get(header.id);
    if (proc) {
      switch (header.op) {
        case 'started':
          proc.isStarted = true;
          proc.started.resolve(frame);
          return;
        case 'out':
          deliverOutput(proc.onOutput, frame.body, this.#logger);
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
    clearTimeout(pending.timer);
    if (header.op === 'error') pending.reject(replyError(header));
    else pending.resolve(frame);
  }

  #send(header: FrameHeader, body?: Uint8Array): void {
    if (this.#lost) throw this.#lost;
    if (this.#streamDown) throw new SandboxLostError(`the stream to the exec agent of ${this.#description} dropped`);
    if (this.#socket.writableLength > MAX_UNSENT_BYTES) {
      this.#logger?.error({ unsentBytes: this.#socket.writableLength }, 'exec agent stopped reading; closing its channel');
      this.#fail(
        new SandboxLostError(
          `the exec agent of ${this.#description} stopped reading what the executor sends ` +
            `(${this.#socket.writableLength} bytes unread); its connection was closed`,
        ),
      );
      throw this.#lost ?? new SandboxLostError(`the exec agent of ${this.#description} stopped reading`);
    }
    this.#socket.write(encodeFrame(header, body));
  }

  #assertRoom(): void {
    if (this.#pending.size + this.#procs.size >= MAX_OPEN_REQUESTS) {
      throw new ResourceExhaustedError(
        `${this.#description} has ${MAX_OPEN_REQUESTS} requests and processes open on its exec agent; ` +
          'wait for some to finish (or end background processes) and try again',
      );
    }
  }

  async #request(
    op: string,
    fields: Record<string, unknown>,
    body?: Uint8Array,
    extraTimeoutMs = 0,
    presetId?: number,
  ): Promise<Frame> {
    await this.#attached();
    return this.#send1(op, fields, body, extraTimeoutMs, presetId);
  }

  /** Sends one request on the current stream and waits for its answer. */
  #send1(op: string, fields: Record<string, unknown>, body?: Uint8Array, extraTimeoutMs = 0, presetId?: number): Promise<Frame> {
    if (this.#lost) return Promise.reject(this.#lost);
    const timeoutMs = this.#requestTimeoutMs + extraTimeoutMs;
    try {
      this.#assertRoom();
    } catch (err) {
      return Promise.reject(err as Error);
    }
    const id = presetId ?? this.#nextId++;
    return new Promise<Frame>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#logger?.error({ op, timeoutMs }, 'exec agent did not answer; closing its channel');
        this.#fail(
          new SandboxLostError(
            `the exec agent of ${this.#description} did not answer a ${op} request within ${timeoutMs} ms; ` +
              'its connection was closed',
          ),
        );
      }, timeoutMs);
      timer.unref();
      this.#pending.set(id, { resolve, reject, timer });
      try {
        this.#send({ ...fields, op, id }, body);
      } catch (err) {
        clearTimeout(timer);
        this.#pending.delete(id);
        reject(err as Error);
      }
    });
  }

  async spawn(options: SpawnOptions): Promise<SandboxProcess> {
    await this.#attached();
    this.#assertRoom();
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
    // Nobody may be waiting on these yet when the connection drops (even while this spawn is being sent).
    started.catch(() => undefined);
    exitFrame.catch(() => undefined);
    this.#procs.set(id, {
      onOutput: options.onOutput,
      started: { resolve: startedResolve, reject: startedReject },
      exit: { resolve: exitResolve, reject: exitReject },
      isStarted: false,
      background: options.background ?? false,
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
          ...(options.background ? { background: true } : {}),
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
    const procOp = async (op: string, fields: Record<string, unknown>, body?: Uint8Array, extraTimeoutMs?: number): Promise<void> => {
      try {
        await this.#request(op, { ...fields, proc: id }, body, extraTimeoutMs);
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
      kill: (graceMs) => procOp('kill', { grace_ms: graceMs }, undefined, graceMs),
    };
  }

  /**
   * Reads a regular file in {@link FILE_CHUNK_BYTES} chunks, one request
   * each; the agent refuses other file types and files over the cap. The
   * agent's answers are checked, not trusted: a chunk longer than asked, or
   * more in all than the cap, ends the read.
   */
  async readFile(absPath: string): Promise<Buffer> {
    const chunks: Buffer[] = [];
    let total = 0;
    try {
      for (;;) {
        const frame = await this.#request('read', {
          path: absPath,
          offset: total,
          length: FILE_CHUNK_BYTES,
          max: MAX_READ_FILE_BYTES,
        });
        if (frame.body.length > FILE_CHUNK_BYTES) {
          this.#fail(new SandboxLostError(`the exec agent of ${this.#description} sent more file data than asked`));
          throw this.#lost;
        }
        chunks.push(frame.body);
        total += frame.body.length;
        if (total > MAX_READ_FILE_BYTES) throw fileTooLargeError(absPath, total);
        if (frame.header.eof === true || frame.body.length < FILE_CHUNK_BYTES) break;
      }
    } catch (err) {
      throw this.#fileError(err, absPath, 'read');
    }
    return Buffer.concat(chunks, total);
  }

  /**
   * Writes atomically in {@link FILE_CHUNK_BYTES} chunks: the agent puts them
   * in a temp file beside the file and renames it over the file with the
   * last one, so nobody sees a half-written file. The first chunk's answer
   * names the write for the rest; a write that fails halfway is aborted (the
   * agent removes its temp file; it also does when the stream drops).
   */
  async writeFile(absPath: string, data: Uint8Array): Promise<void> {
    if (!this.hello.capabilities.includes('atomic-write')) {
      throw new FailedPreconditionError(
        `the exec agent of ${this.#description} cannot write files atomically (an older berth_agent.py); run the one shipped with this executor`,
      );
    }
    let write: number | undefined;
    try {
      let offset = 0;
      do {
        const end = Math.min(offset + FILE_CHUNK_BYTES, data.byteLength);
        const last = end >= data.byteLength;
        const frame = await this.#request(
          'write',
          { path: absPath, offset, last, ...(write !== undefined ? { write } : {}) },
          data.subarray(offset, end),
        );
        if (last) write = undefined;
        else if (write === undefined) {
          const named = frame.header.write;
          if (typeof named !== 'number' || !Number.isSafeInteger(named)) {
            this.#fail(new SandboxLostError(`the exec agent of ${this.#description} did not name its write`));
            throw this.#lost;
          }
          write = named;
        }
        offset = end;
      } while (offset < data.byteLength);
    } catch (err) {
      if (write !== undefined && !this.#lost) await this.#request('abort', { write }).catch(() => undefined);
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

  /**
   * Listens on a Unix socket at `socketPath` inside the sandbox (its
   * directory made 0700 unless it exists; the socket 0600, the sandbox
   * user's): each connection to it is handed to `onConnection` as a Duplex
   * carried over this channel. Needs the agent's `relay` capability.
   */
  async listen(socketPath: string, onConnection: (socket: Duplex) => void): Promise<AgentSocketRelay> {
    if (!this.hello.capabilities.includes('relay')) {
      throw new FailedPreconditionError(
        `the exec agent of ${this.#description} cannot relay a socket (an older berth_agent.py); run the one shipped with this executor`,
      );
    }
    await this.#attached();
    const id = this.#nextId++;
    const relay = new RelayListener(id, (header, body) => this.#send(header, body), onConnection, this.#logger);
    this.#relays.set(id, relay);
    try {
      await this.#request('listen', { path: socketPath }, undefined, 0, id);
    } catch (err) {
      this.#relays.delete(id);
      throw err instanceof AgentOpError
        ? new FailedPreconditionError(`cannot listen on ${socketPath} in ${this.#description}: ${err.message} (${err.errno})`)
        : err;
    }
    let closing: Promise<void> | undefined;
    return {
      close: (removeDir) =>
        (closing ??= (async () => {
          relay.closeAll();
          try {
            if (!this.#lost) await this.#request('unlisten', { listener: id, ...(removeDir ? { remove: removeDir } : {}) });
          } finally {
            this.#relays.delete(id);
          }
        })()),
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

/** Tells the agent on `stream` to end everything and closes the stream once that is written. */
function dismiss(stream: Duplex): void {
  if (stream.destroyed) return;
  try {
    stream.end(encodeFrame({ op: 'bye', id: 0 }));
  } catch {
    stream.destroy();
    return;
  }
  // A peer that does not read is not waited for.
  setTimeout(() => stream.destroy(), 2000).unref();
}

function sameKey(a: string, b: string): boolean {
  const ab = Buffer.from(a, 'utf8');
  const bb = Buffer.from(b, 'utf8');
  return ab.length === bb.length && ab.length > 0 && timingSafeEqual(ab, bb);
}

function replyError(header: FrameHeader): AgentOpError {
  const errno = typeof header.errno === 'string' ? header.errno : 'EIO';
  const message = typeof header.message === 'string' ? header.message : errno;
  return new AgentOpError(errno, message);
}
