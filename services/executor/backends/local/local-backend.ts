/**
 * The `local` backend: runs `bash -c` on this host, each command in its own
 * process group, with provider secrets removed from the child environment.
 * Pseudo-terminals come from node-pty, loaded only when a PTY is asked for.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, lstat, chmod, rm, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import type * as NodePty from 'node-pty';
import { FailedPreconditionError, UnavailableError, type BerthError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type {
  Backend,
  BackendCapabilities,
  BackendEnvironment,
  BackgroundHandle,
  BackgroundOptions,
  ExecOptions,
  ExecResult,
  FileStat,
  TaskKey,
} from '../../backend.js';
import { taskKeyString } from '../../backend.js';
import { partialPrefixLength } from '../../output.js';
import { ExecDeadline, interruptedBeforeStart } from '../shared/exec-deadline.js';
import { errnoName, fileErrorFromNode } from '../shared/file-errors.js';
import { assertAbsolute, assertNotReleased, deliverExit, deliverOutput } from '../shared/guards.js';
import { readRegularFile, writeRegularFile } from '../shared/host-files.js';
import { isProviderSecretName } from '../../shell-state-runner.js';
import { defaultStateRoot } from '../shared/state-root.js';

/**
 * The environment a child sees: `base` without provider secrets (unless
 * passed through), then `extra` on top. Pure, so the policy is unit-testable.
 */
export function buildChildEnv(
  base: Readonly<Record<string, string | undefined>>,
  passthrough: readonly string[],
  ...extra: (Readonly<Record<string, string>> | undefined)[]
): Record<string, string> {
  const allowed = new Set(passthrough);
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(base)) {
    if (value === undefined) continue;
    if (isProviderSecretName(name) && !allowed.has(name)) continue;
    env[name] = value;
  }
  for (const layer of extra) Object.assign(env, layer);
  return env;
}

/** Directory name for a task's state: a hash, because tenant and task ids may hold any characters. */
export function stateDirName(key: TaskKey): string {
  return createHash('sha256').update(taskKeyString(key)).digest('hex').slice(0, 32);
}

/** Exit code the shell reports for a process ended by `signal` (128 + n). */
function shellSignalExitCode(signal: NodeJS.Signals | null): number {
  const n = signal ? os.constants.signals[signal] : undefined;
  return n === undefined ? 1 : 128 + n;
}

function signalNumber(signal: NodeJS.Signals | null): number {
  return (signal ? os.constants.signals[signal] : undefined) ?? 0;
}

