/**
 * berth_agent.py of this installation: where it is, and its content with a
 * content address, for backends that copy it into a sandbox or onto a host.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { FailedPreconditionError } from '../../../../common/errors.js';

/** Finds berth_agent.py of this package, from either the compiled or the source tree. */
export function findAgentScript(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    const candidate = path.join(dir, 'sandbox-image', 'agent', 'berth_agent.py');
    if (existsSync(candidate)) return candidate;
    dir = path.dirname(dir);
  }
  throw new FailedPreconditionError('sandbox-image/agent/berth_agent.py was not found next to this Berth installation');
}

/** Hex digits of the content hash in a copied agent's file name. */
export const AGENT_HASH_CHARS = 16;

export interface AgentScript {
  readonly content: Buffer;
  /** The first {@link AGENT_HASH_CHARS} hex digits of the content's SHA-256. */
  readonly hash: string;
  /** `agent-<hash>.py`: a copy under this name is this very agent, so copies of different versions never clash. */
  readonly fileName: string;
}

/** The agent's content and content-addressed name. */
export function agentScriptFrom(content: Buffer): AgentScript {
  const hash = createHash('sha256').update(content).digest('hex').slice(0, AGENT_HASH_CHARS);
  return { content, hash, fileName: `agent-${hash}.py` };
}

let loaded: Promise<AgentScript> | undefined;

/** Reads berth_agent.py once per process (`scriptPath`: another file, for tests). */
export function loadAgentScript(scriptPath?: string): Promise<AgentScript> {
  if (scriptPath !== undefined) return readFile(scriptPath).then(agentScriptFrom);
  loaded ??= readFile(findAgentScript()).then(agentScriptFrom);
  loaded.catch(() => (loaded = undefined));
  return loaded;
}
