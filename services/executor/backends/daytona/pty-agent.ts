/**
 * The exec agent's byte stream over a Daytona PTY session: the SDK's one
 * bidirectional channel into a sandbox (`process.createPty`, a WebSocket
 * carrying binary both ways). Session commands are not used: their stdin is
 * a text field per HTTP request and their output comes back demultiplexed as
 * text, which the agent's binary framing does not survive.
 *
 * A PTY is a terminal, not a pipe, so the login shell it starts is first
 * told `stty raw -echo -iexten` (no echo, no line editing, no signal keys,
 * no CR/LF translation: bytes pass unchanged both ways). The shell then
 * prints a marker line with the session's home and working directory, reads
 * the agent's source from the stream into a file (`head -c N`) and execs
 * `python3 FILE --stdio`. Everything the shell printed before the marker
 * (motd, prompt, the echo of the typed line) is dropped; from the agent's
 * first byte on, the stream is the agent's.
 */
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { PassThrough, Writable } from 'node:stream';
import type { Logger } from '../../../common/logging.js';
import { shellQuote } from '../../../common/shell/quote.js';
import type { AgentProcess, AgentSpawn } from '../shared/agent/stdio-agent.js';

/** The part of an SDK PTY handle this needs. */
export interface PtyHandleLike {
  sendInput(data: string | Uint8Array): Promise<void>;
  wait(): Promise<{ exitCode?: number | undefined; error?: string | undefined }>;
  kill(): Promise<void>;
  disconnect(): Promise<void>;
}

/** Opens a PTY session in the sandbox (the SDK's `sandbox.process.createPty`). */
export type OpenPty = (options: {
  readonly id: string;
  readonly cols: number;
  readonly rows: number;
  readonly onData: (data: Uint8Array) => void;
}) => Promise<PtyHandleLike>;

/** What the sandbox's shell said before handing the stream to the agent. */
export interface SandboxDirs {
  readonly home: string;
  readonly cwd: string;
}

/**
 * Largest WebSocket message sent: the daemon reads PTY input with a 64 KiB
 * limit per message and drops a client that exceeds it.
 */
export const MAX_INPUT_MESSAGE_BYTES = 32 * 1024;

/** Sends `data` in messages of at most {@link MAX_INPUT_MESSAGE_BYTES}, in order. */
async function sendInChunks(handle: PtyHandleLike, data: Buffer): Promise<void> {
  for (let at = 0; at < data.length; at += MAX_INPUT_MESSAGE_BYTES) {
    await handle.sendInput(data.subarray(at, at + MAX_INPUT_MESSAGE_BYTES));
  }
}

/** Output the shell may print before the marker (motd, prompt, echo) that is read and dropped. */
const MAX_PREAMBLE_BYTES = 256 * 1024;
/** Time for the PTY's shell to print the marker: a login shell with a slow profile is allowed a while. */
const MARKER_TIMEOUT_MS = 30_000;

/**
 * The line typed into the PTY's shell. The marker's literal text appears only
 * in printf's output, never in the echo of the line itself (the format holds
 * `%s` where the output holds the nonce).
 */
export function setupLine(nonce: string, argv: readonly string[], agentBytes: number): string {
  const [python, agentPath] = argv;
  if (!python || !agentPath) throw new TypeError('the agent argv must name the interpreter and the agent file');
  const dir = agentPath.slice(0, agentPath.lastIndexOf('/')) || '/';
  const tmp = `${agentPath}.$$`;
  const run = argv.map(shellQuote).join(' ');
  return (
    'stty raw -echo -iexten 2>/dev/null; ' +
    `if ! command -v ${shellQuote(python)} >/dev/null 2>&1; then printf 'BERTH-NOPY-%s\\n' ${nonce}; exit 127; fi; ` +
    `printf 'BERTH-READY-%s\\n%s\\n%s\\n' ${nonce} "$HOME" "$PWD"; ` +
    `umask 077; mkdir -p ${shellQuote(dir)} && head -c ${agentBytes} > ${shellQuote(tmp)} && mv -f ${shellQuote(tmp)} ${shellQuote(agentPath)} && ` +
    `exec ${run} 2>>${shellQuote(`${dir}/agent.log`)}; exit 127\n`
  );
}

