/**
 * Starts the exec agent on its stdin/stdout (`python3 berth_agent.pyz
 * --stdio`) through whatever a backend uses to start one process in its
 * sandbox, and hands back a connected {@link AgentChannel}: a local child
 * process, `docker exec -i`, an ssh channel, `apptainer exec`. The backend
 * supplies only the spawn function; framing, the hello, the version check
 * and the "no usable python3" verdict live here once.
 *
 * No token on this transport: the stream is the pipe pair of the process
 * the executor itself started, which nothing else in the sandbox holds (the
 * agent moves it off fd 0/1 before running anything, and is not dumpable).
 *
 * A dropped stream (with {@link StartStdioAgentOptions.lingerPath}): the
 * agent keeps its background processes and listens on that private socket
 * (0700 directory, 0600 socket); the channel then starts `--stdio --linger
 * PATH --resume PID`, which finds the agent there (checking its pid with
 * SO_PEERCRED) and carries bytes between its stdio and it. The executor's
 * first frame on that stream is `auth` with the agent's resume key, which
 * the agent wants before it says anything.
 */
import { Duplex, type Readable, type Writable } from 'node:stream';
import { UnavailableError } from '../../../../common/errors.js';
import type { Logger } from '../../../../common/logging.js';
import { AgentChannel } from './agent-channel.js';
import type { AgentChannelOptions } from './agent-channel-options.js';
import type { AgentStream } from './agent-stream.js';
import {
  AGENT_PROTOCOL_VERSION,
  FrameDecoder,
  FrameError,
  MAX_HELLO_FRAME_BYTES,
  encodeFrame,
  parseHello,
  versionMismatchMessage,
  type AgentHello,
  type Frame,
} from './agent-protocol.js';

/** How long the agent has to say hello once started; a cold `docker exec` or ssh channel takes well under this. */
export const STDIO_HELLO_TIMEOUT_MS = 15_000;

/** How shells and runtimes say that the command (python3) does not exist. */
const NO_COMMAND = /executable file not found|command not found/i;

/** Exit status of the agent when its Python is older than it supports. */
export const AGENT_EXIT_PYTHON_TOO_OLD = 4;

/** The agent's stderr kept for an error message when it fails before its hello. */
const MAX_STDERR_TAIL_CHARS = 2000;

/** Lines of the agent's stderr logged per channel once it runs; after that, it is read and dropped. */
const MAX_LOGGED_STDERR_LINES = 100;

/** After the channel closed (its stdin ended), how long the agent has to exit before it is killed. */
const EXIT_GRACE_MS = 5000;

/**
 * One started process: the part of Node's ChildProcess this needs, so an
 * ssh channel or an SDK's exec stream can be adapted to it.
 */
export interface AgentProcess {
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr?: Readable | null;
  /** Once the process exited and its stdio closed (ChildProcess 'close'). */
  once(event: 'close', listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  /** The process could not be started (ChildProcess 'error', e.g. ENOENT). */
  once(event: 'error', listener: (err: Error) => void): this;
  kill(signal?: NodeJS.Signals): boolean;
  /**
   * The stream ended after the hello and the agent did not exit: let go of
   * the transport without ending what runs in the sandbox (a lingering
   * agent lives in it). Absent, {@link kill} is used.
   */
  abandon?(): void;
}

/** Starts `argv` in the sandbox with piped stdin, stdout and stderr. */
export type AgentSpawn = (argv: readonly string[]) => AgentProcess;

/**
 * Why the agent did not come up. `no-python` and `python-too-old` mean the
 * sandbox cannot run it at all: the backend's per-command path is the way
 * on. The others are faults to report, not to fall back from.
 */
export type AgentUnavailableReason =
  | 'no-python'
  | 'python-too-old'
  | 'version-mismatch'
  | 'agent-exited'
  | 'no-hello'
  | 'not-an-agent';

/** The exec agent could not be started on a stdio stream; {@link reason} says why. */
export class AgentUnavailableError extends UnavailableError {
  constructor(
    readonly reason: AgentUnavailableReason,
    message: string,
  ) {
    super(message);
  }

