/**
 * Test double support: the server side of RFC 6455 WebSockets, just enough
 * for the Daytona stand-in's PTY endpoint (binary and text messages, ping,
 * close with a code and reason). The SDK's client is the `ws` package; this
 * side is written here so the stand-in needs no package of its own.
 */
import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
/**
 * Largest message accepted from a client: Daytona's daemon reads PTY input
 * with a 64 KiB limit and drops a client that sends more in one message.
 */
export const MAX_MESSAGE_BYTES = 64 * 1024;

export interface ServerSocketEvents {
  message: [data: Buffer, isBinary: boolean];
  close: [];
}

/** One accepted connection. */
export class ServerWebSocket extends EventEmitter<ServerSocketEvents> {
  readonly #socket: Duplex;
  #buffer = Buffer.alloc(0);
  #fragments: Buffer[] = [];
  #fragmentBinary = false;
  #closed = false;

  constructor(socket: Duplex) {
    super();
    this.#socket = socket;
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    socket.on('close', () => this.#finish());
    socket.on('error', () => this.#finish());
  }

  get isOpen(): boolean {
    return !this.#closed;
  }

  #finish(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.emit('close');
  }

  #onData(chunk: Buffer): void {
    this.#buffer = Buffer.concat([this.#buffer, chunk]);
    for (;;) {
      const b = this.#buffer;
      if (b.length < 2) return;
      const fin = (b[0]! & 0x80) !== 0;
      const opcode = b[0]! & 0x0f;
      const masked = (b[1]! & 0x80) !== 0;
      let length = b[1]! & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (b.length < 4) return;
        length = b.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (b.length < 10) return;
        const big = b.readBigUInt64BE(2);
        if (big > BigInt(MAX_MESSAGE_BYTES)) return this.close(1009, 'message too big');
        length = Number(big);
        offset = 10;
      }
      if (length > MAX_MESSAGE_BYTES) return this.close(1009, 'message too big');
      if (!masked) return this.#protocolError();
      if (b.length < offset + 4 + length) return;
      const mask = b.subarray(offset, offset + 4);
      const payload = Buffer.from(b.subarray(offset + 4, offset + 4 + length));
      for (let i = 0; i < payload.length; i++) payload[i]! ^= mask[i % 4]!;
      this.#buffer = b.subarray(offset + 4 + length);
      this.#onFrame(fin, opcode, payload);
      if (this.#closed) return;
    }
  }

  #onFrame(fin: boolean, opcode: number, payload: Buffer): void {
    if (opcode === 0x8) {
      this.close(1000, '');
      return;
    }
    if (opcode === 0x9) {
      this.#send(0xa, payload);
      return;
    }
    if (opcode === 0xa) return;
    if (opcode === 0x1 || opcode === 0x2) {
      this.#fragments = [payload];
      this.#fragmentBinary = opcode === 0x2;
    } else if (opcode === 0x0) {
      this.#fragments.push(payload);
    } else {
      this.#protocolError();
      return;
    }
    if (this.#fragments.reduce((n, f) => n + f.length, 0) > MAX_MESSAGE_BYTES) {
      this.close(1009, 'message too big');
      return;
    }
    if (!fin) return;
    const data = Buffer.concat(this.#fragments);
    this.#fragments = [];
    this.emit('message', data, this.#fragmentBinary);
  }

  #protocolError(): void {
    this.close(1002, 'protocol error');
  }

  #send(opcode: number, payload: Buffer): void {
    if (this.#closed) return;
    let header: Buffer;
    if (payload.length < 126) {
      header = Buffer.from([0x80 | opcode, payload.length]);
    } else if (payload.length < 65536) {
      header = Buffer.alloc(4);
      header[0] = 0x80 | opcode;
      header[1] = 126;
      header.writeUInt16BE(payload.length, 2);
    } else {
      header = Buffer.alloc(10);
      header[0] = 0x80 | opcode;
      header[1] = 127;
      header.writeBigUInt64BE(BigInt(payload.length), 2);
    }
    this.#socket.write(Buffer.concat([header, payload]));
  }

  sendBinary(data: Buffer): void {
    this.#send(0x2, data);
  }

  sendText(text: string): void {
    this.#send(0x1, Buffer.from(text, 'utf8'));
  }

  /** Sends a close frame and ends the connection. */
  close(code: number, reason: string): void {
    if (this.#closed) return;
    const payload = Buffer.alloc(2 + Buffer.byteLength(reason));
    payload.writeUInt16BE(code, 0);
    payload.write(reason, 2);
    this.#send(0x8, payload);
    this.#socket.end();
    this.#finish();
  }
}

/**
 * Completes the opening handshake of an HTTP upgrade request. `protocol`:
 * the subprotocol to select (one of those offered). Returns undefined and
 * answers 400 when the request is not a WebSocket handshake.
 */
export function acceptWebSocket(req: IncomingMessage, socket: Duplex, protocol?: string): ServerWebSocket | undefined {
  const key = req.headers['sec-websocket-key'];
  if (typeof key !== 'string' || (req.headers.upgrade ?? '').toLowerCase() !== 'websocket') {
    socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    return undefined;
  }
  const accept = createHash('sha1').update(key + GUID).digest('base64');
  const lines = ['HTTP/1.1 101 Switching Protocols', 'Upgrade: websocket', 'Connection: Upgrade', `Sec-WebSocket-Accept: ${accept}`];
  if (protocol) lines.push(`Sec-WebSocket-Protocol: ${protocol}`);
  socket.write(lines.join('\r\n') + '\r\n\r\n');
  return new ServerWebSocket(socket);
}

/** The subprotocols a client offered. */
export function offeredProtocols(req: IncomingMessage): string[] {
  const header = req.headers['sec-websocket-protocol'];
  return typeof header === 'string' ? header.split(',').map((p) => p.trim()).filter(Boolean) : [];
}
