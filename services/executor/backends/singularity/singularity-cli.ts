/**
 * Running the apptainer/singularity CLI: short invocations that collect
 * their output, and long-lived ones (commands inside an instance) with pipes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { FailedPreconditionError, UnavailableError } from '../../../common/errors.js';

export interface Cli {
  /** The binary: a path or a name looked up on PATH. */
  readonly binary: string;
  /** Environment of the CLI process itself (not of the container, which gets `--cleanenv`). */
  readonly env: Readonly<Record<string, string>>;
}

export interface CliResult {
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: Buffer;
  readonly stderr: string;
}

function spawnError(cli: Cli, err: unknown): Error {
  if ((err as { code?: unknown }).code === 'ENOENT') {
    return new FailedPreconditionError(
      `the container runtime ${cli.binary} was not found: install apptainer (or singularity), or set terminal.singularity_binary`,
      { cause: err },
    );
  }
  return new UnavailableError(`cannot run ${cli.binary}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
}

/** Starts the CLI in its own process group with piped stdio. */
export function spawnCli(cli: Cli, argv: readonly string[]): ChildProcess {
  return spawn(cli.binary, [...argv], { env: { ...cli.env }, detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
}

/** Runs the CLI to completion. Rejects only when it cannot be started or exceeds `timeoutMs`. */
export function runCli(
  cli: Cli,
  argv: readonly string[],
  options: { readonly stdin?: Uint8Array; readonly timeoutMs?: number } = {},
): Promise<CliResult> {
  return new Promise<CliResult>((resolve, reject) => {
    let child: ChildProcess;
    try {
      child = spawnCli(cli, argv);
    } catch (err) {
      reject(spawnError(cli, err));
      return;
    }
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      if (child.pid !== undefined) {
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          // Already gone.
        }
      }
    }, options.timeoutMs ?? 120_000);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(spawnError(cli, err));
    });
    child.stdout?.on('data', (c: Buffer) => stdout.push(c));
    child.stderr?.on('data', (c: Buffer) => stderr.push(c));
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(options.stdin === undefined ? undefined : Buffer.from(options.stdin));
    child.once('close', (exitCode: number | null, signal: NodeJS.Signals | null) => {
      clearTimeout(timer);
      if (timedOut) {
        reject(new UnavailableError(`${cli.binary} ${argv.slice(0, 2).join(' ')} did not finish within ${options.timeoutMs ?? 120_000} ms`));
        return;
      }
      resolve({ exitCode, signal, stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr).toString('utf8') });
    });
  });
}

/** The last lines of a CLI's stderr, for error messages. */
export function stderrTail(text: string, lines = 5): string {
  const trimmed = text.trim();
  if (trimmed === '') return '(nothing on stderr)';
  return trimmed.split('\n').slice(-lines).join('\n');
}
