/**
 * The limits and tuning of one exec agent channel (agent-channel.ts): how
 * much may wait unsent, how many requests may be open, how long an answer
 * may take, and how a dropped stream is survived.
 */
import { MAX_OUTBOUND_FRAME_BYTES } from './agent-protocol.js';
import type { AgentReattach } from './agent-resume.js';

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
  /** `REATTACH_TIMEOUT_MS` of agent-resume.ts unless set. */
  readonly reattachTimeoutMs?: number;
  /** `LIVENESS_PROBE_AFTER_MS` of agent-liveness.ts unless set. */
  readonly livenessProbeAfterMs?: number;
  /** `LIVENESS_TIMEOUT_MS` of agent-liveness.ts unless set. */
  readonly livenessTimeoutMs?: number;
}
