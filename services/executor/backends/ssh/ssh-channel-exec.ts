/**
 * Foreground commands on an ssh host without the exec agent (no usable
 * python3 there): one channel per command, under `setsid`, which prints its
 * process group id first, so a timeout or interrupt can kill the whole
 * group over a fresh channel (TERM, grace, KILL); closing the channel alone
 * would leave the command running on the host.
 */
import { randomBytes } from 'node:crypto';
import type { ClientChannel } from 'ssh2';
import { UnavailableError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';
import type { ExecOptions, ExecResult } from '../../backend.js';
import { ExecDeadline } from '../shared/exec-deadline.js';
import { endsLine, ptyEof } from '../shared/pty-input.js';
import { deliverOutput } from '../shared/guards.js';
import { PgidLineFilter } from '../shared/pgid-line-filter.js';
import { signalExitCode } from '../shared/process-group.js';
import { runShort } from './ssh-background.js';
import type { SshConnection } from './ssh-connection.js';
import { buildExecCommand, buildKillCommand, pgidLinePrefix } from './ssh-scripts.js';

export interface ChannelExecHost {
  readonly connection: SshConnection;
  readonly cwd: string;
  readonly killGraceMs: number;
  readonly pipeDrainMs: number;
  readonly logger: Logger | undefined;
  /** Kill functions of commands still running; the environment's release calls them. */
  readonly running: Set<() => Promise<void>>;
}

/** The error for a command whose connection (or agent stream) went away under it. */
export function lostWhileRunning(connection: SshConnection): UnavailableError {
  const e = connection.endpoint;
  return new UnavailableError(`the ssh connection to ${e.host}:${e.port} was lost while the command ran; it was stopped`);
}

/** Runs one foreground command on its own channel. */
export async function execOnChannel(host: ChannelExecHost, options: ExecOptions): Promise<ExecResult> {
  const { connection } = host;
  const nonce = randomBytes(8).toString('hex');
  const command = buildExecCommand({
    script: options.script,
    cwd: host.cwd,
    nonce,
    ...(options.env ? { env: options.env } : {}),
  });
  // Aborts the wait for a channel when the command ends before it starts.
  const opening = new AbortController();
  let stop: () => void = () => opening.abort();
  const deadline = new ExecDeadline(options, () => stop());

  let channel: ClientChannel;
  try {
    ({ channel } = await connection.exec(command, { ...(options.pty ? { pty: true } : {}), signal: opening.signal }));
  } catch (err) {
    deadline.dispose();
    if (deadline.ended) return deadline.result(0);
    throw err;
  }

  return new Promise<ExecResult>((resolve, reject) => {
    const filter = new PgidLineFilter(pgidLinePrefix(nonce));
    let exitCode: number | null = null;
    let exitSignal: string | undefined;
    let killing: Promise<void> | undefined;
    let killWanted = false;
    let closed = false;
    let drainTimer: NodeJS.Timeout | undefined;

    const emit = (chunk: Buffer) => deliverOutput(options.onOutput, chunk, host.logger);
    const kill = (): Promise<void> => {
      const pgid = filter.pgid;
      if (pgid === undefined) {
        // Not started yet: kill as soon as its group id arrives.
        killWanted = true;
        return Promise.resolve();
      }
      const graceMs = options.killGraceMs ?? host.killGraceMs;
      killing ??= runShort(connection, buildKillCommand(pgid, graceMs), {
        control: true,
        timeoutMs: graceMs + 30_000,
      })
        .then(
          () => undefined,
          (err: unknown) => host.logger?.warn({ err, pgid }, 'killing a remote process group failed'),
        )
        .then(() => {
          if (closed) return;
          // Whoever still holds the channel's output is outside the group; stop waiting for them.
          drainTimer = setTimeout(() => channel.close(), host.pipeDrainMs);
        });
      return killing;
    };
    stop = () => void kill();
    host.running.add(kill);

    const sendStdin = () => {
      const bytes = options.stdin === undefined ? Buffer.alloc(0) : Buffer.from(options.stdin);
      if (options.pty) {
        // A terminal has no half-close: type the input, then EOF.
        if (bytes.length > 0) channel.write(bytes);
        channel.write(ptyEof(endsLine(bytes)));
      } else {
        channel.end(bytes.length > 0 ? bytes : undefined);
      }
    };

    channel.on('data', (chunk: Buffer) =>
      emit(
        filter.push(chunk, () => {
          sendStdin();
          if (killWanted || deadline.ended) void kill();
        }),
      ),
    );
    channel.stderr.on('data', (chunk: Buffer) => emit(chunk));
    // The exit status comes with 'close': an 'exit' event may fire before our listener is attached.
    channel.once('close', (code?: number | null, signal?: string) => {
      exitCode = typeof code === 'number' ? code : null;
      exitSignal = signal;
      closed = true;
      deadline.dispose();
      if (drainTimer) clearTimeout(drainTimer);
      const settle = () => {
        host.running.delete(kill);
        if (deadline.ended) {
          resolve(deadline.result(0));
        } else if (exitCode !== null) {
          resolve(deadline.result(exitCode));
        } else if (exitSignal !== undefined) {
          resolve(deadline.result(signalExitCode(exitSignal)));
        } else {
          // The connection dropped: the command may still run; kill it once the host is back.
          if (filter.pgid !== undefined) void killAfterDrop(host, filter.pgid);
          reject(lostWhileRunning(connection));
        }
      };
      if (killing) void killing.then(settle);
      else settle();
    });
  });
}

/**
 * Kills a group whose channel (or agent stream) was lost with the
 * connection. The host may be restarting sshd or briefly unreachable, so
 * this keeps trying (with back-off, up to about a minute) until the kill
 * command runs.
 */
export async function killAfterDrop(host: ChannelExecHost, pgid: number): Promise<void> {
  const command = buildKillCommand(pgid, host.killGraceMs);
  const done = (async () => {
    for (let delayMs = 250, waitedMs = 0; waitedMs < 60_000; waitedMs += delayMs, delayMs = Math.min(delayMs * 2, 5000)) {
      try {
        const r = await runShort(host.connection, command, { control: true, timeoutMs: host.killGraceMs + 30_000 });
        if (r.exitCode === 0) return;
      } catch (err) {
        host.logger?.debug({ err, pgid }, 'killing an orphaned remote group failed; retrying');
      }
      await new Promise((resolve) => setTimeout(resolve, delayMs));
    }
    host.logger?.warn({ pgid }, 'gave up killing a remote process group after the connection dropped');
  })();
  const entry = () => done;
  host.running.add(entry);
  await done;
  host.running.delete(entry);
}
