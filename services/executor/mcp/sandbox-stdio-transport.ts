/**
 * An MCP stdio transport whose server runs inside a task's own environment:
 * the process is a background process of the task's sandbox (the backend's
 * `startBackground`, through the shell-state runner, so it starts in the
 * task's cwd with its variables), its stdin gets one JSON-RPC message per
 * line, and its stdout is read back as lines.
 *
 * Everything the process writes is hostile input: a line longer than
 * {@link MAX_LINE_BYTES} stops the server, a line that is not a JSON object
 * is skipped (kept with stderr for error messages), and stderr goes to a file
 * in the task's private state directory, never between the JSON-RPC lines.
 */
import { posix } from 'node:path';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { JSONRPCMessageSchema, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { shellQuote } from '../../common/shell/quote.js';
import type { BackendEnvironment, BackgroundHandle } from '../backend.js';
import type { ShellBackgroundRequest } from '../shell-state/shell-state-runner.js';

/** Longest stdout line accepted from a server (one JSON-RPC message). */
export const MAX_LINE_BYTES = 4 * 1024 * 1024;
/** Characters of the server's stderr (and stray stdout) quoted in error messages. */
const DIAGNOSTIC_TAIL_CHARS = 1500;

/** What the transport needs of the task: its environment (stderr file) and a way to start a background command. */
export interface SandboxLauncher {
  readonly env: Pick<BackendEnvironment, 'stateDir' | 'readFile'>;
  startBackground(request: ShellBackgroundRequest): Promise<BackgroundHandle>;
}

export interface StdioServerCommand {
  readonly name: string;
  readonly command: string;
  readonly args: readonly string[];
  readonly env: Readonly<Record<string, string>>;
}

/** How the server process ended, once it did. */
export interface ServerExit {
  readonly exitCode: number | undefined;
  /** Why the transport ended it, when it did (an oversized line). */
  readonly reason: string | undefined;
}

export class SandboxStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;

  readonly #launcher: SandboxLauncher;
  readonly #server: StdioServerCommand;
  readonly #stderrPath: string;
  #handle: BackgroundHandle | undefined;
  #pending: Buffer[] = [];
  #pendingBytes = 0;
  #stray = '';
  #exit: ServerExit | undefined;
  #stopReason: string | undefined;
  #closed = false;

  constructor(launcher: SandboxLauncher, server: StdioServerCommand) {
    this.#launcher = launcher;
    this.#server = server;
    this.#stderrPath = posix.join(launcher.env.stateDir, `mcp-${server.name}.stderr`);
  }

  /** Set once the process is gone. */
  get exit(): ServerExit | undefined {
    return this.#exit;
  }

  async start(): Promise<void> {
    const argv = [this.#server.command, ...this.#server.args].map(shellQuote).join(' ');
    // stderr to a file of the task's own, so it never splits a JSON-RPC line on stdout.
    const command = `exec 2>${shellQuote(this.#stderrPath)}; exec ${argv}`;
    this.#handle = await this.#launcher.startBackground({
      command,
      env: this.#server.env,
      onOutput: (chunk) => this.#onOutput(chunk),
      onExit: (code) => this.#onExit(code),
    });
  }

  async send(message: JSONRPCMessage): Promise<void> {
    const handle = this.#handle;
    if (handle === undefined || this.#exit !== undefined) throw new Error(`MCP server '${this.#server.name}' is not running`);
    await handle.write(`${JSON.stringify(message)}\n`);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#handle?.kill().catch(() => undefined);
    if (this.#exit === undefined) this.#finish(undefined);
  }

  /** The last part of the server's stderr and of stdout lines that were not JSON-RPC, for error messages. */
  async diagnostics(): Promise<string> {
    let stderr = '';
    try {
      stderr = (await this.#launcher.env.readFile(this.#stderrPath)).toString('utf8');
    } catch {
      // No file: the process never got as far as the redirection.
    }
    const text = `${stderr}${this.#stray}`.trim();
    return text.length <= DIAGNOSTIC_TAIL_CHARS ? text : `…${text.slice(-DIAGNOSTIC_TAIL_CHARS)}`;
  }

  #onOutput(chunk: Buffer): void {
    if (this.#stopReason !== undefined) return;
    let start = 0;
    for (let i = chunk.indexOf(0x0a); i !== -1; i = chunk.indexOf(0x0a, start)) {
      this.#pending.push(chunk.subarray(start, i));
      const line = Buffer.concat(this.#pending).toString('utf8');
      this.#pending = [];
      this.#pendingBytes = 0;
      start = i + 1;
      this.#onLine(line);
      if (this.#stopReason !== undefined) return;
    }
    const rest = chunk.subarray(start);
    this.#pendingBytes += rest.length;
    if (this.#pendingBytes > MAX_LINE_BYTES) {
      this.#stop(`it wrote a line longer than ${MAX_LINE_BYTES} bytes to stdout`);
      return;
    }
    if (rest.length > 0) this.#pending.push(Buffer.from(rest));
  }

  #onLine(raw: string): void {
    if (Buffer.byteLength(raw, 'utf8') > MAX_LINE_BYTES) {
      this.#stop(`it wrote a line longer than ${MAX_LINE_BYTES} bytes to stdout`);
      return;
    }
    const line = raw.trim();
    if (line === '') return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      this.#noteStray(line);
      return;
    }
    const message = JSONRPCMessageSchema.safeParse(parsed);
    if (!message.success) {
      this.#noteStray(line);
      return;
    }
    this.onmessage?.(message.data);
  }

  #noteStray(line: string): void {
    this.#stray = `${this.#stray}${line.slice(0, DIAGNOSTIC_TAIL_CHARS)}\n`.slice(-DIAGNOSTIC_TAIL_CHARS);
  }

  #stop(reason: string): void {
    this.#stopReason = reason;
    this.#pending = [];
    this.#pendingBytes = 0;
    void this.#handle?.kill().catch(() => undefined);
    this.onerror?.(new Error(reason));
  }

  #onExit(code: number): void {
    this.#finish(code);
  }

  #finish(code: number | undefined): void {
    if (this.#exit !== undefined) return;
    this.#exit = { exitCode: code, reason: this.#stopReason };
    this.onclose?.();
  }
}
