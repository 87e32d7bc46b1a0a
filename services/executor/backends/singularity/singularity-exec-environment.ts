/**
 * One task's environment on the singularity backend when its image cannot
 * run the exec agent (no usable python3): one `apptainer exec --cleanenv
 * instance://NAME` per command, under `setsid` so a timeout or interrupt
 * kills its whole process group inside the instance, and files through
 * small helper commands in the instance (binary-safe pipes).
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { FailedPreconditionError, InvalidArgumentError, UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type {
  BackendEnvironment,
  BackgroundHandle,
  BackgroundOptions,
  ExecOptions,
  ExecResult,
  FileStat,
} from '../../backend.js';
import { fileErrorFromErrno, fileTooLargeError, type FileOp } from '../shared/file-errors.js';
import { MAX_READ_FILE_BYTES } from '../shared/file-limits.js';
import { assertNotReleased, deliverExit, deliverOutput } from '../shared/guards.js';
import { killGroupArgv, signalExitCode } from '../shared/process-group.js';
import { ExecDeadline, interruptedBeforeStart } from '../shared/exec-deadline.js';
import { PgidLineFilter } from '../shared/pgid-line-filter.js';
import { endsLine, ptyEof } from '../shared/pty-input.js';
import {
  STATE_DIR,
  WORKSPACE_DIR,
  execArgv,
} from './singularity-argv.js';
import {
  FILE_EXIT_ERRNO,
  groupCommand,
  pgidLinePrefix,
  readFileCommand,
  statCommand,
  writeFileCommand,
} from '../shared/group-commands.js';
import { runCli, spawnCli, stderrTail, type Cli } from './singularity-cli.js';

export interface EnvironmentSetup {
  readonly cli: Cli;
  readonly name: string;
  readonly description: string;
  readonly env: Readonly<Record<string, string>>;
  readonly killGraceMs: number;
  readonly pipeDrainMs: number;
  readonly logger: Logger | undefined;
  /** Stops the instance and removes the task's directories. */
  readonly release: () => Promise<void>;
}

/** A running command inside the instance: its local CLI process and the group id it reported. */
interface GroupRun {
  readonly child: ChildProcess;
  readonly filter: PgidLineFilter;
  /** Kills the group inside the instance (and, failing that, the local CLI process); resolves when done. */
  kill(): Promise<void>;
}

/** The per-command path, for images without a usable python3: one `apptainer exec` per command and file operation. */
export class SingularityEnvironment implements BackendEnvironment {
  /** How commands reach the instance (berth doctor says it). */
  readonly transport = 'apptainer-exec' as const;
  readonly description: string;
  readonly homeDir = WORKSPACE_DIR;
  readonly initialCwd = WORKSPACE_DIR;
  readonly stateDir = STATE_DIR;

  readonly #setup: EnvironmentSetup;
  readonly #running = new Set<GroupRun>();
  #disposing: Promise<void> | undefined;

  constructor(setup: EnvironmentSetup) {
    this.#setup = setup;
    this.description = setup.description;
  }

