/**
 * The ssh backend from `terminal.ssh_*` config. The private key is read at
 * executor start, so a missing or unreadable key fails the start, not the
 * first task.
 */
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { BerthConfig } from '../../../common/config.js';
import { FailedPreconditionError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import { executorStateDir } from '../shared/state-root.js';
import { SshBackend, type SshBackendOptions } from './ssh-backend.js';

/** `~` and `~/x` against the executor's home directory. */
export function expandHome(file: string, home = os.homedir()): string {
  if (file === '~') return home;
  return file.startsWith('~/') ? path.join(home, file.slice(2)) : file;
}

/** Where pins are kept when `terminal.ssh_known_hosts` is empty: beside the state root. */
export function defaultKnownHostsPath(stateRoot: string): string {
  return path.join(executorStateDir(stateRoot), 'ssh', 'known_hosts');
}

/** Maps config to backend options (pure apart from the key text passed in). */
export function sshBackendOptionsFromConfig(config: BerthConfig, privateKey: Buffer, logger?: Logger): SshBackendOptions {
  const t = config.terminal;
  return {
    host: t.ssh_host,
    port: t.ssh_port,
    user: t.ssh_user,
    privateKey,
    keyName: t.ssh_key,
    knownHostsPath: t.ssh_known_hosts ? expandHome(t.ssh_known_hosts) : defaultKnownHostsPath(config.executor.state_root),
    hostKeyPolicy: t.ssh_host_key_policy,
    connectTimeoutMs: t.ssh_connect_timeout * 1000,
    ...(logger ? { logger } : {}),
  };
}

export async function createSshBackend(config: BerthConfig, logger: Logger): Promise<SshBackend> {
  const t = config.terminal;
  const missing = (['ssh_host', 'ssh_user', 'ssh_key'] as const).filter((k) => t[k] === '');
  if (missing.length > 0) {
    throw new FailedPreconditionError(`the ssh backend needs ${missing.map((k) => `terminal.${k}`).join(', ')}`);
  }
  let key: Buffer;
  try {
    key = await readFile(expandHome(t.ssh_key));
  } catch (err) {
    throw new FailedPreconditionError(`cannot read terminal.ssh_key ${t.ssh_key}: ${(err as Error).message}`, { cause: err });
  }
  return new SshBackend(sshBackendOptionsFromConfig(config, key, logger));
}
