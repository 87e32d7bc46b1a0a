/**
 * The executor's end of one exec agent connection: requests are framed and
 * multiplexed by id over one byte stream (see agent-protocol.ts). The
 * stream is whatever the backend has: the Unix socket the agent dialled,
 * or the stdin/stdout of `python3 berth_agent.pyz --stdio` (stdio-agent.ts).
 *
 * The channel can outlive one stream: when a stream drops (EOF, reset; never
 * after a protocol fault, which loses the channel for good) and the backend
 * gave a way to find the agent again ({@link AgentChannelOptions.reattach}),
 * foreground work fails, background processes stay, and once the agent is
 * back on a new stream they are bound to it (`resume`), so their output,
 * stdin, exit and kill carry on.
 *
 * Where each frame from the agent goes is agent-routes.ts; the channel's
 * limits and tuning are agent-channel-options.ts.
 */
import type { Duplex } from 'node:stream';
import { FailedPreconditionError, ResourceExhaustedError } from '../../../../common/errors.js';
import type { Logger } from '../../../../common/logging.js';
import { MAX_OPEN_REQUESTS, MAX_UNSENT_BYTES, REQUEST_TIMEOUT_MS, type AgentChannelOptions } from './agent-channel-options.js';
import { readAgentFile, statAgentFile, writeAgentFile } from './agent-files.js';
import type { AgentLink } from './agent-link.js';
import { LIVENESS_PROBE_AFTER_MS, LIVENESS_TIMEOUT_MS, LivenessWatchdog } from './agent-liveness.js';
import { AgentOpError } from './agent-op-error.js';
import { agentProcess } from './agent-process.js';
import { listenRelayed, type AgentSocketRelay } from './agent-relay.js';
import { findAgentAgain, parseResumed, REATTACH_TIMEOUT_MS, type AgentReattach } from './agent-resume.js';
import { AgentRoutes } from './agent-routes.js';
import { dismiss } from './agent-stream.js';
import type { AgentHello, FrameDecoder } from './agent-protocol.js';
import { FrameError, encodeFrame, type Frame, type FrameHeader } from './agent-protocol.js';
import {
  SandboxLostError,
  type SandboxChannel,
  type SandboxProcess,
  type SandboxStat,
  type SpawnOptions,
} from '../sandbox-channel.js';

