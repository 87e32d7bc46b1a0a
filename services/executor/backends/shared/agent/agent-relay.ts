/**
 * The executor's end of the agent's socket relay (sandbox-image/agent/berth_agent/relay.py, "socket
 * relay"): a Unix socket inside the sandbox whose connections are carried
 * over the agent's stream. Each connection becomes a Duplex here, so a
 * server written for net.Socket (execute_code's RPC server) serves it
 * unchanged.
 *
 * Flow control: the agent forwards at most {@link RELAY_WINDOW_BYTES} of a
 * connection ahead of our acks, and we ack only what the reader took; a
 * paused reader (the RPC server pauses while a request is being answered)
 * stops the agent reading, and the sandbox's writer blocks on its socket,
 * as it would on a local one. The other way round likewise: the agent acks
 * what it wrote to the connection, and a write here completes only while
 * less than the window is unacked, so a script that never reads its answers
 * holds the RPC server's writes back (it then reads no further requests from
 * that connection) instead of the agent or the stream queueing them.
 */
import { Duplex } from 'node:stream';
import { FailedPreconditionError } from '../../../../common/errors.js';
import type { Logger } from '../../../../common/logging.js';
import type { AgentLink } from './agent-link.js';
import { AgentOpError } from './agent-op-error.js';
import { FILE_CHUNK_BYTES, type FrameHeader } from './agent-protocol.js';

/** Bytes the agent forwards on one connection ahead of our acks (its RELAY_WINDOW). */
export const RELAY_WINDOW_BYTES = 256 * 1024;

/** Sends one frame on the agent's stream; throws once the stream is lost. */
export type RelaySend = (header: FrameHeader, body?: Uint8Array) => void;

/** One connection to the relayed socket. */
export class RelayedConnection extends Duplex {
  readonly #send: RelaySend;
  readonly #listenerId: number;
  readonly #conn: number;
  /** Bytes pushed to the reader but not acked to the agent yet (the reader had not taken them). */
  #owed = 0;
  /** The agent said the connection is gone: nothing more is sent to it. */
  #gone = false;
  /** The sandbox side shut its writing side: nothing more is pushed. */
  #ended = false;
  /** Bytes sent toward the sandbox that the agent has not written to the connection yet. */
  #outUnacked = 0;
  /** The write waiting for the agent's acks to fall below the window. */
  #waiting: (() => void) | undefined;

  constructor(send: RelaySend, listenerId: number, conn: number) {
    super({ allowHalfOpen: true });
    this.#send = send;
    this.#listenerId = listenerId;
    this.#conn = conn;
  }

