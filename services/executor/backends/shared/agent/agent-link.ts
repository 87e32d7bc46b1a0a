/**
 * What the parts of one agent connection (file operations, relayed
 * sockets) use of the channel that carries them: its requests, its ids, its
 * stream, and the verdict that the agent broke the protocol.
 */
import type { Logger } from '../../../../common/logging.js';
import type { Frame, FrameHeader } from './agent-protocol.js';

/** Where the frames about one relayed socket's connections go. */
export interface RelayRoute {
  dispatch(header: FrameHeader, body: Buffer): void;
  /** The stream is gone: every connection ends. */
  closeAll(): void;
}

export interface AgentLink {
  /** Names the sandbox in messages. */
  readonly description: string;
  /** What the agent said it can do (its hello). */
  readonly capabilities: readonly string[];
  readonly logger: Logger | undefined;
  /** True once the channel is lost for good. */
  isLost(): boolean;
  /** Resolves once the channel has a stream (a dropped one may be being replaced); throws once it is lost. */
  attached(): Promise<void>;
  /** A request id not in use. */
  newId(): number;
  /** Sends one frame on the current stream; throws once the stream is lost. */
  send(header: FrameHeader, body?: Uint8Array): void;
  /** Sends request `op` (with id `id` when given) and waits for its answer; an `error` answer rejects with an AgentOpError. */
  request(op: string, fields: Record<string, unknown>, body?: Uint8Array, id?: number): Promise<Frame>;
  /** Ends the channel: the agent broke the protocol. Returns the error to throw. */
  fault(message: string): Error;
  /** Hands the relay frames of listener `id` to `relay` (undefined: to nobody any more). */
  route(id: number, relay: RelayRoute | undefined): void;
}
