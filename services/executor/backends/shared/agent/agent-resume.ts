/**
 * A resume, when a dropped stream finds its agent again: the backend's way
 * to find it, within a time limit; the check that the agent that answered is
 * the one that was lost; and that its `resumed` answer names only processes
 * the executor asked about.
 */
import { timingSafeEqual } from 'node:crypto';
import type { AgentHello, Frame } from './agent-protocol.js';
import { dismiss, type AgentStream } from './agent-stream.js';

/**
 * How long the channel waits for its agent to come back after the stream
 * dropped (the agent redials, or a new stdio start finds it) before it
 * counts the agent as lost.
 */
export const REATTACH_TIMEOUT_MS = 15_000;

/**
 * Finds the agent of `previous` again after its stream dropped: resolves
 * with a new stream whose hello says `resumed`; rejects when it cannot
 * (the sandbox is gone, nobody dialled in). `signal` aborts when the
 * channel stops waiting.
 */
export type AgentReattach = (previous: AgentHello, signal: AbortSignal) => Promise<AgentStream>;

/**
 * The agent of `previous`, found again by `reattach` within `timeoutMs`: its
 * new stream, once its hello says it is that agent resumed (another one is
 * sent away).
 */
export async function findAgentAgain(
  reattach: AgentReattach,
  previous: AgentHello,
  signal: AbortSignal,
  timeoutMs: number,
): Promise<AgentStream> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const next = await Promise.race([
      reattach(previous, signal),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`not found again within ${timeoutMs} ms`)), timeoutMs);
        timer.unref();
      }),
    ]);
    const h = next.hello;
    if (!isResumedAgent(previous, h)) {
      dismiss(next.stream);
      throw new Error(`another agent answered (pid ${h.pid}, resumed ${h.resumed})`);
    }
    return next;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The ids a `resumed` answer names, or undefined when it is malformed: each
 * must be one the executor asked about, so no more than were asked.
 */
export function parseResumed(frame: Frame, asked: ReadonlySet<number>): Set<number> | undefined {
  const procs = frame.header.procs;
  if (frame.header.op !== 'resumed' || !Array.isArray(procs) || procs.length > asked.size) return undefined;
  const alive = new Set<number>();
  for (const id of procs) {
    if (typeof id !== 'number' || !asked.has(id)) return undefined;
    alive.add(id);
  }
  return alive;
}

/** Whether `next` is `previous`'s agent resumed: same process, same version, the same (secret) resume key. */
export function isResumedAgent(previous: AgentHello, next: AgentHello): boolean {
  return next.resumed && next.pid === previous.pid && next.version === previous.version && sameKey(next.resumeKey, previous.resumeKey);
}

function sameKey(a: string, b: string): boolean {
  const ab = Buffer.from(a, 'utf8');
  const bb = Buffer.from(b, 'utf8');
  return ab.length === bb.length && ab.length > 0 && timingSafeEqual(ab, bb);
}
