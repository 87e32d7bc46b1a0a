/**
 * The Unix socket in a task's host directory that the exec agent dials.
 *
 * The executor listens and the agent connects (not the other way round)
 * because under gVisor a host process cannot connect to a socket created
 * inside the sandbox, while a sandboxed process may connect to a host socket
 * in a bind mount (runsc --host-uds=all). Each container start gets a fresh
 * token; a connection must present the expected one in its hello, so an
 * agent of a container that was replaced (or anything else in the sandbox)
 * cannot take the place of the current agent.
 *
 * Everything in the sandbox can connect here, and commands run as the
 * agent's user (they could read its memory), so the token alone is not
 * enough: one hello is accepted per container start and every later
 * connection is refused unread and logged; before that, a connection gets
 * {@link MAX_HELLO_FRAME_BYTES} and {@link HELLO_TIMEOUT_MS} to say hello, and
 * at most {@link MAX_WAITING_CONNECTIONS} may be waiting at once.
 *
 * One exception: when the agent's stream dropped (EOF or reset, never after
 * a protocol fault, which closes the channel for good), its channel asks for
 * the agent again, and while it waits one connection is accepted whose hello
 * says `resumed` and presents the resume key that agent gave in its first
 * hello (never written anywhere; the token file's token is not enough).
 * Still at most one live channel per container start.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { chmod, chown, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { AgentChannel } from '../shared/agent/agent-channel.js';
import type { AgentChannelOptions } from '../shared/agent/agent-channel-options.js';
import type { AgentStream } from '../shared/agent/agent-stream.js';
import {
  AGENT_PROTOCOL_VERSION,
  FrameDecoder,
  MAX_HELLO_FRAME_BYTES,
  parseHello,
  versionMismatchMessage,
  type Frame,
} from '../shared/agent/agent-protocol.js';

/** How long a new connection has to say hello. */
const HELLO_TIMEOUT_MS = 5000;

/** Connections that have not said hello yet, at once; more are refused. */
const MAX_WAITING_CONNECTIONS = 4;

/** Refused connections logged one by one; after that, one line per this many. */
const REFUSALS_LOGGED_EACH = 5;
const REFUSALS_LOG_EVERY = 100;

interface Waiter {
  readonly token: string;
  readonly resolve: (stream: AgentStream) => void;
  readonly reject: (err: Error) => void;
}

/** How often a wait for a redialling agent asks whether its container still runs. */
const LIVENESS_POLL_MS = 500;

export class AgentListener {
  readonly socketPath: string;
  readonly #server: Server;
  readonly #description: string;
  readonly #logger: Logger | undefined;
  readonly #channelOptions: AgentChannelOptions;
  #waiter: Waiter | undefined;
  /** Set while the agent's channel waits for it to dial in again after a dropped stream. */
  #resumeWaiter: Waiter | undefined;
  /**
   * Whether the container still runs (set once it exists): a wait for a
   * redialling agent ends early when it does not.
   */
  isAlive: (() => Promise<boolean>) | undefined;
  #closed = false;
  /** Set once an agent's hello was accepted: this container start has its agent. */
  #accepted = false;
  #waiting = 0;
  #refusals = 0;

