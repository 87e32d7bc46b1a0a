/**
 * The wire format between the executor and the exec agent in a task's
 * container (sandbox-image/agent/berth_agent.py documents the operations).
 *
 * A frame is `u32be length-of-rest`, `u32be header-length`, a JSON header,
 * then a raw body (stdin, output, file content). Headers carry a request id,
 * so any number of requests share the one socket. Pure: no I/O here.
 */

/** Frames larger than this are refused by both ends. */
export const MAX_FRAME_BYTES = 256 * 1024 * 1024;

/** Protocol version the agent announces in its hello. */
export const AGENT_PROTOCOL_VERSION = 1;

export interface FrameHeader {
  readonly op: string;
  readonly id: number;
  readonly [field: string]: unknown;
}

export interface Frame {
  readonly header: FrameHeader;
  readonly body: Buffer;
}

/** Encodes one frame. */
export function encodeFrame(header: FrameHeader, body: Uint8Array = Buffer.alloc(0)): Buffer {
  const head = Buffer.from(JSON.stringify(header), 'utf8');
  const total = 4 + head.length + body.length;
  if (total > MAX_FRAME_BYTES) throw new RangeError(`frame of ${total} bytes exceeds ${MAX_FRAME_BYTES}`);
  const prefix = Buffer.allocUnsafe(8);
  prefix.writeUInt32BE(total, 0);
  prefix.writeUInt32BE(head.length, 4);
  return Buffer.concat([prefix, head, body]);
}

export class FrameError extends Error {}

/** Incremental decoder: feed socket chunks, get whole frames. */
export class FrameDecoder {
  #chunks: Buffer[] = [];
  #buffered = 0;
  /** Bytes the frame being received needs in all; chunks are joined only once it is complete. */
  #need = 8;

  /** Returns the frames completed by `chunk`; throws FrameError on a malformed stream. */
  push(chunk: Buffer): Frame[] {
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
    const frames: Frame[] = [];
    for (;;) {
      if (this.#buffered < this.#need) break;
      const data = this.#flatten();
      const total = data.readUInt32BE(0);
      const headLength = data.readUInt32BE(4);
      if (total > MAX_FRAME_BYTES || total < 4 || headLength > total - 4) {
        throw new FrameError(`malformed frame (length ${total}, header ${headLength})`);
      }
      if (data.length < 4 + total) {
        this.#need = 4 + total;
        break;
      }
      this.#need = 8;
      let header: unknown;
      try {
        header = JSON.parse(data.subarray(8, 8 + headLength).toString('utf8'));
      } catch (err) {
        throw new FrameError(`frame header is not JSON: ${(err as Error).message}`);
      }
      if (!isHeader(header)) throw new FrameError('frame header lacks op or id');
      // Copy the body out so the big receive buffer is not kept alive by it.
      const body = Buffer.from(data.subarray(8 + headLength, 4 + total));
      frames.push({ header, body });
      const rest = data.subarray(4 + total);
      this.#chunks = rest.length > 0 ? [rest] : [];
      this.#buffered = rest.length;
    }
    return frames;
  }

  #flatten(): Buffer {
    if (this.#chunks.length !== 1) this.#chunks = [Buffer.concat(this.#chunks)];
    return this.#chunks[0]!;
  }
}

function isHeader(value: unknown): value is FrameHeader {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as { op?: unknown; id?: unknown };
  return typeof v.op === 'string' && typeof v.id === 'number';
}

/** Exit code a foreground command reports: its code, or 128 + the signal that ended it. */
export function foregroundExitCode(code: number | null, signal: number | null): number {
  if (code !== null) return code;
  return signal !== null ? 128 + signal : 1;
}

/** Exit code a background process reports: its code, or minus the signal (-15 for SIGTERM). */
export function backgroundExitCode(code: number | null, signal: number | null): number {
  if (code !== null) return code;
  return signal !== null ? -signal : -1;
}
