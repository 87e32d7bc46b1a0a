/**
 * The wire format between the executor and the exec agent in a task's
 * sandbox (sandbox-image/agent/berth_agent/__init__.py documents the operations),
 * whatever carries it: the docker backend's Unix socket, or the agent's
 * stdin/stdout (`--stdio`) under `docker exec -i`, ssh or apptainer.
 *
 * A frame is `u32be length-of-rest`, `u32be header-length`, a JSON header,
 * then a raw body (stdin, output, file content). Headers carry a request id,
 * so any number of requests share the one socket. Pure: no I/O here.
 */

/**
 * Largest frame the executor accepts from the sandbox: 1 MiB. Everything the
 * agent sends is small by construction (output in 64 KiB reads, file content
 * in {@link FILE_CHUNK_BYTES} chunks, headers of a few hundred bytes), and
 * anything in the sandbox can speak on the agent's socket, so a frame's
 * length prefix is a claim to check, not a size to allocate: at most this
 * much is ever buffered for one channel's incomplete frame.
 */
export const MAX_INBOUND_FRAME_BYTES = 1024 * 1024;

/**
 * Largest frame the executor sends (and the agent accepts): 16 MiB, for a
 * spawn whose script is as long as the dispatcher lets a tool argument be
 * (8 MiB), plus its environment. File content never needs that much: it
 * moves in chunks.
 */
export const MAX_OUTBOUND_FRAME_BYTES = 16 * 1024 * 1024;

/** File content per `read` reply and per `write` request. */
export const FILE_CHUNK_BYTES = 256 * 1024;

/** The hello is a header only; a longer first frame is not an agent. */
export const MAX_HELLO_FRAME_BYTES = 4 * 1024;

/**
 * Protocol version the agent announces in its hello. 2: file content in
 * chunks, the 1 MiB inbound cap, the token read from a file. (A dropped
 * stream's resume is the `resume` capability, not a new version: an agent
 * without it is still spoken to, and a drop loses it as before.)
 */
export const AGENT_PROTOCOL_VERSION = 2;

/** What the agent said in its first frame. */
export interface AgentHello {
  /** The socket transport's token; empty on stdio, whose stream is private to the executor. */
  readonly token: string;
  readonly version: number;
  readonly pid: number;
  /** Python version running the agent, `3.11.7`. */
  readonly python: string;
  /** `socket` or `stdio`; `socket` for agents older than the field. */
  readonly transport: string;
  /** What the agent can do (`spawn`, `pty`, `files`, ...); empty for agents older than the field. */
  readonly capabilities: readonly string[];
  /**
   * The agent's secret for finding it again after a dropped stream (32 hex
   * digits; empty when it has none): a redialling agent presents it as its
   * token, and a stdio resume must send it before the agent answers.
   */
  readonly resumeKey: string;
  /** This hello comes from an agent found again after a dropped stream, not a fresh start. */
  readonly resumed: boolean;
}

/** What a resume key looks like; anything else is taken as none. */
const RESUME_KEY = /^[0-9a-f]{32}$/;

/**
 * The agent's hello, or undefined when `frame` is not one: a hello is a
 * header only, with op `hello` and a string token.
 */
export function parseHello(frame: Frame): AgentHello | undefined {
  const h = frame.header;
  if (h.op !== 'hello' || typeof h.token !== 'string' || frame.body.length > 0) return undefined;
  const capabilities = Array.isArray(h.capabilities)
    ? h.capabilities.filter((c): c is string => typeof c === 'string').slice(0, 64)
    : [];
  return {
    token: h.token,
    version: typeof h.version === 'number' ? h.version : 0,
    pid: typeof h.pid === 'number' ? h.pid : 0,
    python: typeof h.python === 'string' ? h.python.slice(0, 64) : '',
    transport: typeof h.transport === 'string' ? h.transport.slice(0, 16) : 'socket',
    capabilities,
    resumeKey: typeof h.resume_key === 'string' && RESUME_KEY.test(h.resume_key) ? h.resume_key : '',
    resumed: h.resumed === true,
  };
}

/** The sentence that refuses an agent of another protocol version; names both, and what to do. */
export function versionMismatchMessage(agentVersion: number, description: string): string {
  return (
    `the exec agent of ${description} speaks protocol version ${agentVersion}, ` +
    `this executor speaks version ${AGENT_PROTOCOL_VERSION}; run the agent shipped with this executor`
  );
}

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
export function encodeFrame(
  header: FrameHeader,
  body: Uint8Array = Buffer.alloc(0),
  maxFrameBytes = MAX_OUTBOUND_FRAME_BYTES,
): Buffer {
  // One buffer, the header written straight into it: a spawn's header holds the whole script.
  const json = JSON.stringify(header);
  const headLength = Buffer.byteLength(json, 'utf8');
  const total = 4 + headLength + body.length;
  if (total > maxFrameBytes) throw new RangeError(`frame of ${total} bytes exceeds ${maxFrameBytes}`);
  const frame = Buffer.allocUnsafe(4 + total);
  frame.writeUInt32BE(total, 0);
  frame.writeUInt32BE(headLength, 4);
  frame.write(json, 8, 'utf8');
  frame.set(body, 8 + headLength);
  return frame;
}

export class FrameError extends Error {}

/**
 * Incremental decoder: feed socket chunks, get whole frames. A length prefix
 * over `maxFrameBytes` is refused as soon as its 8 bytes arrive, so the
 * decoder never holds more than one frame's cap plus one socket read.
 */
export class FrameDecoder {
  readonly #maxFrameBytes: number;
  #chunks: Buffer[] = [];
  #buffered = 0;
  /** Bytes the frame being received needs in all; chunks are joined only once it is complete. */
  #need = 8;

  constructor(maxFrameBytes = MAX_INBOUND_FRAME_BYTES) {
    this.#maxFrameBytes = maxFrameBytes;
  }

  /** Bytes held for frames not complete yet. */
  get bufferedBytes(): number {
    return this.#buffered;
  }

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
      if (total > this.#maxFrameBytes) {
        throw new FrameError(`frame of ${total} bytes is over the ${this.#maxFrameBytes}-byte cap`);
      }
      if (total < 4 || headLength > total - 4) {
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