  private constructor(
    server: Server,
    socketPath: string,
    description: string,
    logger: Logger | undefined,
    channelOptions: AgentChannelOptions,
  ) {
    this.#server = server;
    this.#channelOptions = channelOptions;
    this.socketPath = socketPath;
    this.#description = description;
    this.#logger = logger;
    server.on('connection', (socket) => this.#onConnection(socket));
  }

  /**
   * Listens on `socketPath` (a stale socket file is replaced). The socket is
   * given to `owner` (the container's root) with mode 0600; where the
   * executor may not chown (it is not root), it is made 0666 instead, since
   * connecting takes write permission and the container's root is then
   * another user: commands in the container may connect too (on the host the
   * directory's parent is private to the executor). Such a connection gets
   * nowhere: the listener takes one hello per container start, presenting
   * the token that no command can read, or the agent's resume key, and
   * checks every frame.
   */
  static async listen(
    socketPath: string,
    description: string,
    owner: { uid: number; gid: number },
    logger?: Logger,
    channelOptions: AgentChannelOptions = {},
  ): Promise<AgentListener> {
    await rm(socketPath, { force: true });
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socketPath, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (err) => logger?.warn({ err }, 'agent socket error'));
    try {
      await chown(socketPath, owner.uid, owner.gid);
      await chmod(socketPath, 0o600);
    } catch {
      await chmod(socketPath, 0o666);
    }
    return new AgentListener(server, socketPath, description, logger, channelOptions);
  }

