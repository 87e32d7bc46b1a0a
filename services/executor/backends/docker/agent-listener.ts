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
 */
import { chmod, chown, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { AgentChannel, type AgentHello } from './agent-channel.js';
import { AGENT_PROTOCOL_VERSION, FrameDecoder, type Frame } from './agent-protocol.js';

/** How long a new connection has to say hello. */
const HELLO_TIMEOUT_MS = 5000;

interface Waiter {
  readonly token: string;
  readonly resolve: (channel: AgentChannel) => void;
}

export class AgentListener {
  readonly socketPath: string;
  readonly #server: Server;
  readonly #description: string;
  readonly #logger: Logger | undefined;
  #waiter: Waiter | undefined;
  #closed = false;

  private constructor(server: Server, socketPath: string, description: string, logger: Logger | undefined) {
    this.#server = server;
    this.socketPath = socketPath;
    this.#description = description;
    this.#logger = logger;
    server.on('connection', (socket) => this.#onConnection(socket));
  }

  /**
   * Listens on `socketPath` (a stale socket file is replaced). The socket is
   * given to `owner` (the sandbox user) with mode 0600; where the executor
   * may not chown, it is made 0666 instead: the directory it lives in is
   * private to the executor on the host, and only the container sees it.
   */
  static async listen(
    socketPath: string,
    description: string,
    owner: { uid: number; gid: number },
    logger?: Logger,
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
    return new AgentListener(server, socketPath, description, logger);
  }

  /**
   * Resolves with the agent that presents `token`. Replaces any earlier
   * expectation. Rejects after `timeoutMs`, or when `signal` aborts.
   */
  expect(token: string, timeoutMs: number, signal?: AbortSignal): Promise<AgentChannel> {
    return new Promise<AgentChannel>((resolve, reject) => {
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
      };
      const waiter: Waiter = {
        token,
        resolve: (channel) => {
          done();
          resolve(channel);
        },
      };
      this.#waiter = waiter;
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  #onConnection(socket: Socket): void {
    if (this.#closed) {
      socket.destroy();
      return;
    }
    const decoder = new FrameDecoder();
    const timer = setTimeout(() => {
      this.#logger?.warn('a connection to the agent socket sent no hello; closing it');
      socket.destroy();
    }, HELLO_TIMEOUT_MS);
    const onData = (chunk: Buffer) => {
      let frames: Frame[];
      try {
        frames = decoder.push(chunk);
      } catch {
        clearTimeout(timer);
        socket.destroy();
        return;
      }
      if (frames.length === 0) return;
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('error', onError);
      const [first, ...rest] = frames;
      const hello = parseHello(first!);
      const waiter = this.#waiter;
      if (!hello || !waiter || hello.token !== waiter.token) {
        this.#logger?.warn(
          { version: hello?.version, expected: waiter !== undefined },
          'refused a connection to the agent socket: not the expected agent',
        );
        socket.destroy();
        return;
      }
      if (hello.version !== AGENT_PROTOCOL_VERSION) {
        this.#logger?.error({ version: hello.version }, 'exec agent speaks another protocol version');
        socket.destroy();
        return;
      }
      const channel = new AgentChannel(socket, decoder, hello, this.#description, this.#logger);
      channel.drainBuffered(rest);
      waiter.resolve(channel);
    };
    const onError = () => {
      clearTimeout(timer);
      socket.destroy();
    };
    socket.on('data', onData);
    socket.on('error', onError);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Stops accepting; a connected agent keeps its socket until its channel is closed.
    this.#server.close();
    await rm(this.socketPath, { force: true }).catch(() => undefined);
  }
}

function parseHello(frame: Frame): AgentHello | undefined {
  const h = frame.header;
  if (h.op !== 'hello' || typeof h.token !== 'string') return undefined;
  return {
    token: h.token,
    version: typeof h.version === 'number' ? h.version : 0,
    pid: typeof h.pid === 'number' ? h.pid : 0,
    python: typeof h.python === 'string' ? h.python : '',
  };
}