  /** True when the sandbox cannot run the agent, so a per-command path should take over. */
  get canFallBack(): boolean {
    return this.reason === 'no-python' || this.reason === 'python-too-old';
  }
}

export interface StartStdioAgentOptions {
  readonly spawn: AgentSpawn;
  /** The agent's archive as the sandbox sees it. */
  readonly agentPath: string;
  /** Names the sandbox in errors and logs (`container berth-x`, `host gpu-1`). */
  readonly description: string;
  /** The interpreter; `python3` unless set. */
  readonly python?: string;
  /** {@link STDIO_HELLO_TIMEOUT_MS} unless set. */
  readonly helloTimeoutMs?: number;
  readonly logger?: Logger;
  /**
   * Sandboxes that share this key share the one log line that says they run
   * without the agent (an image, a host); the description unless set.
   */
  readonly fallbackLogKey?: string;
  readonly channelOptions?: AgentChannelOptions;
  /**
   * Where the agent waits to be found again when its stream drops (an
   * absolute path in a directory private to the task, inside the sandbox);
   * absent, a dropped stream ends the agent and everything it started.
   */
  readonly lingerPath?: string;
}

/** Fallback keys already logged in this process: the line is said once, not per task. */
const fallbackLogged = new Set<string>();
const MAX_FALLBACK_KEYS = 10_000;

/**
 * Starts the agent and waits for its hello. Rejects with
 * {@link AgentUnavailableError}; when its `canFallBack` is true the reason
 * was logged once (per `fallbackLogKey`) at warn level.
 */
export async function startStdioAgent(options: StartStdioAgentOptions): Promise<AgentChannel> {
  const python = options.python ?? 'python3';
  try {
    const first = await connect(options, python, undefined);
    const { lingerPath } = options;
    const channel = new AgentChannel(first.stream, first.decoder, first.hello, options.description, options.logger, {
      ...options.channelOptions,
      ...(lingerPath !== undefined
        ? { reattach: (previous: AgentHello) => connect(options, python, { lingerPath, previous }) }
        : {}),
    });
    channel.drainBuffered(first.buffered);
    return channel;
  } catch (err) {
    if (err instanceof AgentUnavailableError && err.canFallBack) {
      const key = options.fallbackLogKey ?? options.description;
      if (!fallbackLogged.has(key)) {
        if (fallbackLogged.size >= MAX_FALLBACK_KEYS) fallbackLogged.clear();
        fallbackLogged.add(key);
        options.logger?.warn(
          { sandbox: options.description, reason: err.reason, detail: err.message },
          'the exec agent cannot run here; commands start one process each (slower)',
        );
      }
    }
    throw err;
  }
}

/** Finding a lingering agent again: where it listens, and the hello it first said. */
interface Resume {
  readonly lingerPath: string;
  readonly previous: AgentHello;
}

/** Starts the agent (or, with `resume`, a bridge to the lingering one) and resolves past its hello, paused. */
function connect(options: StartStdioAgentOptions, python: string, resume: Resume | undefined): Promise<AgentStream> {
  const { description, logger } = options;
  const helloTimeoutMs = options.helloTimeoutMs ?? STDIO_HELLO_TIMEOUT_MS;
  const argv = [python, options.agentPath, '--stdio'];
  const lingerPath = resume?.lingerPath ?? options.lingerPath;
  if (lingerPath !== undefined) argv.push('--linger', lingerPath);
  if (resume) argv.push('--resume', String(resume.previous.pid));
  return new Promise<AgentStream>((resolve, reject) => {
    let child: AgentProcess;
    try {
      child = options.spawn(argv);
    } catch (err) {
      reject(startFailure(err as Error, python, description));
      return;
    }
    const { stdin, stdout } = child;
    if (!stdin || !stdout) {
      child.kill('SIGKILL');
      reject(new TypeError('the spawn function must pipe stdin and stdout'));
      return;
    }
    let stderrTail = '';
    let settled = false;
    const decoder = new FrameDecoder();
    const stream = new PipePair(stdout, stdin);
    // The lingering agent answers only after this (a fresh one ignores it).
    if (resume) stream.write(encodeFrame({ op: 'auth', id: 0, key: resume.previous.resumeKey }));

    const fail = (err: AgentUnavailableError) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      stream.off('data', onData);
      stream.destroy();
      child.kill('SIGKILL');
      reject(err);
    };
    const timer = setTimeout(() => {
      fail(
        new AgentUnavailableError(
          'no-hello',
          `the exec agent of ${description} did not say hello within ${helloTimeoutMs} ms` + tail(stderrTail),
        ),
      );
    }, helloTimeoutMs);

    const onStderr = (chunk: Buffer) => {
      stderrTail = (stderrTail + chunk.toString('utf8')).slice(-MAX_STDERR_TAIL_CHARS);
    };
    child.stderr?.on('data', onStderr);

    child.once('error', (err) => fail(startFailure(err, python, description)));
    child.once('close', (code, signal) => {
      if (settled) return;
      fail(exitFailure(code, signal, stderrTail, python, description));
    });
    // Errors of the pipes themselves (EPIPE once the process is gone) are its exit, reported above.
    stream.on('error', () => undefined);

    const onData = (chunk: Buffer) => {
      let frames: Frame[];
      try {
        frames = decoder.push(chunk);
      } catch (err) {
        const detail = err instanceof FrameError ? err.message : String(err);
        // `docker exec` reports a missing command on stdout, ahead of its exit status 127.
        if (NO_COMMAND.test(chunk.toString('utf8'))) {
          fail(exitFailure(127, null, chunk.toString('utf8'), python, description));
          return;
        }
        fail(notAnAgent(description, `its output is not the agent's framing (${detail})`, chunk));
        return;
      }
      if (frames.length === 0) {
        if (decoder.bufferedBytes > MAX_HELLO_FRAME_BYTES) fail(notAnAgent(description, 'its first frame is too long for a hello', chunk));
        return;
      }
      const [first, ...rest] = frames;
      const hello = parseHello(first!);
      if (!hello) {
        fail(notAnAgent(description, `its first frame is ${JSON.stringify(first!.header.op)}, not a hello`));
        return;
      }
      if (hello.version !== AGENT_PROTOCOL_VERSION) {
        fail(new AgentUnavailableError('version-mismatch', versionMismatchMessage(hello.version, description)));
        return;
      }
      settled = true;
      clearTimeout(timer);
      stream.off('data', onData);
      // Paused until the channel has its listeners on it: nothing is read before.
      stream.pause();
      child.stderr?.off('data', onStderr);
      if (child.stderr) logStderr(child.stderr, logger, description);
      stream.once('close', () => {
        // The agent exits once told to (bye) or once its stdin ends without a linger socket; the process
        // that carried the stream (a bridge, or one whose agent lingers in the sandbox) is ended after a grace.
        const killer = setTimeout(() => {
          if (lingerPath !== undefined && child.abandon) child.abandon();
          else child.kill('SIGKILL');
        }, EXIT_GRACE_MS);
        killer.unref();
        child.once('close', () => clearTimeout(killer));
      });
      resolve({ stream, decoder, hello, buffered: rest });
    };
    stream.on('data', onData);
  });
}

