/** A byte stream to an exec agent, just past its hello, and how one is sent away. */
import type { Duplex } from 'node:stream';
import { encodeFrame, type AgentHello, type Frame, type FrameDecoder } from './agent-protocol.js';

/** A stream to an agent, just past its hello. */
export interface AgentStream {
  readonly stream: Duplex;
  /** Holds whatever followed the hello in the same read. */
  readonly decoder: FrameDecoder;
  readonly hello: AgentHello;
  /** Frames that arrived together with the hello. */
  readonly buffered: readonly Frame[];
}

/** Tells the agent on `stream` to end everything and closes the stream once that is written. */
export function dismiss(stream: Duplex): void {
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
