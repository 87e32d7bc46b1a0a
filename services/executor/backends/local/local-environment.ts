/**
 * One task's environment on the local backend: `bash -c` on this host in
 * the task's starting directory, each command in its own process group
 * (pipes, or a PTY from node-pty), files straight on the host's file system.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type * as NodePty from 'node-pty';
import { FailedPreconditionError, UnavailableError, type BerthError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type {
  BackendEnvironment,
  BackgroundHandle,
  BackgroundOptions,
  ExecOptions,
  ExecResult,
  FileStat,
} from '../../backend.js';
import { ExecDeadline, interruptedBeforeStart } from '../shared/exec-deadline.js';
import { errnoName, fileErrorFromNode } from '../shared/file-errors.js';
import { assertAbsolute, assertNotReleased, deliverExit, deliverOutput } from '../shared/guards.js';
import { readRegularFile, writeRegularFile } from '../shared/host-files.js';
import { endsLine, ptyEof } from '../shared/pty-input.js';
import { shellSignalExitCode, signalGroup, signalNumber, sleep, terminateGroup } from './local-process-group.js';
import { PrestartedShell, prestartFits, scriptFits } from './local-prestart.js';
import { PTY_WRAPPER, PtyDoneFilter, requireNodePty } from './local-pty.js';

export interface ResolvedOptions {
  readonly initialCwd: string;
  readonly homeDir: string;
  readonly childEnv: Readonly<Record<string, string>>;
  /** The task's first snapshot, already in its state dir (see login-snapshot.ts); absent: the runner bootstraps. */
  readonly preparedSnapshot?: string;
  readonly killGraceMs: number;
  readonly pipeDrainMs: number;
  /** Start each command's bash ahead of it (local-prestart.ts); default true. */
  readonly prestart?: boolean;
  readonly logger: Logger | undefined;
}

/**
 * How long after a call the next command's shell is started: long enough for
 * the call's result to be written out (through the dispatcher too, under
 * `berth serve`), short enough that back-to-back calls still find it ready
 * (docs/performance.md, "Where a warm call's time goes": 15 ms was too long
 * for the bench's calls, setImmediate too short).
 */
const SPARE_DELAY_MS = 5;

/** What the environment tracks for each process group it started. */
interface RunningGroup {
  readonly pgid: number;
  /** Kills the group and resolves when the child is gone. */
  readonly kill: () => Promise<void>;
  /** The leader has exited; the entry stays only while other members live on. */
  leaderExited: boolean;
}


/** A foreground command's group as {@link LocalEnvironment} tracks it. */
interface ForegroundGroup {
  readonly deadline: ExecDeadline;
  /** The result for the command's own exit code `natural`, once any kill under way is through. */
  readonly result: (natural: number) => Promise<ExecResult>;
}

/** A command started under a PTY by {@link LocalEnvironment}. */
interface SpawnedPty {
  readonly term: NodePty.IPty;
  /** Strips the wrapper's end token from the output. */
  readonly filter: PtyDoneFilter;
  /** Written back to the wrapper to say its end token was seen. */
  readonly nonce: string;
}

export class LocalEnvironment implements BackendEnvironment {
  readonly description: string;
  readonly homeDir: string;
  readonly initialCwd: string;
  readonly stateDir: string;
  /** The state dir: the executor and the task's processes see the same host path. */
  readonly rpcDir: { readonly hostPath: string; readonly sandboxPath: string };
  readonly preparedSnapshot: string | undefined;
  /** Set by the backend so it forgets disposed environments. */
  onDisposed: (() => void) | undefined;

  readonly #options: ResolvedOptions;
  /** Groups whose leader may still run, or whose leftover members must die with the environment. */
  readonly #groups = new Map<number, RunningGroup>();
  #disposing: Promise<void> | undefined;
  /** Whether commands may run in pre-started shells: on unless turned off or the environment makes bash run something first. */
  readonly #prestart: boolean;
  /** The shell started ahead for the next command that fits it. */
  #spare: PrestartedShell | undefined;
  #spareScheduled = false;