  /**
   * Resolves with the agent that presents `token`. Replaces any earlier
   * expectation. Rejects after `timeoutMs`, or when `signal` aborts.
   */
  expect(token: string, timeoutMs: number, signal?: AbortSignal): Promise<AgentChannel> {
    return this.#wait('first', token, timeoutMs, signal).then((first) => {
      const channel = new AgentChannel(first.stream, first.decoder, first.hello, this.#description, this.#logger, {
        ...this.#channelOptions,
        reattach: (previous, stop) => this.#expectResume(previous.resumeKey, stop),
      });
      channel.drainBuffered(first.buffered);
      return channel;
    });
  }

  /** The same agent dialling in again after its stream dropped, presenting `resumeKey`. */
  async #expectResume(resumeKey: string, signal: AbortSignal): Promise<AgentStream> {
    if (this.#closed) throw new UnavailableError(`the agent socket of ${this.#description} is closed`);
    const stop = new AbortController();
    const both = AbortSignal.any([signal, stop.signal]);
    const isAlive = this.isAlive;
    if (isAlive) {
      void (async () => {
        while (!both.aborted) {
          await new Promise((r) => setTimeout(r, LIVENESS_POLL_MS));
          if (both.aborted) return;
          if (!(await isAlive().catch(() => true))) {
            stop.abort(new UnavailableError(`${this.#description} stopped`));
            return;
          }
        }
      })();
    }
    try {
      // The channel bounds the wait (it races this with its own timeout and aborts `signal`).
      return await this.#wait('resume', resumeKey, 24 * 60 * 60 * 1000, both);
    } finally {
      stop.abort();
    }
  }

  #wait(kind: 'first' | 'resume', token: string, timeoutMs: number, signal?: AbortSignal): Promise<AgentStream> {
    return new Promise<AgentStream>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason instanceof Error ? signal.reason : new UnavailableError('stopped waiting for the exec agent'));
        return;
      }
      const timer = setTimeout(() => {
        done();
        reject(new UnavailableError(`the exec agent of ${this.#description} did not connect within ${timeoutMs} ms`));
      }, timeoutMs);
      const onAbort = () => {
        done();
        reject(signal?.reason instanceof Error ? signal.reason : new UnavailableError('stopped waiting for the exec agent'));
      };
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (this.#waiter === waiter) this.#waiter = undefined;
        if (this.#resumeWaiter === waiter) this.#resumeWaiter = undefined;
      };
      const waiter: Waiter = {
        token,
        resolve: (stream) => {
          done();
          resolve(stream);
        },
        reject: (err) => {
          done();
          reject(err);
        },
      };
      if (kind === 'first') this.#waiter = waiter;
      else this.#resumeWaiter = waiter;
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Connections that have not said hello yet. */
  get waitingConnections(): number {
    return this.#waiting;
  }

  /** Connections refused so far (a replayed hello, a second agent, garbage); for logs and tests. */
  get refusedConnections(): number {
    return this.#refusals;
  }

  #refuse(socket: Socket, reason: string, fields: Record<string, unknown> = {}): void {
    socket.destroy();
    const n = ++this.#refusals;
    if (n <= REFUSALS_LOGGED_EACH || n % REFUSALS_LOG_EVERY === 0) {
      this.#logger?.warn({ ...fields, refused: n, environment: this.#description }, `refused a connection to the agent socket: ${reason}`);
    }
  }

  #onConnection(socket: Socket): void {
    if (this.#closed) {
      socket.destroy();
      return;
    }
    if (this.#accepted && !this.#resumeWaiter) {
      this.#refuse(socket, 'this container start has its agent already (a second hello is never accepted)');
      return;
    }
    if (this.#waiting >= MAX_WAITING_CONNECTIONS) {
      this.#refuse(socket, 'too many connections waiting to say hello');
      return;
    }
    this.#waiting++;
    let settled = false;
    const settle = () => {
      if (settled) return false;
      settled = true;
      this.#waiting--;
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('error', onError);
      socket.off('close', onClose);
      return true;
    };
    const decoder = new FrameDecoder();
    const timer = setTimeout(() => {
      if (settle()) this.#refuse(socket, 'no hello in time');
    }, HELLO_TIMEOUT_MS);
    const onData = (chunk: Buffer) => {
      let frames: Frame[];
      try {
        frames = decoder.push(chunk);
      } catch (err) {
        if (settle()) this.#refuse(socket, 'not a frame', { detail: (err as Error).message });
        return;
      }
      if (frames.length === 0) {
        if (decoder.bufferedBytes > MAX_HELLO_FRAME_BYTES && settle()) this.#refuse(socket, 'first frame too long for a hello');
        return;
      }
      if (!settle()) return;
      const [first, ...rest] = frames;
      const hello = parseHello(first!);
      const resume = this.#resumeWaiter;
      if (this.#accepted && resume && hello?.resumed && sameToken(hello.token, resume.token)) {
        if (hello.version !== AGENT_PROTOCOL_VERSION) {
          this.#refuse(socket, 'a resumed agent of another protocol version');
          return;
        }
        // Paused until the channel has its listeners on it: nothing is read before.
        socket.pause();
        socket.on('error', () => undefined);
        resume.resolve({ stream: socket, decoder, hello, buffered: rest });
        return;
      }
      const waiter = this.#waiter;
      if (this.#accepted) {
        this.#refuse(socket, 'this container start has its agent already (a second hello is never accepted)');
        return;
      }
      if (!hello || !waiter || !sameToken(hello.token, waiter.token)) {
        this.#refuse(socket, 'not the expected agent', { version: hello?.version, expected: waiter !== undefined });
        return;
      }
      if (hello.version !== AGENT_PROTOCOL_VERSION) {
        this.#logger?.error(
          { version: hello.version, expected: AGENT_PROTOCOL_VERSION },
          'exec agent speaks another protocol version',
        );
        socket.destroy();
        // The right agent (its token is this start's), the wrong code: waiting longer cannot help.
        waiter.reject(new FailedPreconditionError(versionMismatchMessage(hello.version, this.#description)));
        return;
      }
      this.#accepted = true;
      socket.pause();
      socket.on('error', () => undefined);
      waiter.resolve({ stream: socket, decoder, hello, buffered: rest });
    };
    const onError = () => {
      if (settle()) socket.destroy();
    };
    // A connection that goes away before its hello no longer counts as waiting.
    const onClose = () => settle();
    socket.on('data', onData);
    socket.on('error', onError);
    socket.on('close', onClose);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#resumeWaiter?.reject(new UnavailableError(`the agent socket of ${this.#description} was closed`));
    // Stops accepting; a connected agent keeps its socket until its channel is closed.
    this.#server.close();
    await rm(this.socketPath, { force: true }).catch(() => undefined);
  }
}

/** Constant-time comparison (of digests, so lengths do not show either). */
function sameToken(presented: string, expected: string): boolean {
  const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();
  return expected !== '' && timingSafeEqual(digest(presented), digest(expected));
}
