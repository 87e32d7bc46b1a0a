/**
 * A task's host directory, bind-mounted at /run/berth in its container:
 * the agent's archive, its token and socket, the task's account files, a
 * resolv.conf, the entrypoint's "cannot run the agent" marker and a `state`
 * directory for the shell-state runner.
 *
 * It is prepared afresh before every start of a container, a resumed
 * (restarted) one included, so nothing a command of an earlier run could
 * have touched is ever used again. The directory and everything the agent
 * trusts in it are the executor's (root's, where the executor is root),
 * never writable by the task's uid, so a command can neither rename,
 * replace nor plant a file beside the agent, whether the executor is root
 * or not:
 *
 * | entry | mode | who needs it |
 * | --- | --- | --- |
 * | the directory | 0755 | commands only pass through it to `state` and execute_code's run dirs |
 * | `berth_agent.pyz`, `agent-token` | 0600 | the container's root, at the agent's start: as their owner (a root executor, or a rootless engine run by the executor's uid), or through CAP_DAC_READ_SEARCH, which it holds until the agent has read them (a non-root executor on a rootful engine) |
 * | `passwd`, `group`, `resolv.conf` | 0644 | bound read-only over /etc |
 * | `agent-unavailable` | 0600, or 0622 under a non-root executor | created empty; the entrypoint writes its reason into it (it may create nothing in the directory); only read while a start waits for the agent's hello, before any command runs |
 * | `state` | 0755 of the task's uid, or 0777 where the executor may not chown | the task's shell state |
 *
 * Whatever an older executor's layout left writable there, symlinks to host
 * files included, is removed, never followed: `rm` removes links
 * themselves, and files are created exclusively.
 */
import { constants as fsConstants } from 'node:fs';
import { chmod, copyFile, lchown, lstat, mkdir, open, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { FailedPreconditionError } from '../../../common/errors.js';
import { AGENT_FILE_NAME } from '../shared/agent/agent-script.js';
import { ACCOUNT_FILES, AGENT_TOKEN_FILE, AGENT_UNAVAILABLE_FILE, RESOLV_CONF_FILE } from './container-spec.js';
import type { TaskIdentity } from './task-identity.js';

/**
 * Whether the executor runs as uid 0: then what it writes in a host
 * directory is the container root's (the agent's) as the owner. Otherwise
 * the container's root reads the executor's files through its
 * CAP_DAC_READ_SEARCH (or owns them, under a rootless engine of the
 * executor's uid), and the marker is the one file it must write.
 */
function executorIsRoot(): boolean {
  return process.getuid?.() === 0;
}

/** The most of the marker the executor reads. */
const MARKER_MAX_BYTES = 4096;

export interface HostDirContent {
  /** The agent's archive on the executor's host. */
  readonly agentScriptPath: string;
  /** The task's account files (see task-identity.ts). */
  readonly accounts: { readonly passwd: string; readonly group: string };
  /** Under `docker.network: isolated`: the upstream resolvers the container asks itself. */
  readonly resolvers?: readonly string[];
}

/** Removes `file` (a link or directory left there included) and creates it afresh with `mode`. */
async function replaceFile(file: string, content: string, mode: number): Promise<void> {
  await rm(file, { recursive: true, force: true });
  await writeFile(file, content, { flag: 'wx', mode });
  // The umask may have taken bits the container's root needs.
  await chmod(file, mode);
}

/** Prepares `hostDir` for one start of the task's container (see the top of this file). */
export async function prepareHostDir(hostDir: string, identity: TaskIdentity, content: HostDirContent): Promise<void> {
  const root = executorIsRoot();
  await mkdir(path.dirname(hostDir), { recursive: true, mode: 0o700 });
  await mkdir(hostDir, { recursive: true, mode: 0o755 });
  const hostInfo = await lstat(hostDir);
  if (!hostInfo.isDirectory()) throw new FailedPreconditionError(`${hostDir} is not a directory; refusing to use it`);
  // One an older executor gave the sandbox user goes back to the container's root where that is allowed.
  if (root && hostInfo.uid !== 0) await lchown(hostDir, 0, 0).catch(() => undefined);
  await chmod(hostDir, 0o755);
  const state = path.join(hostDir, 'state');
  const stateInfo = await lstat(state).catch(() => undefined);
  if (stateInfo && !stateInfo.isDirectory()) await rm(state, { force: true });
  await mkdir(state, { recursive: true, mode: 0o755 });
  try {
    await lchown(state, identity.uid, identity.gid);
  } catch {
    // An executor without CAP_CHOWN (not root, or root with its capabilities dropped, as in compose).
    await chmod(state, 0o777);
  }
  await rm(path.join(hostDir, AGENT_TOKEN_FILE), { recursive: true, force: true });
  await replaceFile(path.join(hostDir, AGENT_UNAVAILABLE_FILE), '', root ? 0o600 : 0o622);
  const agent = path.join(hostDir, AGENT_FILE_NAME);
  await rm(agent, { recursive: true, force: true });
  await copyFile(content.agentScriptPath, agent, fsConstants.COPYFILE_EXCL);
  await chmod(agent, 0o600);
  await replaceFile(path.join(hostDir, ACCOUNT_FILES.passwd), content.accounts.passwd, 0o644);
  await replaceFile(path.join(hostDir, ACCOUNT_FILES.group), content.accounts.group, 0o644);
  if (content.resolvers) await replaceFile(path.join(hostDir, RESOLV_CONF_FILE), resolvConf(content.resolvers), 0o644);
}

/** A resolv.conf naming `resolvers`. */
function resolvConf(resolvers: readonly string[]): string {
  return [
    "# Berth: Docker's embedded DNS (127.0.0.11) is closed in this container; names resolve through these.",
    ...resolvers.slice(0, 3).map((r) => `nameserver ${r}`),
    'options ndots:0',
    '',
  ].join('\n');
}

/**
 * Writes the agent's token where only the container's root, the agent, can
 * read it (0600, the executor's; see the top of this file): the file is
 * gone before any command of the task runs. Never follows a link left in
 * the directory.
 */
export async function writeTokenFile(file: string, token: string): Promise<void> {
  await rm(file, { force: true });
  const handle = await open(file, fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW, 0o600);
  try {
    await handle.writeFile(token, 'utf8');
  } finally {
    await handle.close();
  }
}

/**
 * The reason the entrypoint wrote into the marker (it cannot run the agent),
 * or undefined while the marker is empty. Regular files only, never through
 * a link, at most a few KiB.
 */
export async function agentUnavailableReason(hostDir: string): Promise<string | undefined> {
  let handle;
  try {
    handle = await open(path.join(hostDir, AGENT_UNAVAILABLE_FILE), fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
  } catch {
    return undefined;
  }
  try {
    const info = await handle.stat();
    if (!info.isFile() || info.size === 0) return undefined;
    const buffer = Buffer.alloc(Math.min(info.size, MARKER_MAX_BYTES));
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    return buffer.subarray(0, bytesRead).toString('utf8');
  } finally {
    await handle.close();
  }
}
