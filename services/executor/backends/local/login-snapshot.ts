/**
 * The local backend's login-shell snapshot, taken once per executor and
 * environment definition rather than once per task. Every local task starts
 * from the same definition (the scrubbed child environment, starting
 * directory and home), so each task's first snapshot would be the same file;
 * a login shell costs hundreds of milliseconds here, and fifty new tasks at
 * once used to run fifty of them side by side.
 *
 * The snapshot is re-taken when its inputs change: the definition, or the
 * size, modification time or inode of a startup file bash reads for a login
 * shell (/etc/profile and /etc/profile.d/*, /etc/bash.bashrc, and
 * ~/.bash_profile, ~/.bash_login, ~/.profile, ~/.bashrc, ~/.bash_aliases of
 * the children's HOME). A file those source in turn is not watched: after
 * changing one, restart the executor (docs/backends/local.md says so).
 *
 * Each task gets its own copy in its state dir, as its prepared snapshot
 * (BackendEnvironment.preparedSnapshot). When the login shell fails, no copy
 * is made and the task's runner bootstraps itself as before (login shell,
 * then a plain one), so a broken profile is reported the usual way.
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { copyFile, readdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../../../common/logging.js';
import { bootstrapSnapshotPath, buildBootstrapScript } from '../shared/shell-bootstrap.js';

/** What every local task's first snapshot depends on, besides the startup files. */
export interface LoginDefinition {
  readonly childEnv: Readonly<Record<string, string>>;
  readonly initialCwd: string;
  readonly homeDir: string;
}

const BOOTSTRAP_TIMEOUT_MS = 30_000;
const SYSTEM_FILES = ['/etc/profile', '/etc/bash.bashrc'];
const HOME_FILES = ['.bash_profile', '.bash_login', '.profile', '.bashrc', '.bash_aliases'];

/** size:mtime:inode of each startup file (or `-` when absent), in a fixed order. */
async function startupFilesState(home: string): Promise<string> {
  const profileD = await readdir('/etc/profile.d').catch(() => [] as string[]);
  const files = [
    ...SYSTEM_FILES,
    '/etc/profile.d',
    ...profileD.sort().map((f) => path.join('/etc/profile.d', f)),
    ...HOME_FILES.map((f) => path.join(home, f)),
  ];
  const states = await Promise.all(
    files.map(async (f) => {
      const s = await stat(f).catch(() => undefined);
      return `${f}=${s ? `${s.size}:${s.mtimeMs}:${s.ino}` : '-'}`;
    }),
  );
  return states.join('\n');
}

/** Runs the bootstrap script as a task's runner would, outside any task; true when it wrote `target`. */
function runBootstrap(target: string, definition: LoginDefinition): Promise<boolean> {
  return new Promise((resolve) => {
    const child = spawn('bash', ['-c', buildBootstrapScript(target, definition.initialCwd, true)], {
      cwd: definition.initialCwd,
      env: { ...definition.childEnv },
      stdio: 'ignore',
      detached: true,
    });
    const timer = setTimeout(() => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    }, BOOTSTRAP_TIMEOUT_MS);
    child.on('error', () => {
      clearTimeout(timer);
      resolve(false);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve(code === 0);
    });
  });
}

export class SharedLoginSnapshot {
  readonly #dir: string;
  readonly #logger: Logger | undefined;
  #current: { readonly inputs: string; readonly file: Promise<string | undefined> } | undefined;
  #taken = 0;

  /** `dir`: private to the executor (its state root); the shared file lives there. */
  constructor(dir: string, logger?: Logger) {
    this.#dir = dir;
    this.#logger = logger;
  }

  /** How many login shells were run so far (tests and metrics). */
  get taken(): number {
    return this.#taken;
  }

  /**
   * Copies the current snapshot into `stateDir` as the task's first
   * snapshot; resolves to its path, or undefined when there is none (the
   * login shell failed: the task's runner bootstraps itself).
   */
  async prepare(stateDir: string, definition: LoginDefinition): Promise<string | undefined> {
    const shared = await this.#snapshot(definition);
    if (shared === undefined) return undefined;
    const target = bootstrapSnapshotPath(stateDir);
    try {
      await copyFile(shared, target);
      return target;
    } catch (err) {
      // Re-taken meanwhile (the old file removed): this task bootstraps itself.
      this.#logger?.debug({ err }, 'the shared login snapshot went before it was copied');
      return undefined;
    }
  }

  async #snapshot(definition: LoginDefinition): Promise<string | undefined> {
    const { childEnv, initialCwd, homeDir } = definition;
    const home = childEnv.HOME ?? homeDir;
    const inputs = createHash('sha256')
      .update(JSON.stringify([childEnv, initialCwd, homeDir]))
      .update(await startupFilesState(home))
      .digest('hex');
    if (this.#current?.inputs !== inputs) {
      const previous = this.#current;
      this.#current = { inputs, file: this.#take(inputs, definition) };
      if (previous) {
        void previous.file.then(async (f) => {
          if (f) await rm(f, { force: true });
        });
      }
    }
    return this.#current.file;
  }

  async #take(inputs: string, definition: LoginDefinition): Promise<string | undefined> {
    this.#taken += 1;
    const file = path.join(this.#dir, `login-snapshot.${inputs.slice(0, 16)}.${randomBytes(4).toString('hex')}.sh`);
    if (await runBootstrap(file, definition)) {
      this.#logger?.debug({ file }, 'login-shell snapshot taken for new local tasks');
      return file;
    }
    await rm(file, { force: true });
    this.#logger?.warn('the login shell did not write a snapshot; each new local task tries its own');
    return undefined;
  }

  /** Removes the shared file (executor shutdown). */
  async close(): Promise<void> {
    const file = await this.#current?.file;
    this.#current = undefined;
    if (file) await rm(file, { force: true });
  }
}
