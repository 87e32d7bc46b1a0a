/**
 * The `local` backend: runs `bash -c` on this host, each command in its own
 * process group, with provider secrets removed from the child environment.
 * Pseudo-terminals come from node-pty, loaded only when a PTY is asked for.
 */
import { createHash } from 'node:crypto';
import { mkdir, lstat, chmod, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { FailedPreconditionError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type { Backend, BackendCapabilities, BackendEnvironment, TaskKey } from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import { withoutProviderSecrets } from '../shared/secret-names.js';
import { defaultStateRoot } from '../shared/state-root.js';
import { LocalEnvironment } from './local-environment.js';
import { SharedLoginSnapshot } from './login-snapshot.js';
import { loadNodePty } from './local-pty.js';

/**
 * The environment a child sees: `base` without provider secrets (unless
 * passed through), then `extra` on top. Pure, so the policy is unit-testable.
 */
export function buildChildEnv(
  base: Readonly<Record<string, string | undefined>>,
  passthrough: readonly string[],
  ...extra: (Readonly<Record<string, string>> | undefined)[]
): Record<string, string> {
  const env = withoutProviderSecrets(base, passthrough);
  for (const layer of extra) Object.assign(env, layer);
  return env;
}

/** Directory name for a task's state: a hash, because tenant and task ids may hold any characters. */
export function stateDirName(key: TaskKey): string {
  return createHash('sha256').update(taskKeyString(key)).digest('hex').slice(0, 32);
}

export interface LocalBackendOptions {
  /** Parent of the per-task state directories; default {@link defaultStateRoot}. */
  readonly stateRoot?: string;
  /** Where new tasks start; default the executor's working directory. */
  readonly initialCwd?: string;
  /** Used to resolve `~`; default `os.homedir()`. */
  readonly homeDir?: string;
  /** Environment children inherit before scrubbing; default `process.env`. */
  readonly baseEnv?: Readonly<Record<string, string | undefined>>;
  /** Secret-looking names that are nevertheless passed to children. */
  readonly envPassthrough?: readonly string[];
  /** Added to every child's environment (after scrubbing). */
  readonly env?: Readonly<Record<string, string>>;
  /** Between SIGTERM and SIGKILL of a process group; default 1000 ms. */
  readonly killGraceMs?: number;
  /**
   * After a group was killed, how long to wait for its output pipes to close
   * before closing them ourselves (a process outside the group may hold them); default 1000 ms.
   */
  readonly pipeDrainMs?: number;
  /** Start each command's bash ahead of it (local-prestart.ts); default true. Tests and benchmarks turn it off to compare. */
  readonly prestart?: boolean;
  readonly logger?: Logger;
}

/** Runs commands on this host. Capabilities report whether node-pty loaded. */
export class LocalBackend implements Backend {
  readonly #options: LocalBackendOptions;
  readonly #stateRoot: string;
  readonly #environments = new Map<string, LocalEnvironment>();
  readonly #loginSnapshot: SharedLoginSnapshot;

  constructor(options: LocalBackendOptions = {}) {
    this.#options = options;
    this.#stateRoot = path.resolve(options.stateRoot ?? defaultStateRoot());
    this.#loginSnapshot = new SharedLoginSnapshot(this.#stateRoot, options.logger?.child({ backend: 'local' }));
  }

  /** How many login shells this backend ran for its tasks' first snapshots (one per environment definition). */
  get loginShellsRun(): number {
    return this.#loginSnapshot.taken;
  }

  get capabilities(): BackendCapabilities {
    return { name: 'local', pty: loadNodePty().module !== undefined, hostFilesystem: true, sharesRpcDir: true };
  }

  async createEnvironment(key: TaskKey): Promise<BackendEnvironment> {
    const id = taskKeyString(key);
    if (this.#environments.has(id)) {
      throw new FailedPreconditionError(`an environment for task ${id} already exists on this executor`);
    }
    await this.#ensureStateRoot();
    const stateDir = path.join(this.#stateRoot, stateDirName(key));
    // A leftover directory is from an executor that died; its snapshot must not leak into the new task.
    await rm(stateDir, { recursive: true, force: true });
    await mkdir(stateDir, { mode: 0o700 });
    const initialCwd = path.resolve(this.#options.initialCwd ?? process.cwd());
    const cwdStat = await stat(initialCwd).catch(() => undefined);
    if (!cwdStat?.isDirectory()) {
      await rm(stateDir, { recursive: true, force: true });
      throw new FailedPreconditionError(`the local backend's starting directory ${initialCwd} is not a directory`);
    }
    const definition = {
      initialCwd,
      homeDir: this.#options.homeDir ?? os.homedir(),
      childEnv: buildChildEnv(this.#options.baseEnv ?? process.env, this.#options.envPassthrough ?? [], this.#options.env),
    };
    const preparedSnapshot = await this.#loginSnapshot.prepare(stateDir, definition);
    const environment = new LocalEnvironment(id, stateDir, {
      ...definition,
      preparedSnapshot,
      killGraceMs: this.#options.killGraceMs ?? 1000,
      pipeDrainMs: this.#options.pipeDrainMs ?? 1000,
      ...(this.#options.prestart === false ? { prestart: false } : {}),
      logger: this.#options.logger?.child({ backend: 'local', task: id }),
    });
    environment.onDisposed = () => this.#environments.delete(id);
    this.#environments.set(id, environment);
    return environment;
  }

  async close(): Promise<void> {
    await Promise.all([...this.#environments.values()].map((e) => e.dispose()));
    await this.#loginSnapshot.close();
  }

  /** The root holds every task's snapshot: it must be ours and private, not a planted symlink. */
  async #ensureStateRoot(): Promise<void> {
    await mkdir(this.#stateRoot, { recursive: true, mode: 0o700 });
    const info = await lstat(this.#stateRoot);
    const uid = typeof process.getuid === 'function' ? process.getuid() : info.uid;
    if (!info.isDirectory() || info.uid !== uid) {
      throw new FailedPreconditionError(
        `state root ${this.#stateRoot} must be a directory owned by uid ${uid}; refusing to use it`,
      );
    }
    if ((info.mode & 0o077) !== 0) await chmod(this.#stateRoot, 0o700);
  }
}
