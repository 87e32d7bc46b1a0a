/**
 * Another build of the exec agent's archive: this checkout's sources with
 * one module edited (an agent of another protocol version, one without a
 * capability), built by the same sandbox-image/agent/build.py as the real
 * one. For tests of how the executor meets an agent that is not its own.
 */
import { execFileSync } from 'node:child_process';
import { cp, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** sandbox-image/agent/ of this checkout (tests run compiled, from dist/test/support). */
export const AGENT_SOURCE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'sandbox-image', 'agent');

/**
 * Builds `<dir>/berth_agent.pyz` from the agent's sources with `module`
 * (a path inside sandbox-image/agent/, say `berth_agent/protocol.py`)
 * passed through `edit`; throws when the edit changed nothing, so a test
 * never runs the real agent thinking it runs a variant. Returns its path.
 */
export async function buildAgentVariant(dir: string, module: string, edit: (source: string) => string): Promise<string> {
  const src = path.join(dir, 'agent-src');
  await cp(AGENT_SOURCE_DIR, src, { recursive: true, filter: (p) => !p.includes('__pycache__') });
  try {
    const file = path.join(src, module);
    const before = await readFile(file, 'utf8');
    const after = edit(before);
    if (after === before) throw new Error(`the edit of ${module} changed nothing: the agent's source no longer has what the test replaces`);
    await writeFile(file, after);
    const out = path.join(dir, 'berth_agent.pyz');
    execFileSync('python3', [path.join(src, 'build.py'), out, src], { stdio: ['ignore', 'ignore', 'pipe'] });
    return out;
  } finally {
    await rm(src, { recursive: true, force: true });
  }
}
