/**
 * The exec agent in a Modal sandbox, started with one SDK exec whose stdin
 * and stdout are the agent's stream: every command after that is a message
 * on it, not a new exec.
 *
 * The image (`terminal.modal_image`) does not carry the agent, so the exec
 * runs a few lines of Python that read the agent's archive (a known number
 * of bytes, unbuffered, so not one byte of the stream after it is taken)
 * from stdin, import its package from memory and run its __main__.py as
 * `berth_agent.pyz --stdio`. Nothing is written to the sandbox's disk, so a
 * snapshot never carries a stale agent and a command cannot swap the file
 * the next start would run.
 */
import { EventEmitter } from 'node:events';
import { PassThrough, Readable, Writable } from 'node:stream';
import type { ContainerProcess, Sandbox } from 'modal';
import { bootstrapCode } from '../shared/agent/agent-bootstrap.js';
import type { AgentProcess } from '../shared/agent/stdio-agent.js';

export { bootstrapCode };

/**
 * A ContainerProcess of the SDK as the {@link AgentProcess} startStdioAgent
 * drives. Each write to stdin is one stdin message of the SDK (writes queued
 * meanwhile go together in the next one), and completes once the command
 * router took it, so the channel's count of unsent bytes is true.
 */
export class ModalAgentProcess extends EventEmitter implements AgentProcess {
  readonly stdin: Writable;
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  #closed = false;
  #abort = new AbortController();
  /** Settles once the exec's stdin was closed (or could not be): the agent sees its stream end. */
  readonly stdinEnded: Promise<void>;

  /** `start` runs the exec; `prefix` is written to its stdin before anything else. */
  constructor(start: Promise<ContainerProcess>, prefix: Uint8Array) {
    super();
    const writer = start.then(async (proc) => {
      const w = proc.stdin.getWriter();
      await w.write(prefix);
      return w;
    });
    // Errors surface through the process's 'error' or 'close' below.
    writer.catch(() => undefined);
    let ending: Promise<void> | undefined;
    // Once, whether the channel ended its stream or dropped it (destroyed it unended).
    const endStdin = () => (ending ??= writer.then((w) => w.close()));
    this.stdin = new Writable({
      writev: (chunks, callback) => {
        const data = Buffer.concat(chunks.map((c) => c.chunk as Buffer));
        writer.then((w) => w.write(data)).then(() => callback(), (err: Error) => callback(err));
      },
      final: (callback) => {
        endStdin().then(() => callback(), (err: Error) => callback(err));
      },
    });
    let stdinEnded!: () => void;
    this.stdinEnded = new Promise<void>((resolve) => (stdinEnded = resolve));
    // The exec outlives its client on Modal: a stream the channel dropped must still end the agent's stdin,
    // or the agent never learns it is gone (it then ends everything, or lingers with a linger path).
    this.stdin.once('close', () => {
      endStdin().then(stdinEnded, stdinEnded);
    });
    start.then(
      (proc) => this.#attach(proc),
      (err: Error) => {
        this.#closed = true;
        this.emit('error', err);
      },
    );
  }

  #attach(proc: ContainerProcess): void {
    const signal = this.#abort.signal;
    // The channel destroys the streams it was given when it closes: stop reading then.
    this.stdout.once('close', () => this.#abort.abort());
    const pump = async (from: ReadableStream<Uint8Array>, to: PassThrough) => {
      try {
        for await (const chunk of Readable.fromWeb(from as never, { signal }) as AsyncIterable<Uint8Array>) {
          if (to.destroyed) break;
          if (!to.write(chunk)) await new Promise((resolve) => to.once('drain', resolve).once('close', resolve));
        }
      } catch {
        // An aborted or broken stream ends the output all the same.
      }
      to.end();
    };
    const outputs = Promise.all([
      pump(proc.stdout as unknown as ReadableStream<Uint8Array>, this.stdout),
      pump(proc.stderr as unknown as ReadableStream<Uint8Array>, this.stderr),
    ]);
    const exit = proc.wait().then(
      (code) => ({ code, signal: null }),
      () => ({ code: null, signal: 'SIGKILL' as NodeJS.Signals }),
    );
    void Promise.all([exit, outputs]).then(([e]) => this.#close(e.code, e.signal));
  }

  #close(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.#closed) return;
    this.#closed = true;
    this.emit('close', code, signal);
  }

  /**
   * The SDK cannot signal an exec. Ending its stdin ends the agent (it kills
   * what it started and exits, or lingers when it has a linger path); this
   * also stops reading, so the process counts as gone for the caller.
   */
  kill(): boolean {
    if (this.#closed) return false;
    this.stdin.destroy();
    this.#abort.abort();
    this.#close(null, 'SIGKILL');
    return true;
  }
}

/**
 * Starts the agent in `sandbox` (an AgentSpawn for startStdioAgent: argv is
 * `python, path, --stdio [--linger PATH [--resume PID]]`); `source` is
 * the agent's archive (loadAgentScript). With `after`, the exec starts
 * once it settled (the previous exec's stdin closed, so the agent there
 * already knows its stream is gone when the resume looks for it).
 */
export function spawnModalAgent(sandbox: Sandbox, argv: readonly string[], source: Buffer, after?: Promise<void>): ModalAgentProcess {
  const python = argv[0] ?? 'python3';
  const exec = () => sandbox.exec([python, '-c', bootstrapCode(source.length), ...argv.slice(2)], { mode: 'binary', stdout: 'pipe', stderr: 'pipe' });
  return new ModalAgentProcess(after ? after.then(exec) : exec(), source);
}
