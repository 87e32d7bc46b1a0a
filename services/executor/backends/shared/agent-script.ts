/**
 * The exec agent's file (sandbox-image/agent/berth_agent.py) as backends
 * hand it to a sandbox: found next to this installation, and staged on the
 * executor's host under a name made of its content's hash, so a sandbox
 * started by one Berth version never sees a file another version wrote over
 * it (two executors of different versions may share a state root while an
 * upgrade rolls out), and a staged file is never changed once written.
 */
import { createHash, randomBytes } from 'node:crypto';
import { chmod, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { findAgentScript } from './agent/agent-script.js';

export { findAgentScript };

export const AGENT_FILE_NAME = 'berth_agent.py';

/** First 16 hex digits of the SHA-256 of `content`: the staged directory's name. */
export function agentDigest(content: Uint8Array): string {
  return createHash('sha256').update(content).digest('hex').slice(0, 16);
}

export interface StagedAgent {
  /** `<root>/<digest>`: holds only berth_agent.py; bind or copy this directory read-only. */
  readonly dir: string;
  readonly file: string;
  readonly digest: string;
}

/**
 * Copies `source` to `<root>/<digest>/berth_agent.py` (directory 0755, file
 * 0644, both owned by the executor's user) unless that file is already there
 * with the same content. Written under a temporary name and renamed, so a
 * reader never sees half a file; a staged file with other content (a
 * damaged one) is replaced the same way.
 */
export async function stageAgentScript(source: string, root: string): Promise<StagedAgent> {
  const content = await readFile(source);
  const digest = agentDigest(content);
  const dir = path.join(root, digest);
  const file = path.join(dir, AGENT_FILE_NAME);
  await mkdir(dir, { recursive: true, mode: 0o755 });
  // Whatever umask created it with, the sandbox's user (any uid) must be able to enter it.
  await chmod(dir, 0o755);
  const existing = await readFile(file).catch(() => undefined);
  if (existing === undefined || agentDigest(existing) !== digest) {
    const temp = `${file}.tmp-${randomBytes(4).toString('hex')}`;
    try {
      await writeFile(temp, content, { mode: 0o644, flag: 'wx' });
      await chmod(temp, 0o644);
      await rename(temp, file);
    } finally {
      await rm(temp, { force: true });
    }
  }
  return { dir, file, digest };
}