/** Sends `signal` to process group `pgid`; false when the group no longer exists. */
function signalGroup(pgid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch (err) {
    // EPERM: the group now belongs to someone else (pid reuse); nothing of ours is left in it.
    if (errnoName(err) === 'ESRCH' || errnoName(err) === 'EPERM') return false;
    throw err;
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * SIGTERM to the whole group, then SIGKILL after `graceMs` unless the group
 * is gone earlier. The SIGKILL goes to the group even when the leader already
 * exited, because grandchildren may ignore SIGTERM.
 */
async function terminateGroup(pgid: number, graceMs: number): Promise<void> {
  if (!signalGroup(pgid, 'SIGTERM')) return;
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    await sleep(Math.min(50, Math.max(1, deadline - Date.now())));
    if (!signalGroup(pgid, 0)) return;
  }
  if (!signalGroup(pgid, 'SIGKILL')) return;
  // kill(2) returns before the targets are gone; give them a moment so callers see them dead.
  const killDeadline = Date.now() + 200;
  while (Date.now() < killDeadline && signalGroup(pgid, 0)) await sleep(10);
}


type NodePtyModule = typeof NodePty;
let ptyModule: { module?: NodePtyModule; error?: string } | undefined;

/** Loads node-pty once; a failure is remembered and reported, never silently ignored. */
function loadNodePty(): { module?: NodePtyModule; error?: string } {
  if (!ptyModule) {
    try {
      // node-pty is CommonJS with a native addon; require keeps its load synchronous and lazy.
      ptyModule = { module: createRequire(import.meta.url)('node-pty') as NodePtyModule };
    } catch (err) {
      ptyModule = { error: err instanceof Error ? err.message : String(err) };
    }
  }
  return ptyModule;
}

function requireNodePty(): NodePtyModule {
  const loaded = loadNodePty();
  if (!loaded.module) {
    throw new FailedPreconditionError(
      `PTY mode is unavailable on this executor: node-pty could not be loaded (${loaded.error ?? 'unknown error'}). ` +
        'Run the command without pty=true.',
    );
  }
  return loaded.module;
}

/**
 * A PTY child is wrapped so that, after the script ends, it prints a done
 * token and waits (up to 5 s) for an acknowledgement before exiting. Without
 * this, Linux may discard what is still queued in the terminal when the last
 * process closes it, and the end of the output would be lost.
 */
const PTY_WRAPPER =
  '"$BASH" -c "$1"; __berth_rc=$?; printf "%s" "$2"; __berth_end=$((SECONDS + 5)); ' +
  'while [ "$SECONDS" -lt "$__berth_end" ]; do IFS= read -r -t 1 __berth_l && [ "$__berth_l" = "$3" ] && break; done; ' +
  'exit "$__berth_rc"';

/**
 * Forwards PTY output up to the done token, then acknowledges it and drops
 * the rest. Holds back only bytes that could begin the token.
 */
class PtyDoneFilter {
  readonly #token: Buffer;
  #pending: Buffer = Buffer.alloc(0);
  #done = false;

  constructor(token: string) {
    this.#token = Buffer.from(token);
  }

  get done(): boolean {
    return this.#done;
  }

  /** Returns the bytes to forward; `onDone` runs once when the token arrives. */
  push(chunk: Buffer, onDone: () => void): Buffer {
    if (this.#done) return Buffer.alloc(0);
    const data = this.#pending.length > 0 ? Buffer.concat([this.#pending, chunk]) : chunk;
    const at = data.indexOf(this.#token);
    if (at >= 0) {
      this.#done = true;
      this.#pending = Buffer.alloc(0);
      onDone();
      return data.subarray(0, at);
    }
    const hold = partialPrefixLength(data, [this.#token]);
    this.#pending = Buffer.from(data.subarray(data.length - hold));
    return data.subarray(0, data.length - hold);
  }

  /** Whatever is still held (the process ended without printing the token). */
  flush(): Buffer {
    const rest = this.#done ? Buffer.alloc(0) : this.#pending;
    this.#pending = Buffer.alloc(0);
    return rest;
  }
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
  readonly logger?: Logger;
}

interface ResolvedOptions {
  readonly initialCwd: string;
  readonly homeDir: string;
  readonly childEnv: Readonly<Record<string, string>>;
  readonly killGraceMs: number;
  readonly pipeDrainMs: number;
  readonly logger: Logger | undefined;
}

/** Runs commands on this host. Capabilities report whether node-pty loaded. */
export class LocalBackend implements Backend {
  readonly #options: LocalBackendOptions;
  readonly #stateRoot: string;
  readonly #environments = new Map<string, LocalEnvironment>();

  constructor(options: LocalBackendOptions = {}) {
    this.#options = options;
    this.#stateRoot = path.resolve(options.stateRoot ?? defaultStateRoot());
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
    const environment = new LocalEnvironment(id, stateDir, {
      initialCwd,
      homeDir: this.#options.homeDir ?? os.homedir(),
      childEnv: buildChildEnv(
        this.#options.baseEnv ?? process.env,
        this.#options.envPassthrough ?? [],
        this.#options.env,
      ),
      killGraceMs: this.#options.killGraceMs ?? 1000,
      pipeDrainMs: this.#options.pipeDrainMs ?? 1000,
      logger: this.#options.logger?.child({ backend: 'local', task: id }),
    });
    environment.onDisposed = () => this.#environments.delete(id);
    this.#environments.set(id, environment);
    return environment;
  }

  async close(): Promise<void> {
    await Promise.all([...this.#environments.values()].map((e) => e.dispose()));
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

/** What the environment tracks for each process group it started. */
interface RunningGroup {
  readonly pgid: number;
  /** Kills the group and resolves when the child is gone. */
  readonly kill: () => Promise<void>;
  /** The leader has exited; the entry stays only while other members live on. */
  leaderExited: boolean;
}


/** A command started under a PTY by {@link LocalEnvironment}. */
interface SpawnedPty {
  readonly term: NodePty.IPty;
  /** Strips the wrapper's end token from the output. */
  readonly filter: PtyDoneFilter;
  /** Written back to the wrapper to say its end token was seen. */
  readonly nonce: string;
}

class LocalEnvironment implements BackendEnvironment {
  readonly description: string;
  readonly homeDir: string;
  readonly initialCwd: string;
  readonly stateDir: string;
  /** The state dir: the executor and the task's processes see the same host path. */
  readonly rpcDir: { readonly hostPath: string; readonly sandboxPath: string };
  /** Set by the backend so it forgets disposed environments. */
  onDisposed: (() => void) | undefined;

  readonly #options: ResolvedOptions;
  /** Groups whose leader may still run, or whose leftover members must die with the environment. */
  readonly #groups = new Map<number, RunningGroup>();
  #disposing: Promise<void> | undefined;

  constructor(id: string, stateDir: string, options: ResolvedOptions) {
    this.description = `local:${id}`;
    this.homeDir = options.homeDir;
    this.initialCwd = options.initialCwd;
    this.stateDir = stateDir;
    this.rpcDir = { hostPath: stateDir, sandboxPath: stateDir };
    this.#options = options;
  }

  /**
   * Where bash starts. The runner `cd`s on its own, so if the starting
   * directory was deleted, start in the state dir rather than fail to spawn
   * (the runner then reports the missing directory itself).
   */
  #spawnCwd(): string {
    return existsSync(this.initialCwd) ? this.initialCwd : this.stateDir;
  }

  #env(extra?: Readonly<Record<string, string>>): Record<string, string> {
    return { ...this.#options.childEnv, ...extra };
  }

  /**
   * Marks `pgid`'s leader as exited, then forgets every finished group with
   * no members left. Groups whose members outlived the leader are kept so
   * dispose kills them; checking all of them here keeps the window in which a
   * recycled pid could be mistaken for ours short.
   */
  #forgetIfEmpty(pgid: number): void {
    const group = this.#groups.get(pgid);
    if (group) group.leaderExited = true;
    for (const [id, g] of this.#groups) {
      if (g.leaderExited && !signalGroup(id, 0)) this.#groups.delete(id);
    }
  }

  #spawnError(err: unknown): BerthError {
    const detail = err instanceof Error ? err.message : String(err);
    if (errnoName(err) === 'ENOENT') {
      return new UnavailableError(
        `cannot start bash for ${this.description} (is bash installed and ${this.initialCwd} present?): ${detail}`,
        { cause: err },
      );
    }
    return new UnavailableError(`cannot start bash for ${this.description}: ${detail}`, { cause: err });
  }

  async exec(options: ExecOptions): Promise<ExecResult> {
    assertNotReleased(this, this.#disposing);
    const early = interruptedBeforeStart(options);
    if (early) return early;
    return options.pty ? this.#execPty(options) : this.#execPipes(options);
  }

  #execPipes(options: ExecOptions): Promise<ExecResult> {
    return new Promise<ExecResult>((resolve, reject) => {
      let child: ChildProcess;
      try {
        child = spawn('bash', ['-c', options.script], {
          cwd: this.#spawnCwd(),
          env: this.#env(options.env),
          detached: true,
          stdio: ['pipe', 'pipe', 'pipe'],
        });
      } catch (err) {
        reject(this.#spawnError(err));
        return;
      }
      const pid = child.pid;
      let killing: Promise<void> | undefined;
      let drainTimer: NodeJS.Timeout | undefined;
      let closed = false;

      const kill = (): Promise<void> => {
        if (pid === undefined) return Promise.resolve();
        killing ??= terminateGroup(pid, options.killGraceMs ?? this.#options.killGraceMs).then(() => {
          if (closed) return;
          // Whoever still holds our pipes is outside the group; stop waiting for them.
          drainTimer = setTimeout(() => {
            child.stdout?.destroy();
            child.stderr?.destroy();
          }, this.#options.pipeDrainMs);
        });
        return killing;
      };
      const deadline = new ExecDeadline(options, () => void kill());

      child.once('error', (err) => {
        // Spawn failure: no 'close' follows a failed spawn when pid is undefined.
        if (pid === undefined) {
          deadline.dispose();
          reject(this.#spawnError(err));
        } else {
          this.#options.logger?.warn({ err }, 'child process error');
        }
      });
      if (pid === undefined) return;
      this.#groups.set(pid, { pgid: pid, kill, leaderExited: false });

      child.stdout?.on('data', (chunk: Buffer) => deliverOutput(options.onOutput, chunk, this.#options.logger));
      child.stderr?.on('data', (chunk: Buffer) => deliverOutput(options.onOutput, chunk, this.#options.logger));
      // EPIPE when the script exits without reading its stdin: not an error of ours.
      child.stdin?.on('error', () => undefined);
      child.stdin?.end(options.stdin === undefined ? undefined : Buffer.from(options.stdin));

      // 'close' fires once the process exited and both pipes ended: no output is lost.
      child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
        closed = true;
        deadline.dispose();
        if (drainTimer) clearTimeout(drainTimer);
        const settle = () => {
          this.#forgetIfEmpty(pid);
          resolve(deadline.result(code ?? shellSignalExitCode(signal)));
        };
        // If we are mid-kill, let SIGKILL reach stragglers before reporting.
        if (killing) void killing.then(settle);
        else settle();
      });
    });
  }

  /**
   * `bash -c script` under a new PTY, wrapped so that the end of its output
   * can be told apart (PTY_WRAPPER); the filter strips the end token. Throws
   * the backend's spawn error.
   */
  #spawnPty(script: string, env: Readonly<Record<string, string>> | undefined): SpawnedPty {
    const ptyLib = requireNodePty();
    const nonce = randomBytes(8).toString('hex');
    const token = `__berth_pty_done_${nonce}__`;
    try {
      const term = ptyLib.spawn('bash', ['-c', PTY_WRAPPER, 'berth-pty', script, token, nonce], {
        name: 'xterm-256color',
        cols: 200,
        rows: 50,
        cwd: this.#spawnCwd(),
        env: this.#env(env),
        encoding: null,
      });
      return { term, filter: new PtyDoneFilter(token), nonce };
    } catch (err) {
      throw this.#spawnError(err);
    }
  }

  #execPty(options: ExecOptions): Promise<ExecResult> {
    return new Promise<ExecResult>((resolve, reject) => {
      let spawned: SpawnedPty;
      try {
        spawned = this.#spawnPty(options.script, options.env);
      } catch (err) {
        reject(err);
        return;
      }
      const { term, filter, nonce } = spawned;
      const pid = term.pid;
      let killing: Promise<void> | undefined;
      const kill = (): Promise<void> =>
        (killing ??= terminateGroup(pid, options.killGraceMs ?? this.#options.killGraceMs));
      this.#groups.set(pid, { pgid: pid, kill, leaderExited: false });
      const deadline = new ExecDeadline(options, () => void kill());

      const dataSub = term.onData((data: string | Buffer) => {
        const chunk = typeof data === 'string' ? Buffer.from(data) : data;
        const forward = filter.push(chunk, () => term.write(`${nonce}\n`));
        deliverOutput(options.onOutput, forward, this.#options.logger);
      });
      const exitSub = term.onExit(({ exitCode, signal }) => {
        deadline.dispose();
        // Without the done token (killed), give the reader a moment for bytes already in flight.
        const settleDelayMs = filter.done ? 0 : 50;
        setTimeout(() => {
          deliverOutput(options.onOutput, filter.flush(), this.#options.logger);
          dataSub.dispose();
          exitSub.dispose();
          const finish = () => {
            this.#forgetIfEmpty(pid);
            resolve(deadline.result(signal ? 128 + signal : exitCode));
          };
          if (killing) void killing.then(finish);
          else finish();
        }, settleDelayMs);
      });

      writePtyInput(term, options.stdin);
    });
  }

  async startBackground(options: BackgroundOptions): Promise<BackgroundHandle> {
    assertNotReleased(this, this.#disposing);
    return options.pty ? this.#backgroundPty(options) : this.#backgroundPipes(options);
  }

  #backgroundPipes(options: BackgroundOptions): BackgroundHandle {
    let child: ChildProcess;
    try {
      child = spawn('bash', ['-c', options.script], {
        cwd: this.#spawnCwd(),
        env: this.#env(options.env),
        detached: true,
        stdio: ['pipe', 'pipe', 'pipe'],
      });
    } catch (err) {
      throw this.#spawnError(err);
    }
    const pid = child.pid;
    if (pid === undefined) {
      // The 'error' event carries the reason; it is emitted asynchronously and must be consumed.
      child.once('error', () => undefined);
      throw this.#spawnError(new Error('spawn failed'));
    }
    child.on('error', (err) => this.#options.logger?.warn({ err, pid }, 'background process error'));
    child.stdout?.on('data', (chunk: Buffer) => deliverOutput(options.onOutput, chunk, this.#options.logger));
    child.stderr?.on('data', (chunk: Buffer) => deliverOutput(options.onOutput, chunk, this.#options.logger));
    child.stdin?.on('error', () => undefined);

    let exited = false;
    const exitedPromise = new Promise<void>((resolveExit) => {
      let reported = false;
      const report = (code: number | null, signal: NodeJS.Signals | null) => {
        if (reported) return;
        reported = true;
        exited = true;
        this.#forgetIfEmpty(pid);
        deliverExit(options.onExit, code ?? -signalNumber(signal), this.#options.logger);
        resolveExit();
      };
      child.once('close', report);
      child.once('exit', (code, signal) => {
        // Normally 'close' follows at once; a straggler holding the pipes must not delay the exit report forever.
        setTimeout(() => report(code, signal), this.#options.pipeDrainMs).unref();
      });
    });

    let killing: Promise<void> | undefined;
    const kill = (): Promise<void> =>
      (killing ??= terminateGroup(pid, this.#options.killGraceMs).then(() =>
        Promise.race([exitedPromise, sleep(this.#options.pipeDrainMs + 1000)]),
      ));
    this.#groups.set(pid, { pgid: pid, kill, leaderExited: false });

    return {
      pid,
      write: (data) =>
        new Promise<void>((resolveWrite, rejectWrite) => {
          const stdin = child.stdin;
          if (exited || !stdin || stdin.writableEnded || stdin.destroyed) {
            rejectWrite(new FailedPreconditionError(exited ? 'the process has exited' : 'stdin is closed'));
            return;
          }
          stdin.write(typeof data === 'string' ? data : Buffer.from(data), (err) =>
            err ? rejectWrite(new FailedPreconditionError(`cannot write to stdin: ${err.message}`)) : resolveWrite(),
          );
        }),
      closeStdin: () =>
        new Promise<void>((resolveClose) => {
          const stdin = child.stdin;
          if (!stdin || stdin.writableEnded || stdin.destroyed) {
            resolveClose();
            return;
          }
          stdin.end(() => resolveClose());
        }),
      kill,
    };
  }

  #backgroundPty(options: BackgroundOptions): BackgroundHandle {
    const { term, filter, nonce } = this.#spawnPty(options.script, options.env);
    const pid = term.pid;
    let exited = false;
    let stdinClosed = false;
    let lastInputEndedLine = true;
    const exitedPromise = new Promise<void>((resolveExit) => {
      term.onData((data: string | Buffer) => {
        const chunk = typeof data === 'string' ? Buffer.from(data) : data;
        deliverOutput(options.onOutput, filter.push(chunk, () => term.write(`${nonce}\n`)), this.#options.logger);
      });
      term.onExit(({ exitCode, signal }) => {
        setTimeout(
          () => {
            exited = true;
            deliverOutput(options.onOutput, filter.flush(), this.#options.logger);
            this.#forgetIfEmpty(pid);
            deliverExit(options.onExit, signal ? -signal : exitCode, this.#options.logger);
            resolveExit();
          },
          filter.done ? 0 : 50,
        );
      });
    });
    let killing: Promise<void> | undefined;
    const kill = (): Promise<void> =>
      (killing ??= terminateGroup(pid, this.#options.killGraceMs).then(() =>
        Promise.race([exitedPromise, sleep(this.#options.pipeDrainMs + 1000)]),
      ));
    this.#groups.set(pid, { pgid: pid, kill, leaderExited: false });

    return {
      pid,
      write: (data) => {
        if (exited || stdinClosed) {
          return Promise.reject(new FailedPreconditionError(exited ? 'the process has exited' : 'stdin is closed'));
        }
        const bytes = typeof data === 'string' ? Buffer.from(data) : Buffer.from(data);
        if (bytes.length > 0) lastInputEndedLine = bytes[bytes.length - 1] === 0x0a;
        term.write(bytes);
        return Promise.resolve();
      },
      closeStdin: () => {
        if (!exited && !stdinClosed) {
          stdinClosed = true;
          // ^D is EOF only at the start of a line; a first one flushes a partial line.
          term.write(lastInputEndedLine ? '\x04' : '\x04\x04');
        }
        return Promise.resolve();
      },
      kill,
    };
  }

  async readFile(absPath: string): Promise<Buffer> {
    assertAbsolute(absPath);
    try {
      return await readRegularFile(absPath);
    } catch (err) {
      throw fileErrorFromNode(err, absPath, 'read');
    }
  }

  async writeFile(absPath: string, data: Uint8Array): Promise<void> {
    assertAbsolute(absPath);
    try {
      await mkdir(path.dirname(absPath), { recursive: true });
      await writeRegularFile(absPath, data);
    } catch (err) {
      throw fileErrorFromNode(err, absPath, 'write');
    }
  }

  async stat(absPath: string): Promise<FileStat> {
    assertAbsolute(absPath);
    try {
      const info = await stat(absPath);
      return { exists: true, isDirectory: info.isDirectory(), sizeBytes: info.size };
    } catch (err) {
      if (errnoName(err) === 'ENOENT' || errnoName(err) === 'ENOTDIR') {
        return { exists: false, isDirectory: false, sizeBytes: 0 };
      }
      throw fileErrorFromNode(err, absPath, 'stat');
    }
  }

  dispose(): Promise<void> {
    this.#disposing ??= (async () => {
      await Promise.all([...this.#groups.values()].map((g) => g.kill().catch(() => undefined)));
      this.#groups.clear();
      await rm(this.stateDir, { recursive: true, force: true });
      this.onDisposed?.();
    })();
    return this.#disposing;
  }
}

/** Types the script's stdin into the terminal, then EOF (^D; two when the last line is unterminated). */
function writePtyInput(term: NodePty.IPty, stdin: Uint8Array | string | undefined): void {
  const bytes = stdin === undefined ? Buffer.alloc(0) : Buffer.from(stdin);
  if (bytes.length > 0) term.write(bytes);
  const endsLine = bytes.length === 0 || bytes[bytes.length - 1] === 0x0a;
  term.write(endsLine ? '\x04' : '\x04\x04');
}
