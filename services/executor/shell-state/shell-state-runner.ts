/**
 * The shared shell-state runner (spec §3). Every command runs in a fresh
 * `bash -c`, yet cwd, exported variables, functions and aliases persist per
 * task, over any backend that can run `bash -c`:
 *
 * 1. Once per environment a login shell (`bash -l`) writes a snapshot
 *    (`export -p`, `declare -f`, `alias -p`, `shopt -s expand_aliases`) to a
 *    file in `env.stateDir`.
 * 2. Each command's script sources the current snapshot, `cd`s to the saved
 *    cwd (exit 126 with a message when it is gone), evals the command with
 *    stderr merged into stdout, saves the state to a new snapshot file of its
 *    own (also from an EXIT trap, so `exit N` saves too) and prints a marker
 *    line carrying a per-environment random nonce, whether the save
 *    succeeded, and the cwd.
 * 3. The runner strips the marker from the output, also when it arrives split
 *    across chunks, records the cwd and makes the new file the current
 *    snapshot. Superseded files are removed in batches by a later command's
 *    script (one `rm` per {@link SNAPSHOT_CLEANUP_BATCH} commands), once
 *    nothing can still read them.
 *
 * Only bash builtins run on a command's path: no `mv` or `rm` per call. A
 * fork and exec of one costs as much as the `bash -c` itself (measured in
 * the sandbox image: about twice the time of the whole call), and giving each
 * command its own file is what makes the rename unnecessary: nobody reads a
 * file while it is written, so it is never seen torn.
 *
 * Concurrency: calls may overlap (each is its own bash). Each starts from the
 * cwd and snapshot current when it starts; whichever finishes last decides
 * the cwd and the snapshot (last writer wins).
 */
import { randomBytes } from 'node:crypto';
import { posix } from 'node:path';
import { UnavailableError } from '../../common/errors.js';
import { InterruptedBeforeStartError, unlessAborted } from '../../common/interrupts.js';
import type { Logger } from '../../common/logging.js';
import { shellQuote } from '../../common/shell/quote.js';
import type { BackendEnvironment, BackgroundHandle, ExecResult } from '../backend.js';
import { bootstrapSnapshotPath, buildBootstrapScript } from '../backends/shared/shell-bootstrap.js';
import { cwdMarker, CwdMarkerFilter, type CwdMarker } from './cwd-marker.js';
import { buildBackgroundScript, buildRunScript, type RunMode } from './run-script.js';

export interface ShellRunRequest {
  readonly command: string;
  readonly timeoutMs: number;
  /** Absolute directory for this call only. The task cwd is kept even if the command `cd`s. */
  readonly workdir?: string;
  readonly stdin?: string | Uint8Array;
  readonly pty?: boolean;
  /** Use the task's snapshot and cwd but save nothing back. */
  readonly stateless?: boolean;
  readonly signal?: AbortSignal;
  readonly env?: Readonly<Record<string, string>>;
  /** Output with the cwd marker removed, as produced. */
  readonly onOutput?: (chunk: Buffer) => void;
}

export interface ShellRunResult extends ExecResult {
  /** The task cwd after this call. */
  readonly cwd: string;
  /** Set when the saved cwd had vanished and was reset to this directory. */
  readonly cwdResetTo?: string;
  /**
   * Where the command started (the task cwd or the workdir) and where it
   * ended, both with symlinks resolved (`pwd -P`) where the shell could
   * resolve them. Set only when the command reported where it ended: it ran
   * to its end (or `exit`), was not timed out or interrupted, and ran in
   * `task` or `workdir` mode.
   */
  readonly cwdReport?: { readonly start: string; readonly end: string };
}

export interface ShellBackgroundRequest {
  readonly command: string;
  /** Directory to start in; the task cwd when absent. */
  readonly workdir?: string;
  readonly pty?: boolean;
  readonly env?: Readonly<Record<string, string>>;
  readonly onOutput: (chunk: Buffer) => void;
  readonly onExit: (exitCode: number) => void;
}