  constructor(id: string, stateDir: string, options: ResolvedOptions) {
    this.description = `local:${id}`;
    this.homeDir = options.homeDir;
    this.initialCwd = options.initialCwd;
    this.stateDir = stateDir;
    this.rpcDir = { hostPath: stateDir, sandboxPath: stateDir };
    this.preparedSnapshot = options.preparedSnapshot;
    this.#options = options;
    this.#prestart = options.prestart !== false && prestartFits(options.childEnv);
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

  /** `bash -c script` in a process group of its own, on pipes; throws the backend's spawn error. */
  #spawnPipes(script: string, env: Readonly<Record<string, string>> | undefined): ChildProcess {
    try {
      return spawn('bash', ['-c', script], { cwd: this.#spawnCwd(), env: this.#env(env), detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
    } catch (err) {
      throw this.#spawnError(err);
    }
  }

  /**
   * Tracks a started foreground command's process group `pid` under the
   * call's deadline, which kills the group (SIGTERM, SIGKILL after the grace;
   * then `afterKill`). `result` reports the command's own exit code once any
   * kill is through, so SIGKILL reached stragglers first.
   */
  #foreground(pid: number, options: ExecOptions, afterKill?: () => void): ForegroundGroup {
    let killing: Promise<void> | undefined;
    const kill = (): Promise<void> =>
      (killing ??= terminateGroup(pid, options.killGraceMs ?? this.#options.killGraceMs).then(afterKill));
    this.#groups.set(pid, { pgid: pid, kill, leaderExited: false });
    const deadline = new ExecDeadline(options, () => void kill());
    const result = async (natural: number): Promise<ExecResult> => {
      if (killing) await killing;
      this.#forgetIfEmpty(pid);
      return deadline.result(natural);
    };
    return { deadline, result };
  }

  /**
   * The pre-started shell, with `script` handed to it, when the command fits
   * one: pipes, no extra environment, a script small enough, and the shell
   * still waiting in the directory bash would start in now. Otherwise
   * undefined (and a shell that no longer fits is let go).
   */
  async #takeSpare(script: string, env: Readonly<Record<string, string>> | undefined): Promise<ChildProcess | undefined> {
    const spare = this.#spare;
    if (spare === undefined || (env !== undefined && Object.keys(env).length > 0) || !scriptFits(script)) return undefined;
    this.#spare = undefined;
    if (!spare.fits(this.#spawnCwd()) || !(await spare.hand(script))) {
      void spare.dispose();
      return undefined;
    }
    if (this.#disposing) {
      // Released while the script was on its way: the command must not run on.
      await spare.dispose();
      assertNotReleased(this, this.#disposing);
    }
    return spare.child;
  }

  /**
   * Starts the next command's shell once the current call's result has left
   * the process (off its path): spawning blocks the event loop for a fork and
   * exec, and done at the next turn it held up the very response the caller
   * waited for (the bench's "client and gRPC" row grew by what it saved).
   */
  #scheduleSpare(): void {
    if (!this.#prestart || this.#spare !== undefined || this.#spareScheduled) return;
    this.#spareScheduled = true;
    setTimeout(() => {
      this.#spareScheduled = false;
      if (this.#disposing || this.#spare !== undefined) return;
      this.#spare = PrestartedShell.start(this.#spawnCwd(), this.#env());
    }, SPARE_DELAY_MS).unref();
  }

  async #execPipes(options: ExecOptions): Promise<ExecResult> {
    try {
      return await this.#runPipes(options);
    } finally {
      this.#scheduleSpare();
    }
  }

  async #runPipes(options: ExecOptions): Promise<ExecResult> {
    const child = (await this.#takeSpare(options.script, options.env)) ?? this.#spawnPipes(options.script, options.env);
    const pid = child.pid;
    if (pid === undefined) {
      // Spawn failure: its 'error' says why, and no 'close' follows.
      const [err] = (await once(child, 'error')) as [unknown];
      throw this.#spawnError(err);
    }
    child.on('error', (err) => this.#options.logger?.warn({ err }, 'child process error'));
    let drainTimer: NodeJS.Timeout | undefined;
    let closed = false;
    const group = this.#foreground(pid, options, () => {
      if (closed) return;
      // Whoever still holds our pipes is outside the group; stop waiting for them.
      drainTimer = setTimeout(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
      }, this.#options.pipeDrainMs);
    });

    child.stdout?.on('data', (chunk: Buffer) => deliverOutput(options.onOutput, chunk, this.#options.logger));
    child.stderr?.on('data', (chunk: Buffer) => deliverOutput(options.onOutput, chunk, this.#options.logger));
    // EPIPE when the script exits without reading its stdin: not an error of ours.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(options.stdin === undefined ? undefined : Buffer.from(options.stdin));

    // 'close' fires once the process exited and both pipes ended: no output is lost.
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
      child.once('close', (...args: [number | null, NodeJS.Signals | null]) => resolve(args)),
    );
    closed = true;
    group.deadline.dispose();
    if (drainTimer) clearTimeout(drainTimer);
    return group.result(code ?? shellSignalExitCode(signal));
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

  async #execPty(options: ExecOptions): Promise<ExecResult> {
    const { term, filter, nonce } = this.#spawnPty(options.script, options.env);
    const group = this.#foreground(term.pid, options);
    const dataSub = term.onData((data: string | Buffer) => {
      const chunk = typeof data === 'string' ? Buffer.from(data) : data;
      const forward = filter.push(chunk, () => term.write(`${nonce}\n`));
      deliverOutput(options.onOutput, forward, this.#options.logger);
    });
    const ended = new Promise<number>((resolve) => {
      const exitSub = term.onExit(({ exitCode, signal }) => {
        group.deadline.dispose();
        // Without the done token (killed), give the reader a moment for bytes already in flight.
        const settleDelayMs = filter.done ? 0 : 50;
        setTimeout(() => {
          deliverOutput(options.onOutput, filter.flush(), this.#options.logger);
          dataSub.dispose();
          exitSub.dispose();
          resolve(signal ? 128 + signal : exitCode);
        }, settleDelayMs);
      });
    });
    writePtyInput(term, options.stdin);
    return group.result(await ended);
  }

  async startBackground(options: BackgroundOptions): Promise<BackgroundHandle> {
    assertNotReleased(this, this.#disposing);
    return options.pty ? this.#backgroundPty(options) : this.#backgroundPipes(options);
  }

  /**
   * Tracks a background process's group `pid`; its kill (once: SIGTERM,
   * SIGKILL after the grace) resolves when `exited` was reported, or a
   * moment after the group is gone.
   */
  #trackBackground(pid: number, exited: Promise<void>): () => Promise<void> {
    let killing: Promise<void> | undefined;
    const kill = (): Promise<void> =>
      (killing ??= terminateGroup(pid, this.#options.killGraceMs).then(() =>
        Promise.race([exited, sleep(this.#options.pipeDrainMs + 1000)]),
      ));
    this.#groups.set(pid, { pgid: pid, kill, leaderExited: false });
    return kill;
  }

  #backgroundPipes(options: BackgroundOptions): BackgroundHandle {
    const child = this.#spawnPipes(options.script, options.env);
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

    const kill = this.#trackBackground(pid, exitedPromise);

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
    const kill = this.#trackBackground(pid, exitedPromise);

    return {
      pid,
      write: (data) => {
        if (exited || stdinClosed) {
          return Promise.reject(new FailedPreconditionError(exited ? 'the process has exited' : 'stdin is closed'));
        }
        const bytes = typeof data === 'string' ? Buffer.from(data) : Buffer.from(data);
        lastInputEndedLine = endsLine(bytes, lastInputEndedLine);
        term.write(bytes);
        return Promise.resolve();
      },
      closeStdin: () => {
        if (!exited && !stdinClosed) {
          stdinClosed = true;
          term.write(ptyEof(lastInputEndedLine));
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
      const spare = this.#spare;
      this.#spare = undefined;
      await Promise.all([
        spare?.dispose(),
        ...[...this.#groups.values()].map((g) => g.kill().catch(() => undefined)),
      ]);
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
  term.write(ptyEof(endsLine(bytes)));
}
