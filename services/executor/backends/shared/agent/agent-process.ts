/** A process the exec agent started, as the kit's {@link SandboxProcess}: its exit, stdin and kill as requests. */
import { FailedPreconditionError } from '../../../../common/errors.js';
import type { ProcessExit, SandboxProcess } from '../sandbox-channel.js';
import { AgentOpError } from './agent-op-error.js';
import type { Frame } from './agent-protocol.js';

/** Sends a request about process `proc` and waits for its answer. */
export type ProcessRequest = (op: string, fields: Record<string, unknown>, body?: Uint8Array, extraTimeoutMs?: number) => Promise<unknown>;

/** How the process ended, from its `exit` frame (with the sandbox's cgroup counters when the agent reports them). */
export function exitOf(frame: Frame): ProcessExit {
  const c = (frame.header.counters ?? {}) as { oom_kill?: unknown; pids_max?: unknown };
  return {
    code: typeof frame.header.code === 'number' ? frame.header.code : null,
    signal: typeof frame.header.signal === 'number' ? frame.header.signal : null,
    counters: {
      ...(typeof c.oom_kill === 'number' ? { oomKills: c.oom_kill } : {}),
      ...(typeof c.pids_max === 'number' ? { pidsMaxHits: c.pids_max } : {}),
    },
  };
}

/** The started process `id` (`started`: its `started` frame), whose `exit` frame `exitFrame` will bring. */
export function agentProcess(id: number, started: Frame, exitFrame: Promise<Frame>, request: ProcessRequest): SandboxProcess {
  const exited = exitFrame.then(exitOf);
  // The caller awaits it later; a connection lost in between must not count as unhandled.
  exited.catch(() => undefined);
  const procOp = async (op: string, fields: Record<string, unknown>, body?: Uint8Array, extraTimeoutMs?: number): Promise<void> => {
    try {
      await request(op, { ...fields, proc: id }, body, extraTimeoutMs);
    } catch (err) {
      if (err instanceof AgentOpError) {
        throw new FailedPreconditionError(err.errno === 'ESRCH' ? 'the process has exited' : err.message);
      }
      throw err;
    }
  };
  return {
    pid: Number(started.header.pid),
    exited,
    write: (data) => procOp('stdin', {}, Buffer.from(data)),
    closeStdin: () => procOp('eof', {}),
    kill: (graceMs) => procOp('kill', { grace_ms: graceMs }, undefined, graceMs),
  };
}