  /** Bytes the sandbox side sent. */
  receive(data: Buffer): void {
    if (this.destroyed || this.#ended) return;
    if (this.push(data)) this.#ack(data.length);
    else this.#owed += data.length;
  }

  /** The sandbox side shut its writing side. */
  receiveEnd(): void {
    if (this.destroyed || this.#ended) return;
    this.#ended = true;
    this.push(null);
  }

  /** The agent wrote `bytes` more of what we sent to the connection. */
  receiveAck(bytes: number): void {
    this.#outUnacked = Math.max(0, this.#outUnacked - bytes);
    if (this.#outUnacked < RELAY_WINDOW_BYTES) this.#release();
  }

  #release(): void {
    const waiting = this.#waiting;
    this.#waiting = undefined;
    waiting?.();
  }

  /** The sandbox side is gone. */
  receiveClosed(): void {
    this.#gone = true;
    this.destroy();
  }

  #ack(bytes: number): void {
    if (bytes <= 0 || this.#gone) return;
    this.#trySend({ op: 'cack', id: this.#listenerId, conn: this.#conn, bytes });
  }

  #trySend(header: FrameHeader, body?: Uint8Array): boolean {
    try {
      this.#send(header, body);
      return true;
    } catch {
      this.#gone = true;
      return false;
    }
  }

  override _read(): void {
    const owed = this.#owed;
    this.#owed = 0;
    this.#ack(owed);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    if (this.#gone) {
      callback();
      return;
    }
    for (let offset = 0; offset < chunk.length; offset += FILE_CHUNK_BYTES) {
      const piece = chunk.subarray(offset, Math.min(offset + FILE_CHUNK_BYTES, chunk.length));
      if (!this.#trySend({ op: 'cdata', id: this.#listenerId, conn: this.#conn }, piece)) break;
      this.#outUnacked += piece.length;
    }
    if (this.#gone || this.#outUnacked < RELAY_WINDOW_BYTES) callback();
    else this.#waiting = () => callback();
  }

  override _final(callback: (err?: Error | null) => void): void {
    if (!this.#gone) this.#trySend({ op: 'cshut', id: this.#listenerId, conn: this.#conn });
    callback();
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    this.#release();
    if (!this.#gone) {
      this.#gone = true;
      this.#trySend({ op: 'cclose', id: this.#listenerId, conn: this.#conn });
    }
    callback(err);
  }
}

/** A relayed socket: the listen request's id, and its connections. */
export class RelayListener {
  readonly id: number;
  readonly #send: RelaySend;
  readonly #onConnection: (socket: Duplex) => void;
  readonly #conns = new Map<number, RelayedConnection>();
  readonly #logger: Logger | undefined;
  #closed = false;

  constructor(id: number, send: RelaySend, onConnection: (socket: Duplex) => void, logger?: Logger) {
    this.id = id;
    this.#send = send;
    this.#onConnection = onConnection;
    this.#logger = logger;
  }

  /** A frame the agent sent about this listener. */
  dispatch(header: FrameHeader, body: Buffer): void {
    const number = header.conn;
    if (typeof number !== 'number' || this.#closed) return;
    if (header.op === 'conn') {
      if (this.#conns.has(number)) return;
      const socket = new RelayedConnection(this.#send, this.id, number);
      this.#conns.set(number, socket);
      socket.once('close', () => this.#conns.delete(number));
      try {
        this.#onConnection(socket);
      } catch (err) {
        this.#logger?.warn({ err }, 'relay connection handler threw');
        socket.destroy();
      }
      return;
    }
    const socket = this.#conns.get(number);
    if (!socket) return;
    switch (header.op) {
      case 'cdata':
        socket.receive(body);
        return;
      case 'cend':
        socket.receiveEnd();
        return;
      case 'cack':
        if (typeof header.bytes === 'number') socket.receiveAck(header.bytes);
        return;
      case 'cclosed':
        this.#conns.delete(number);
        socket.receiveClosed();
        return;
      default:
        this.#logger?.debug({ op: header.op }, 'unexpected relay frame');
    }
  }

  /** Ends every connection here (the agent closes its side on unlisten, or has gone). */
  closeAll(): void {
    this.#closed = true;
    for (const socket of this.#conns.values()) socket.receiveClosed();
    this.#conns.clear();
  }
}

/** A Unix socket inside the sandbox, relayed over the agent's stream (see {@link listenRelayed}). */
export interface AgentSocketRelay {
  /** Closes the socket and its connections; `removeDir`: a directory (the run dir) the agent removes after. */
  close(removeDir?: string): Promise<void>;
}

/**
 * Listens on a Unix socket at `socketPath` inside the sandbox (its
 * directory made 0700 unless it exists; the socket 0600, the sandbox
 * user's): each connection to it is handed to `onConnection` as a Duplex
 * carried over the channel. Needs the agent's `relay` capability.
 */
export async function listenRelayed(
  host: AgentLink,
  socketPath: string,
  onConnection: (socket: Duplex) => void,
): Promise<AgentSocketRelay> {
  if (!host.capabilities.includes('relay')) {
    throw new FailedPreconditionError(
      `the exec agent of ${host.description} cannot relay a socket (an older agent); run the one shipped with this executor`,
    );
  }
  await host.attached();
  const id = host.newId();
  const relay = new RelayListener(id, host.send, onConnection, host.logger);
  host.route(id, relay);
  try {
    await host.request('listen', { path: socketPath }, undefined, id);
  } catch (err) {
    host.route(id, undefined);
    throw err instanceof AgentOpError
      ? new FailedPreconditionError(`cannot listen on ${socketPath} in ${host.description}: ${err.message} (${err.errno})`)
      : err;
  }
  let closing: Promise<void> | undefined;
  return {
    close: (removeDir) =>
      (closing ??= (async () => {
        relay.closeAll();
        try {
          if (!host.isLost()) await host.request('unlisten', { listener: id, ...(removeDir ? { remove: removeDir } : {}) });
        } finally {
          host.route(id, undefined);
        }
      })()),
  };
}
