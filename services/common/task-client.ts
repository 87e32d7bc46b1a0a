/**
 * What tools see of a task's environment. The dispatcher implements it over
 * the executor's gRPC API; tests implement it directly. Paths may be relative
 * (to the task's current cwd) or start with `~`; the executor resolves them.
 */

export interface TaskExecRequest {
  /** The command exactly as the model sent it (after the terminal tool's own rewrites). */
  readonly command: string;
  readonly timeoutMs: number;
  /** Absolute directory to run in for this call only; the task's saved cwd is used otherwise. */
  readonly workdir?: string;
  readonly stdin?: string;
  readonly pty?: boolean;
  /**
   * Run with the task's cwd and environment but do not save state back.
   * For commands tools run on their own behalf (search_files, patch helpers).
   */
  readonly stateless?: boolean;
  /** Output cap in characters, applied with the spec's head/tail truncation. */
  readonly maxOutputChars?: number;
  readonly signal?: AbortSignal;
  /** Live output (raw text as produced), for streaming to a Session client. */
  readonly onOutput?: (text: string) => void;
}

export interface TaskExecResult {
  /** stdout and stderr merged, ANSI stripped, cwd marker removed, truncated per the cap. */
  readonly output: string;
  /** 124 on timeout, 130 on interrupt. */
  readonly exitCode: number;
  readonly timedOut: boolean;
  readonly interrupted: boolean;
  /** Things the user should know, e.g. "environment was recreated". */
  readonly notices: readonly string[];
  /**
   * Where the command started (the workdir, else the task's cwd) and where it
   * ended, with symlinks resolved. Both present only when the command itself
   * reported where it ended (not timed out, not interrupted, not stateless).
   */
  readonly startCwd?: string;
  readonly endCwd?: string;
  /**
   * True when the task's container or sandbox was replaced (lost, renewed, or
   * released while idle) since the previous command: background processes and
   * files outside persisted paths may be gone. `notices` says what happened.
   */
  readonly environmentRecreated?: boolean;
}

export interface TaskFile {
  readonly absPath: string;
  readonly content: Buffer;
}

export interface TaskWriteResult {
  readonly absPath: string;
  readonly bytesWritten: number;
  readonly dirsCreated: boolean;
}

export interface TaskStat {
  readonly absPath: string;
  readonly exists: boolean;
  readonly isDirectory: boolean;
  readonly sizeBytes: number;
}

export interface TaskBackgroundRequest {
  readonly command: string;
  readonly workdir?: string;
  readonly pty?: boolean;
  /**
   * Keep stdin a pipe until process_manage `close` (commands that read piped
   * input to its end). Otherwise a process without a PTY starts with its
   * stdin at end of input, as upstream's do.
   */
  readonly pipeStdin?: boolean;
  readonly notifyOnComplete?: boolean;
  readonly watchPatterns?: readonly string[];
  /** Heartbeat interval in seconds (at least 60; absent or 0: none). */
  readonly heartbeatSeconds?: number;
  /** Listed as `persist_on_release` by process_manage list. */
  readonly persistOnRelease?: boolean;
}

export interface TaskProcessRequest {
  /** list, poll, log, wait, kill, write, submit, close (already validated). */
  readonly action: string;
  readonly sessionId?: string;
  readonly data?: string;
  readonly timeoutMs?: number;
  readonly offset?: number;
  readonly limit?: number;
}

/** One tool call an execute_code script made, as the executor forwards it. */
export interface TaskCodeToolCall {
  readonly tool: string;
  /** The request's `args`: a JSON object, validated by the executor. */
  readonly argsJson: string;
}

/** Runs an execute_code script in the task's environment (spec §6). */
export interface TaskCodeRunRequest {
  readonly code: string;
  /** Source of hermes_tools.py. */
  readonly stubModule: string;
  readonly mode: 'project' | 'strict';
  readonly timeoutMs: number;
  readonly maxStdoutBytes: number;
  readonly maxStderrBytes: number;
  /** Names let through the scrubbing (terminal.env_passthrough, skill-declared names). */
  readonly envPassthrough: readonly string[];
  /** Credential names that never pass, besides the built-in provider list. */
  readonly credentialEnv: readonly string[];
  /** The tools the stub exposes (logged by the executor; the caller enforces them). */
  readonly allowedTools: readonly string[];
  /** Whether the script may run as a plain subprocess of the executor host (local backend). */
  readonly allowHostSubprocess: boolean;
  /** IANA time zone name for the script's TZ; absent or empty keeps the environment's own. */
  readonly timezone?: string;
  readonly signal?: AbortSignal;
  /** Answers one of the script's tool calls with the tool's result string. */
  readonly onToolCall: (call: TaskCodeToolCall) => Promise<string>;
}

export interface TaskCodeRunResult {
  /** Capped (head and tail kept, with the truncation notice). */
  readonly stdout: string;
  /** The head of stderr. */
  readonly stderr: string;
  readonly exitCode: number;
  readonly timedOut: boolean;
  readonly interrupted: boolean;
  /** Where the script ran, for logs and notices. */
  readonly ranIn: string;
  readonly interpreter: string;
  readonly notices: readonly string[];
}

/** One request to an MCP server of the task (tools/list or tools/call), run where the task runs. */
export interface TaskMcpRequest {
  readonly serverName: string;
  /** The server's `mcp_servers` entry as JSON. */
  readonly serverJson: string;
  readonly method: 'list_tools' | 'call_tool';
  readonly tool?: string;
  /** A JSON object. */
  readonly argumentsJson?: string;
}

/** The server's answer (JSON), or why there is none, in words for the model. */
export type TaskMcpResult = { readonly resultJson: string } | { readonly error: string };

export interface TaskClient {
  exec(request: TaskExecRequest): Promise<TaskExecResult>;
  /** Rejects with NotFoundError when the file does not exist. */
  readFile(path: string): Promise<TaskFile>;
  /** Creates parent directories. */
  writeFile(path: string, content: string | Uint8Array): Promise<TaskWriteResult>;
  stat(path: string): Promise<TaskStat>;
  startBackground(request: TaskBackgroundRequest): Promise<{ sessionId: string; pid: number }>;
  /** Runs a `process` tool action; returns the tool's result JSON string. */
  process(request: TaskProcessRequest): Promise<string>;
  /** Runs an execute_code script; absent where the environment cannot run scripts. */
  runCode?(request: TaskCodeRunRequest): Promise<TaskCodeRunResult>;
  /** Runs one MCP server request; absent where the executor has no MCP support (test doubles). */
  mcpRequest?(request: TaskMcpRequest): Promise<TaskMcpResult>;
}