export interface ShellStateRunnerOptions {
  readonly logger?: Logger;
  /** Limit for the login-shell bootstrap; default 30 s. */
  readonly bootstrapTimeoutMs?: number;
  /**
   * Commands longer than this (quoted, in bytes) are staged in a file first,
   * because one argv string is limited to 128 KiB on Linux; default 96 KiB.
   */
  readonly stagingThresholdBytes?: number;
  /** Superseded snapshots are deleted once this many have gathered; default {@link SNAPSHOT_CLEANUP_BATCH}. */
  readonly snapshotCleanupBatch?: number;
  /**
   * A fork's shell state (from its snapshot): the runner writes `script` as
   * its first snapshot file instead of running the login-shell bootstrap,
   * and starts in `cwd`.
   */
  readonly seed?: { readonly cwd: string; readonly script: string };
  /**
   * Benchmarks only, off by default: each command's script appends its
   * timings to {@link SHELL_TIMING_FILE} in the state dir (run-script.ts's
   * `timingFile`). Output and state are the same either way.
   */
  readonly timing?: boolean;
}

/** The timing log's name in `env.stateDir`, with {@link ShellStateRunnerOptions.timing}. */
export const SHELL_TIMING_FILE = 'shell-timing.log';

/** How long a snapshot a background command started from is kept after it is superseded. */
const BACKGROUND_SNAPSHOT_HOLD_MS = 60_000;
/**
 * Superseded snapshots are deleted once this many have gathered... The `rm`
 * is a process start on that command's path (6-9 ms on the 2-core machines
 * here): at one command in 128 it stays out of the p99 of command latency.
 * The files are a few KB each.
 */
export const SNAPSHOT_CLEANUP_BATCH = 128;
/** ...and at most this many by one command. */
const SNAPSHOT_CLEANUP_MAX = 256;

/**
 * Persistent shell semantics for one {@link BackendEnvironment}. Create one
 * per environment; it only uses `env.exec` and `env.startBackground`.
 */
export class ShellStateRunner {
  readonly #env: BackendEnvironment;
  readonly #logger: Logger | undefined;
  readonly #bootstrapTimeoutMs: number;
  readonly #stagingThresholdBytes: number;
  readonly #cleanupBatch: number;
  readonly #marker: CwdMarker;
  /** The snapshot new commands start from. */
  #snapshotPath: string;
  #snapshotSeq = 0;
  /** Snapshot files in use by running commands: path → how many. */
  readonly #readers = new Map<string, number>();
  /** Background commands may source their snapshot after starting: path → not deleted before (epoch ms). */
  readonly #backgroundHolds = new Map<string, number>();
  /** Superseded snapshot files: path → not deleted before (epoch ms). */
  readonly #retired = new Map<string, number>();
  /** Retired files handed to a running command's script to delete. */
  readonly #removing = new Set<string>();
  #cwd: string;
  #bootstrap: Promise<void> | undefined;
  readonly #seed: { readonly cwd: string; readonly script: string } | undefined;
  readonly #timingFile: string | undefined;

  constructor(env: BackendEnvironment, options: ShellStateRunnerOptions = {}) {
    this.#env = env;
    this.#logger = options.logger;
    this.#bootstrapTimeoutMs = options.bootstrapTimeoutMs ?? 30_000;
    this.#stagingThresholdBytes = options.stagingThresholdBytes ?? 96 * 1024;
    this.#cleanupBatch = options.snapshotCleanupBatch ?? SNAPSHOT_CLEANUP_BATCH;
    this.#marker = cwdMarker(randomBytes(12).toString('hex'));
    this.#cwd = options.seed?.cwd ?? env.initialCwd;
    this.#seed = options.seed;
    this.#timingFile = options.timing === true ? posix.join(env.stateDir, SHELL_TIMING_FILE) : undefined;
    if (this.#seed !== undefined) {
      this.#snapshotPath = posix.join(env.stateDir, 'shell-snapshot.fork.sh');
    } else if (env.preparedSnapshot !== undefined) {
      // Written by the same bootstrap script before the task got the environment.
      this.#snapshotPath = env.preparedSnapshot;
      this.#bootstrap = Promise.resolve();
    } else {
      this.#snapshotPath = bootstrapSnapshotPath(env.stateDir);
    }
  }

  /** The task's current working directory (as last reported by a command). */
  get cwd(): string {
    return this.#cwd;
  }

  /** The snapshot file new commands start from (a new one after each command that saves). */
  get snapshotPath(): string {
    return this.#snapshotPath;
  }

  /** This environment's marker (tests use it to check stripping). */
  get marker(): CwdMarker {
    return this.#marker;
  }