type Phase = 'connecting' | 'preamble' | 'agent' | 'closed';

class PtyAgentProcess extends EventEmitter implements AgentProcess {
  readonly stdout = new PassThrough();
  readonly stdin: Writable;
  readonly stderr = null;
  readonly #nonce = randomBytes(8).toString('hex');
  #phase: Phase = 'connecting';
  #preamble = Buffer.alloc(0);
  #handle: PtyHandleLike | undefined;
  #ready: Promise<PtyHandleLike>;
  readonly #sourceSent: Promise<PtyHandleLike>;
  #onSourceSent: (handle: PtyHandleLike) => void = () => undefined;
  #closed = false;
  #markerTimer: NodeJS.Timeout | undefined;
  /** The agent lingers on a socket when its stream is gone: a dropped connection must not kill its session. */
  readonly #lingers: boolean;

  constructor(
    private readonly openPty: OpenPty,
    private readonly argv: readonly string[],
    private readonly agentSource: Buffer,
    private readonly onDirs: (dirs: SandboxDirs) => void,
    private readonly logger: Logger | undefined,
  ) {
    super();
    this.#lingers = argv.includes('--linger');
    this.stdin = new Writable({
      // After the agent's source: the shell reads exactly that much first (a resume writes auth at once).
      write: (chunk: Buffer, _encoding, callback) => {
        this.#sourceSent.then((h) => sendInChunks(h, chunk)).then(() => callback(), callback);
      },
      final: (callback) => {
        // The agent ends when its stdin ends; a PTY has no half-close, so the session is killed.
        void this.#killSession().finally(() => callback());
      },
    });
    this.#ready = this.#start();
    this.#ready.catch(() => undefined);
    this.#sourceSent = new Promise<PtyHandleLike>((resolve, reject) => {
      this.#onSourceSent = resolve;
      this.#ready.catch(reject);
      this.once('close', () => reject(new Error('the PTY session ended before the agent started')));
    });
    this.#sourceSent.catch(() => undefined);
  }

  async #start(): Promise<PtyHandleLike> {
    const id = `berth-agent-${this.#nonce}`;
    try {
      this.#handle = await this.openPty({ id, cols: 200, rows: 50, onData: (data) => this.#onData(Buffer.from(data)) });
    } catch (err) {
      this.#emitError(err instanceof Error ? err : new Error(String(err)));
      throw err;
    }
    const handle = this.#handle;
    if (this.#closed) {
      await handle.kill().catch(() => undefined);
      throw new Error('closed');
    }
    void handle.wait().then(
      (r) => this.#finish(r.exitCode ?? null),
      () => this.#finish(null),
    );
    this.#phase = 'preamble';
    this.#markerTimer = setTimeout(() => {
      this.logger?.warn({ preamble: this.#preamble.subarray(-400).toString('utf8') }, 'the Daytona PTY never printed the agent marker');
      void this.#killSession();
    }, MARKER_TIMEOUT_MS);
    await handle.sendInput(setupLine(this.#nonce, this.argv, this.agentSource.length));
    this.#scanPreamble();
    return handle;
  }

  #onData(chunk: Buffer): void {
    if (this.#phase === 'agent') {
      this.stdout.write(chunk);
      return;
    }
    if (this.#phase === 'closed') return;
    this.#preamble = Buffer.concat([this.#preamble, chunk]);
    if (this.#phase === 'preamble') this.#scanPreamble();
  }

  #scanPreamble(): void {
    const text = this.#preamble.toString('latin1');
    if (text.includes(`BERTH-NOPY-${this.#nonce}\n`)) {
      // Reported as the shell's "not found" status, which stdio-agent.ts maps to no-python.
      this.#phase = 'closed';
      this.#finish(127);
      return;
    }
    const marker = `BERTH-READY-${this.#nonce}\n`;
    const at = text.indexOf(marker);
    if (at < 0) {
      if (this.#preamble.length > MAX_PREAMBLE_BYTES) {
        this.logger?.warn('the Daytona PTY printed too much before the agent marker');
        void this.#killSession();
      }
      return;
    }
    // The marker and two lines: home and working directory.
    const afterMarker = at + marker.length;
    const nl1 = text.indexOf('\n', afterMarker);
    const nl2 = nl1 < 0 ? -1 : text.indexOf('\n', nl1 + 1);
    if (nl2 < 0) return;
    const decode = (from: number, to: number) => this.#preamble.subarray(from, to).toString('utf8');
    this.onDirs({ home: decode(afterMarker, nl1), cwd: decode(nl1 + 1, nl2) });
    clearTimeout(this.#markerTimer);
    const rest = this.#preamble.subarray(nl2 + 1);
    this.#preamble = Buffer.alloc(0);
    this.#phase = 'agent';
    // The shell now reads exactly the agent's length from the stream; the agent's bytes follow.
    const handle = this.#handle!;
    void sendInChunks(handle, this.agentSource).then(
      () => this.#onSourceSent(handle),
      (err: unknown) => this.#emitError(err as Error),
    );
    if (rest.length > 0) this.stdout.write(rest);
  }

  #emitError(err: Error): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#phase = 'closed';
    clearTimeout(this.#markerTimer);
    this.emit('error', err);
    this.stdout.end();
  }

  #finish(code: number | null): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#phase = 'closed';
    clearTimeout(this.#markerTimer);
    this.stdout.end();
    // No exit status: the connection dropped (a proxy, the network) while the session lives on in
    // the daemon, with the agent and its processes. It is killed, as an exited process would be gone,
    // unless the agent lingers: the next start's bridge tells it that its stream is gone and finds it.
    if (code === null && !this.#lingers) void this.#killSession();
    else void this.#handle?.disconnect().catch(() => undefined);
    // After the stdout end is seen, as a child process's 'close' comes after its streams end.
    setImmediate(() => this.emit('close', code, null));
  }

  #killing: Promise<void> | undefined;

  /**
   * Kills the PTY session (once). Needed even after the WebSocket closed:
   * the daemon keeps a session whose client went away, with the agent and
   * its processes in it.
   */
  #killSession(): Promise<void> {
    const handle = this.#handle;
    if (!handle) return Promise.resolve();
    this.#killing ??= (async () => {
      await handle.kill().catch(() => undefined);
      await handle.disconnect().catch(() => undefined);
    })();
    return this.#killing;
  }

  /**
   * The stream is gone but the agent did not exit: it lingers (its session
   * is its process, so killing the session would end it and what it keeps).
   * Only the WebSocket is closed; the session ends when the agent exits.
   */
  abandon(): void {
    if (!this.#lingers) {
      this.kill();
      return;
    }
    if (this.#phase !== 'closed') this.#phase = 'closed';
    void this.#handle?.disconnect().catch(() => undefined);
  }

  kill(): boolean {
    if (this.#handle) {
      void this.#killSession();
      return true;
    }
    // Not connected yet: #start kills the session as soon as it exists.
    const was = this.#closed;
    this.#closed = true;
    return !was;
  }
}

/**
 * An {@link AgentSpawn} that starts `argv` (`python3 AGENT --stdio`) in a new
 * PTY session, first writing `agentSource` to the file argv[1] names.
 * `onDirs` hears the session's home and working directory.
 */
export function ptyAgentSpawn(
  openPty: OpenPty,
  agentSource: Buffer,
  onDirs: (dirs: SandboxDirs) => void,
  logger?: Logger,
): AgentSpawn {
  return (argv) => new PtyAgentProcess(openPty, argv, agentSource, onDirs, logger);
}
