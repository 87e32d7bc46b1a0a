/**
 * The exec agent as backends hand it to a sandbox: one archive,
 * dist/agent/berth_agent.pyz, built from sandbox-image/agent/ by
 * `make build` (sandbox-image/agent/build.py: a zipapp with fixed
 * timestamps and sorted entries, so its hash names one agent wherever it
 * was built). This is the one place that finds it, reads it, names it by
 * its content and stages it on the executor's host; every backend takes it
 * from here. A sandbox runs it as `python3 [-I -S] PATH ...`: the archive is
 * its own sys.path[0].
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { FailedPreconditionError } from '../../../../common/errors.js';

/** The archive's file name, on this host and in a sandbox that is given one fixed path for it. */
export const AGENT_FILE_NAME = 'berth_agent.pyz';

/** Where the archive lies inside this installation (the package's root, next to the compiled code). */
const AGENT_ARCHIVE_PATH = path.join('dist', 'agent', AGENT_FILE_NAME);

/** Finds the agent's archive of this installation, from any compiled module of it. */
export function findAgentScript(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    const candidate = path.join(dir, AGENT_ARCHIVE_PATH);
    if (existsSync(candidate)) return candidate;
    dir = path.dirname(dir);
  }
  throw new FailedPreconditionError(
    `${AGENT_ARCHIVE_PATH} was not found in this Berth installation: run 'make build' ` +
      '(it builds the archive with python3 sandbox-image/agent/build.py)',
  );
}

/** Hex digits of the content hash in a copied agent's name. */
export const AGENT_HASH_CHARS = 16;

/** First {@link AGENT_HASH_CHARS} hex digits of the SHA-256 of `content`: the agent's content address. */
export function agentDigest(content: Uint8Array): string {
  return createHash('sha256').update(content).digest('hex').slice(0, AGENT_HASH_CHARS);
}

export interface AgentScript {
  readonly content: Buffer;
  /** {@link agentDigest} of the content. */
  readonly hash: string;
  /** `agent-<hash>.pyz`: a copy under this name is this very agent, so copies of different versions never clash. */
  readonly fileName: string;
}

/** The agent's content and content-addressed name. */
export function agentScriptFrom(content: Buffer): AgentScript {
  const hash = agentDigest(content);
  return { content, hash, fileName: `agent-${hash}.pyz` };
}

let loaded: Promise<AgentScript> | undefined;

/** Reads the archive once per process (`scriptPath`: another file, for tests). */
export function loadAgentScript(scriptPath?: string): Promise<AgentScript> {
  if (scriptPath !== undefined) return readFile(scriptPath).then(agentScriptFrom);
  loaded ??= readFile(findAgentScript()).then(agentScriptFrom);
  loaded.catch(() => (loaded = undefined));
  return loaded;
}

export interface StagedAgent {
  /** `<root>/<digest>`: holds only the archive; bind or copy this directory read-only. */
  readonly dir: string;
  readonly file: string;
  readonly digest: string;
}

/**
 * Copies `source` to `<root>/<digest>/berth_agent.pyz` (directory 0755, file
 * 0644, both owned by the executor's user) unless that file is already there
 * with the same content, so a sandbox started by one Berth version never sees
 * a file another version wrote over it (two executors of different versions
 * may share a state root while an upgrade rolls out), and a staged file is
 * never changed once written. Written under a temporary name and renamed, so
 * a reader never sees half a file; a staged file with other content (a
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