function tail(stderr: string): string {
  const text = stderr.trim();
  return text ? `; its stderr: ${text}` : '';
}

function startFailure(err: Error, python: string, description: string): AgentUnavailableError {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT') {
    return new AgentUnavailableError('no-python', `${description} has no ${python} to run the exec agent (${err.message})`);
  }
  return new AgentUnavailableError('agent-exited', `cannot start the exec agent of ${description}: ${err.message}`);
}

/** What an exit before the hello means; exported for unit tests. */
export function exitFailure(
  code: number | null,
  signal: string | null,
  stderr: string,
  python: string,
  description: string,
): AgentUnavailableError {
  // 127: the shell (ssh, sh -c) or runtime (docker exec) found no such command; 126: found, not executable.
  if (code === 127 || code === 126 || NO_COMMAND.test(stderr)) {
    return new AgentUnavailableError('no-python', `${description} has no usable ${python} to run the exec agent` + tail(stderr));
  }
  if (code === AGENT_EXIT_PYTHON_TOO_OLD && /or newer required/.test(stderr)) {
    return new AgentUnavailableError('python-too-old', `the ${python} of ${description} is too old for the exec agent` + tail(stderr));
  }
  const how = signal ? `was killed by ${signal}` : `exited with status ${code}`;
  return new AgentUnavailableError('agent-exited', `the exec agent of ${description} ${how} before its hello` + tail(stderr));
}

function notAnAgent(description: string, why: string, chunk?: Buffer): AgentUnavailableError {
  const sample = chunk ? `; it began with ${JSON.stringify(chunk.subarray(0, 80).toString('utf8'))}` : '';
  return new AgentUnavailableError(
    'not-an-agent',
    `the process started as the exec agent of ${description} did not speak its protocol: ${why}${sample} ` +
      '(a login script that prints to stdout does this; start the agent without one)',
  );
}

/** Keeps reading the agent's log (a full pipe would stall it) and logs the first lines. */
function logStderr(stderr: Readable, logger: Logger | undefined, description: string): void {
  let lines = 0;
  let partial = '';
  stderr.on('data', (chunk: Buffer) => {
    if (lines >= MAX_LOGGED_STDERR_LINES) return;
    const parts = (partial + chunk.toString('utf8')).split('\n');
    partial = (parts.pop() ?? '').slice(-MAX_STDERR_TAIL_CHARS);
    for (const line of parts) {
      if (!line.trim()) continue;
      if (++lines > MAX_LOGGED_STDERR_LINES) break;
      logger?.warn({ sandbox: description, line: line.slice(0, MAX_STDERR_TAIL_CHARS) }, 'exec agent says');
    }
  });
  stderr.on('error', () => undefined);
}

/**
 * A readable and a writable (a process's stdout and stdin) as one Duplex.
 * A write completes when the pipe took it, so `writableLength` counts what
 * the agent has not read yet, which is what the channel's backlog cap needs.
 */
export class PipePair extends Duplex {
  readonly #readable: Readable;
  readonly #writable: Writable;

  constructor(readable: Readable, writable: Writable) {
    super();
    this.#readable = readable;
    this.#writable = writable;
    readable.on('data', (chunk: Buffer) => {
      if (!this.push(chunk)) readable.pause();
    });
    readable.on('end', () => this.push(null));
    readable.on('error', (err) => this.destroy(err));
    writable.on('error', (err) => this.destroy(err));
  }

  override _read(): void {
    this.#readable.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.#writable.write(chunk, callback);
  }

  override _final(callback: (err?: Error | null) => void): void {
    this.#writable.end(callback);
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    this.#writable.destroy();
    this.#readable.destroy();
    callback(err);
  }
}