  #exec(command: readonly string[], env?: Readonly<Record<string, string>>): string[] {
    return execArgv({ name: this.#setup.name, env: { ...this.#setup.env, ...env }, pwd: WORKSPACE_DIR, command });
  }

  /** Runs a helper command in the instance to completion. */
  #helper(command: readonly string[], stdin?: Uint8Array) {
    return runCli(this.#setup.cli, this.#exec(command), { ...(stdin ? { stdin } : {}), timeoutMs: 120_000 });
  }

  /**
   * Starts a command under setsid in the instance. `onStarted` runs once the
   * group id line arrived (stdin may be written from then on).
   */
  #startGroup(
    script: string,
    options: {
      readonly env?: Readonly<Record<string, string>>;
      readonly pty?: boolean;
      readonly onOutput?: (chunk: Buffer) => void;
      readonly killGraceMs?: number;
    },
    onStarted: (run: GroupRun) => void,
  ): GroupRun {
    const nonce = randomBytes(8).toString('hex');
    let child: ChildProcess;
    try {
      child = spawnCli(this.#setup.cli, this.#exec(groupCommand(script, nonce, options.pty ?? false), options.env));
    } catch (err) {
      throw new UnavailableError(`cannot run ${this.#setup.cli.binary}: ${String(err)}`, { cause: err });
    }
    const filter = new PgidLineFilter(pgidLinePrefix(nonce));
    let killing: Promise<void> | undefined;
    let closed = false;
    child.once('close', () => (closed = true));
    const killLocal = () => {
      if (child.pid === undefined || closed) return;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    };
    const run: GroupRun = {
      child,
      filter,
      kill: () =>
        (killing ??= (async () => {
          const pgid = filter.pgid;
          const graceMs = options.killGraceMs ?? this.#setup.killGraceMs;
          if (pgid !== undefined) {
            const r = await runCli(this.#setup.cli, this.#exec(killGroupArgv(pgid, graceMs)), {
              timeoutMs: graceMs + 60_000,
            }).catch((err: unknown) => {
              this.#setup.logger?.warn({ err, pgid }, 'killing a process group in the instance failed');
              return undefined;
            });
            if (r && r.exitCode !== 0) this.#setup.logger?.warn({ pgid, stderr: stderrTail(r.stderr) }, 'kill command failed');
          }
          // The CLI process should end with its command; if it does not, end it here.
          if (!closed) {
            await new Promise<void>((resolve) => {
              const timer = setTimeout(() => {
                killLocal();
                resolve();
              }, pgid === undefined ? 0 : this.#setup.pipeDrainMs);
              child.once('close', () => {
                clearTimeout(timer);
                resolve();
              });
            });
          }
        })()),
    };
    child.stdout?.on('data', (chunk: Buffer) =>
      deliverOutput(options.onOutput, filter.push(chunk, () => onStarted(run)), this.#setup.logger),
    );
    child.stderr?.on('data', (chunk: Buffer) => deliverOutput(options.onOutput, chunk, this.#setup.logger));
    child.stdin?.on('error', () => undefined);
    this.#running.add(run);
    child.once('close', () => this.#running.delete(run));
    return run;
  }

  async exec(options: ExecOptions): Promise<ExecResult> {
    assertNotReleased(this, this.#disposing);
    const early = interruptedBeforeStart(options);
    if (early) return early;
    return new Promise<ExecResult>((resolve, reject) => {
      let run: GroupRun | undefined;
      // Before the group has started there is nothing to kill yet: its start kills it (below).
      const deadline = new ExecDeadline(options, () => void run?.kill());
      const sendStdin = (run: GroupRun) => {
        const stdin = run.child.stdin;
        if (!stdin) return;
        const bytes = options.stdin === undefined ? Buffer.alloc(0) : Buffer.from(options.stdin);
        if (options.pty) {
          // A terminal has no half-close: type the input, then EOF.
          if (bytes.length > 0) stdin.write(bytes);
          stdin.write(ptyEof(endsLine(bytes)));
        } else {
          stdin.end(bytes.length > 0 ? bytes : undefined);
        }
      };
      try {
        run = this.#startGroup(
          options.script,
          {
            ...(options.env ? { env: options.env } : {}),
            ...(options.pty ? { pty: true } : {}),
            ...(options.onOutput ? { onOutput: options.onOutput } : {}),
            ...(options.killGraceMs !== undefined ? { killGraceMs: options.killGraceMs } : {}),
          },
          (started) => {
            sendStdin(started);
            if (deadline.ended) void started.kill();
          },
        );
      } catch (err) {
        deadline.dispose();
        reject(err);
        return;
      }
      const started = run;
      started.child.once('error', (err) => {
        deadline.dispose();
        reject(
          (err as { code?: unknown }).code === 'ENOENT'
            ? new FailedPreconditionError(`the container runtime ${this.#setup.cli.binary} was not found`, { cause: err })
            : new UnavailableError(`cannot run ${this.#setup.cli.binary}: ${err.message}`, { cause: err }),
        );
      });
      started.child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
        deadline.dispose();
        const settle = () => {
          if (deadline.ended) {
            resolve(deadline.result(0));
          } else if (started.filter.pgid === undefined && code !== 0) {
            // The runtime failed before the command started (instance gone, bad argv).
            reject(new UnavailableError(`cannot run a command in ${this.description} (exit ${code ?? signal})`));
          } else {
            resolve(deadline.result(code ?? signalExitCode(signal)));
          }
        };
        if (deadline.ended) void started.kill().then(settle);
        else settle();
      });
    });
  }

  async startBackground(options: BackgroundOptions): Promise<BackgroundHandle> {
    assertNotReleased(this, this.#disposing);
    let killRequested = false;
    let exited = false;
    const stderrHead: Buffer[] = [];
    const started = new Promise<GroupRun>((resolve, reject) => {
      const run = this.#startGroup(
        options.script,
        {
          ...(options.env ? { env: options.env } : {}),
          ...(options.pty ? { pty: true } : {}),
          onOutput: (chunk) => {
            if (run.filter.pgid === undefined) stderrHead.push(chunk);
            else options.onOutput(chunk);
          },
        },
        (r) => resolve(r),
      );
      run.child.once('error', (err) => reject(new UnavailableError(`cannot run ${this.#setup.cli.binary}: ${err.message}`, { cause: err })));
      run.child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
        exited = true;
        if (run.filter.pgid === undefined) {
          reject(
            new UnavailableError(
              `cannot start a background process in ${this.description} (exit ${code ?? signal}): ${Buffer.concat(stderrHead).toString('utf8').trim()}`,
            ),
          );
          return;
        }
        let exitCode = code ?? signalExitCode(signal);
        // A process we killed reports -n, as the local backend does.
        if (killRequested && exitCode > 128) exitCode = -(exitCode - 128);
        deliverExit(options.onExit, exitCode, this.#setup.logger);
      });
    });
    const run = await started;
    let stdinClosed = false;
    let lastInputEndedLine = true;
    return {
      pid: run.filter.pgid ?? 0,
      write: (data) =>
        new Promise<void>((resolve, reject) => {
          const stdin = run.child.stdin;
          if (exited || stdinClosed || !stdin || stdin.destroyed) {
            reject(new FailedPreconditionError(exited ? 'the process has exited' : 'stdin is closed'));
            return;
          }
          const bytes = Buffer.from(data);
          lastInputEndedLine = endsLine(bytes, lastInputEndedLine);
          stdin.write(bytes, (err) => (err ? reject(new FailedPreconditionError(`cannot write to stdin: ${err.message}`)) : resolve()));
        }),
      closeStdin: () =>
        new Promise<void>((resolve) => {
          const stdin = run.child.stdin;
          if (stdinClosed || exited || !stdin || stdin.destroyed) {
            resolve();
            return;
          }
          stdinClosed = true;
          if (options.pty) {
            stdin.write(ptyEof(lastInputEndedLine), () => resolve());
          } else {
            stdin.end(() => resolve());
          }
        }),
      kill: async () => {
        if (exited) return;
        killRequested = true;
        await run.kill();
      },
    };
  }

  async readFile(absPath: string): Promise<Buffer> {
    this.#assertAbsolute(absPath);
    const r = await this.#helper(readFileCommand(absPath, MAX_READ_FILE_BYTES));
    if (r.exitCode === 0) {
      if (r.stdout.length > MAX_READ_FILE_BYTES) throw fileTooLargeError(absPath, r.stdout.length);
      return r.stdout;
    }
    throw this.#fileError(r.exitCode, absPath, r.stderr, 'read');
  }

  async writeFile(absPath: string, data: Uint8Array): Promise<void> {
    this.#assertAbsolute(absPath);
    const r = await this.#helper(writeFileCommand(absPath), data);
    if (r.exitCode !== 0) throw this.#fileError(r.exitCode, absPath, r.stderr, 'write');
  }

  async stat(absPath: string): Promise<FileStat> {
    this.#assertAbsolute(absPath);
    const r = await this.#helper(statCommand(absPath));
    const out = r.stdout.toString('utf8').trim();
    if (r.exitCode !== 0) throw this.#fileError(r.exitCode, absPath, r.stderr, 'stat');
    if (out === 'missing') return { exists: false, isDirectory: false, sizeBytes: 0 };
    const [kind, size] = out.split(' ');
    return { exists: true, isDirectory: kind === 'dir', sizeBytes: Number(size ?? 0) };
  }

  #assertAbsolute(absPath: string): void {
    assertNotReleased(this, this.#disposing);
    if (!absPath.startsWith('/')) throw new InvalidArgumentError(`path must be absolute: ${absPath}`);
  }

  #fileError(exitCode: number | null, absPath: string, stderr: string, op: FileOp): Error {
    const errno = exitCode === null ? undefined : FILE_EXIT_ERRNO[exitCode];
    return (
      (errno ? fileErrorFromErrno(errno, absPath, op, stderrTail(stderr)) : undefined) ??
      new UnavailableError(`file operation on ${absPath} in ${this.description} failed (exit ${exitCode}): ${stderrTail(stderr)}`)
    );
  }

  dispose(): Promise<void> {
    this.#disposing ??= (async () => {
      await Promise.all([...this.#running].map((r) => r.kill().catch(() => undefined)));
      await this.#setup.release();
    })();
    return this.#disposing;
  }
}