export type { AgentHello } from './agent-protocol.js';

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
  readonly #routes: AgentRoutes;
  /** The channel as its file operations and relayed sockets use it; made on first use. */
  #linkView: AgentLink | undefined;
  readonly #requestTimeoutMs: number;
  #nextId = 1;
  #lost: Error | undefined;
  readonly #lostListeners: ((err: Error) => void)[] = [];
  readonly #liveness: LivenessWatchdog;

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
    this.#routes = new AgentRoutes(logger);
    const probeAfterMs = options.livenessProbeAfterMs ?? LIVENESS_PROBE_AFTER_MS;
    const timeoutMs = options.livenessTimeoutMs ?? LIVENESS_TIMEOUT_MS;
    this.#liveness = new LivenessWatchdog({
      probeAfterMs,
      timeoutMs,
      isWaiting: () => !this.#lost && !this.#streamDown && this.#routes.waiting,
      probe: () => void this.#send1('ping', {}).catch(() => undefined),
      // Taken for a broken stream, not a protocol fault: a stream that only stalled (a network path of a cloud
      // backend) is found again where the backend can, with its background processes; a wedged agent is not, and
      // the channel is lost then.
      onSilent: (silentMs) => {
        this.#logger?.error({ silentMs }, 'exec agent stopped answering; dropping its stream');
        this.#onDrop(
          new SandboxLostError(
            `the exec agent of ${this.#description} stopped answering (nothing heard for ${silentMs} ms, ` +
              `not even a reply to a liveness check within ${timeoutMs} ms); its stream was dropped`,
          ),
        );
      },
    });
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
    this.#routes.dropStream(err);
    this.#logger?.warn({ background: this.#routes.processes }, 'the stream to the exec agent dropped; finding it again');
    this.#reattaching = this.#reattach(reattach, err).finally(() => {
      this.#reattaching = undefined;
    });
    this.#reattaching.catch(() => undefined);
  }

  async #reattach(reattach: AgentReattach, cause: SandboxLostError): Promise<void> {
    const timeoutMs = this.#options.reattachTimeoutMs ?? REATTACH_TIMEOUT_MS;
    try {
      const next = await findAgentAgain(reattach, this.hello, this.#reattachAbort.signal, timeoutMs);
      if (this.#lost) {
        dismiss(next.stream);
        throw this.#lost;
      }
      this.#bind(next.stream, next.decoder);
      for (const frame of next.buffered) this.#routes.dispatch(frame);
      const asked = this.#routes.processIds();
      const answer = await this.#send1('resume', { procs: [...asked] });
      const alive = parseResumed(answer, asked);
      if (!alive) {
        const err = new SandboxLostError(`the exec agent of ${this.#description} answered resume with a malformed frame`);
        this.#fail(err);
        throw err;
      }
      for (const id of asked) {
        if (!alive.has(id)) this.#routes.endProcess(id, cause);
      }
      this.#logger?.info({ background: alive.size, ended: asked.size - alive.size }, 'the exec agent was found again after its stream dropped');
    } catch (err) {
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
    this.#liveness.disarm();
    this.#reattachAbort.abort(err);
    if (this.#closing && !this.#streamDown) dismiss(this.#socket);
    else this.#socket.destroy();
    this.#routes.failAll(err);
    for (const listener of this.#lostListeners.splice(0)) listener(err);
  }

  #onData(chunk: Buffer): void {
    this.#liveness.heard();
    let frames: Frame[];
    try {
      frames = this.#decoder.push(chunk);
    } catch (err) {
      const detail = err instanceof FrameError ? err.message : String(err);
      this.#logger?.error({ detail }, 'exec agent sent a malformed frame');
      this.#fail(new SandboxLostError(`the exec agent of ${this.#description} sent a malformed frame: ${detail}`));
      return;
    }
    for (const frame of frames) this.#routes.dispatch(frame);
  }

  /** Handles the frames that arrived together with the hello. */
  drainBuffered(frames: readonly Frame[]): void {
    for (const frame of frames) this.#routes.dispatch(frame);
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
    if (this.#routes.open >= MAX_OPEN_REQUESTS) {
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
      this.#routes.addRequest(id, { resolve, reject, timer });
      this.#liveness.arm();
      try {
        this.#send({ ...fields, op, id }, body);
      } catch (err) {
        this.#routes.removeRequest(id);
        reject(err as Error);
      }
    });
  }

  async spawn(options: SpawnOptions): Promise<SandboxProcess> {
    await this.#attached();
    this.#assertRoom();
    const id = this.#nextId++;
    const { started, exit: exitFrame } = this.#routes.addProcess(id, options.onOutput, options.background ?? false);
    this.#liveness.arm();
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
      this.#routes.removeProcess(id);
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
    return agentProcess(id, startedFrame, exitFrame, (op, fields, body, extraTimeoutMs) => this.#request(op, fields, body, extraTimeoutMs));
  }

  readFile(absPath: string): Promise<Buffer> {
    return readAgentFile(this.#link, absPath);
  }

  writeFile(absPath: string, data: Uint8Array): Promise<void> {
    return writeAgentFile(this.#link, absPath, data);
  }

  stat(absPath: string): Promise<SandboxStat> {
    return statAgentFile(this.#link, absPath);
  }

  /**
   * Listens on a Unix socket at `socketPath` inside the sandbox; each
   * connection is handed to `onConnection` (see {@link listenRelayed}).
   */
  listen(socketPath: string, onConnection: (socket: Duplex) => void): Promise<AgentSocketRelay> {
    return listenRelayed(this.#link, socketPath, onConnection);
  }

  /** One round trip; for health checks and latency measurements. */
  async ping(): Promise<void> {
    await this.#request('ping', {});
  }

  /** The channel as its file operations and relayed sockets use it. */
  get #link(): AgentLink {
    this.#linkView ??= {
      description: this.#description,
      capabilities: this.hello.capabilities,
      logger: this.#logger,
      isLost: () => this.isLost,
      attached: () => this.#attached(),
      newId: () => this.#nextId++,
      send: (header, body) => this.#send(header, body),
      request: (op, fields, body, id) => this.#request(op, fields, body, 0, id),
      fault: (message) => {
        this.#fail(new SandboxLostError(message));
        return this.#lost!;
      },
      route: (id, relay) => this.#routes.route(id, relay),
    };
    return this.#linkView;
  }
}