  /** Writes the first snapshot; runs once, later calls share the result. A failure is retried by the next call. */
  bootstrap(): Promise<void> {
    this.#bootstrap ??= this.#runBootstrap().catch((err: unknown) => {
      this.#bootstrap = undefined;
      throw err;
    });
    return this.#bootstrap;
  }

  async #runBootstrap(): Promise<void> {
    if (this.#seed !== undefined) {
      await this.#env.writeFile(this.#snapshotPath, Buffer.from(this.#seed.script, 'utf8'));
      return;
    }
    let lastOutput = '';
    // A broken login profile must not make the task unusable: fall back to a plain shell.
    for (const login of [true, false]) {
      const chunks: Buffer[] = [];
      let kept = 0;
      const result = await this.#env.exec({
        script: buildBootstrapScript(this.#snapshotPath, this.#env.initialCwd, login),
        timeoutMs: this.#bootstrapTimeoutMs,
        onOutput: (chunk) => {
          if (kept < 4096) {
            chunks.push(chunk);
            kept += chunk.length;
          }
        },
      });
      lastOutput = Buffer.concat(chunks).toString('utf8').slice(0, 4096);
      const snapshot = await this.#env.stat(this.#snapshotPath);
      if (result.exitCode === 0 && snapshot.exists) return;
      this.#logger?.warn(
        { login, exitCode: result.exitCode, timedOut: result.timedOut, output: lastOutput },
        'shell snapshot bootstrap failed',
      );
    }
    throw new UnavailableError(
      `cannot start a shell in ${this.#env.description}: the shell snapshot could not be written (${lastOutput.trim() || 'no output'})`,
    );
  }

  /**
   * Runs one command with the task's persistent state. Rejects with
   * InterruptedBeforeStartError when `signal` aborts before the command
   * started (the first call's shell bootstrap still under way): nothing ran.
   */
  async run(request: ShellRunRequest): Promise<ShellRunResult> {
    // The first call's login shell may take a while: an interrupt ends the wait, not the shared bootstrap.
    await unlessAborted(this.bootstrap(), request.signal, 'the command');
    if (request.signal?.aborted) throw new InterruptedBeforeStartError('the command');
    const startCwd = this.#cwd;
    const mode: RunMode = request.stateless
      ? { kind: 'stateless', dir: request.workdir ?? startCwd, isWorkdir: request.workdir !== undefined }
      : request.workdir !== undefined
        ? { kind: 'workdir', workdir: request.workdir }
        : { kind: 'task', cwd: startCwd, resetCwds: [this.#env.initialCwd, this.#env.homeDir] };
    const command = await this.#stage(request.command, request.signal);
    const source = this.#snapshotPath;
    const saveTo = mode.kind === 'stateless' ? undefined : this.#nextSnapshotPath();
    const remove = saveTo === undefined ? [] : this.#takeRemovable();
    const filter = new CwdMarkerFilter(this.#marker);
    const forward = (bytes: Buffer) => {
      if (bytes.length > 0) request.onOutput?.(bytes);
    };
    this.#readers.set(source, (this.#readers.get(source) ?? 0) + 1);
    let result: ExecResult;
    try {
      result = await this.#env.exec({
        script: buildRunScript({
          snapshotPath: source,
          ...(saveTo !== undefined ? { saveTo } : {}),
          remove,
          marker: this.#marker,
          mode,
          command,
          ...(this.#timingFile !== undefined ? { timingFile: this.#timingFile } : {}),
        }),
        timeoutMs: request.timeoutMs,
        ...(request.stdin !== undefined ? { stdin: request.stdin } : {}),
        ...(request.signal ? { signal: request.signal } : {}),
        ...(request.env ? { env: request.env } : {}),
        ...(request.pty ? { pty: true } : {}),
        onOutput: (chunk) => forward(filter.push(chunk)),
      });
      forward(filter.end());
    } finally {
      this.#release(source);
      // A marker means the script got past the `rm`.
      for (const file of remove) {
        this.#removing.delete(file);
        if (filter.saved !== undefined) this.#retired.delete(file);
      }
      if (saveTo !== undefined) {
        if (filter.saved === true) this.#adopt(saveTo);
        else this.#retire(saveTo); // a cut-off or failed save: maybe a partial file
      }
    }

    // A killed command's marker, if any came, is not its own report of where it ended.
    const observed =
      mode.kind !== 'stateless' && !result.timedOut && !result.interrupted && filter.cwd !== undefined && filter.cwd !== ''
        ? { cwdReport: { start: filter.startCwd ?? (mode.kind === 'task' ? mode.cwd : mode.workdir), end: filter.cwd } }
        : {};
    if (mode.kind !== 'task') return { ...result, cwd: this.#cwd, ...observed };
    // An empty cwd means the directory was deleted under the shell; the next call resets it.
    if (filter.cwd !== undefined && filter.cwd !== '') {
      this.#cwd = filter.cwd;
      return { ...result, cwd: this.#cwd, ...observed };
    }
    // 126 without a marker: the script could not cd. Confirm before resetting the task cwd.
    if (result.exitCode === 126 && !result.timedOut && !result.interrupted && this.#cwd === startCwd) {
      const dir = await this.#env.stat(startCwd);
      if (!dir.exists || !dir.isDirectory) {
        // Same choice as the script's message: the initial directory, else home.
        const initial = await this.#env.stat(this.#env.initialCwd);
        this.#cwd = initial.isDirectory ? this.#env.initialCwd : this.#env.homeDir;
        return { ...result, cwd: this.#cwd, cwdResetTo: this.#cwd };
      }
    }
    return { ...result, cwd: this.#cwd };
  }

  /** Starts a background command with the task's snapshot and cwd; it saves no state. */
  async startBackground(request: ShellBackgroundRequest): Promise<BackgroundHandle> {
    await this.bootstrap();
    const command = await this.#stage(request.command);
    const source = this.#snapshotPath;
    // The process sources the file some time after it starts; keep the file a while.
    this.#backgroundHolds.set(source, Date.now() + BACKGROUND_SNAPSHOT_HOLD_MS);
    const script = buildBackgroundScript({
      snapshotPath: source,
      marker: this.#marker,
      command,
      dir: request.workdir ?? this.#cwd,
      isWorkdir: request.workdir !== undefined,
    });
    return this.#env.startBackground({
      script,
      ...(request.pty ? { pty: true } : {}),
      ...(request.env ? { env: request.env } : {}),
      onOutput: request.onOutput,
      onExit: request.onExit,
    });
  }

  #nextSnapshotPath(): string {
    this.#snapshotSeq += 1;
    return posix.join(this.#env.stateDir, `shell-snapshot.${this.#snapshotSeq}.sh`);
  }

  /** A finished command's snapshot becomes the current one (last writer wins). */
  #adopt(path: string): void {
    const previous = this.#snapshotPath;
    this.#snapshotPath = path;
    this.#retire(previous);
  }

  #retire(path: string): void {
    if (path === this.#snapshotPath) return;
    const hold = this.#backgroundHolds.get(path);
    this.#backgroundHolds.delete(path);
    this.#retired.set(path, Math.max(Date.now(), hold ?? 0));
  }

  #release(path: string): void {
    const count = (this.#readers.get(path) ?? 1) - 1;
    if (count > 0) this.#readers.set(path, count);
    else this.#readers.delete(path);
  }

  /**
   * Retired files nobody reads any more, once there are enough of them to be
   * worth one `rm` (amortised: one process start per {@link SNAPSHOT_CLEANUP_BATCH} commands by default).
   */
  #takeRemovable(): string[] {
    // Every call comes here: look through the retired files only once a batch could be ready.
    if (this.#retired.size < this.#cleanupBatch) return [];
    const now = Date.now();
    const ready: string[] = [];
    for (const [path, notBefore] of this.#retired) {
      if (notBefore <= now && !this.#readers.has(path) && !this.#removing.has(path)) ready.push(path);
      if (ready.length >= SNAPSHOT_CLEANUP_MAX) break;
    }
    if (ready.length < this.#cleanupBatch) return [];
    for (const path of ready) this.#removing.add(path);
    return ready;
  }

  /** Long commands go through a file in the state dir, written by `cat` from stdin (no argv limit). */
  async #stage(command: string, signal?: AbortSignal): Promise<{ text: string } | { file: string }> {
    if (Buffer.byteLength(shellQuote(command)) <= this.#stagingThresholdBytes) return { text: command };
    const file = posix.join(this.#env.stateDir, `command-${randomBytes(8).toString('hex')}.sh`);
    const staged = await this.#env.exec({
      script: `umask 077; cat > ${shellQuote(file)}`,
      stdin: command,
      timeoutMs: 30_000,
      ...(signal ? { signal } : {}),
    });
    if (staged.interrupted) throw new InterruptedBeforeStartError('the command');
    if (staged.exitCode !== 0) {
      throw new UnavailableError(`cannot stage a ${command.length}-character command in ${this.#env.description}`);
    }
    return { file };
  }
}
