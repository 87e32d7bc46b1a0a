/**
 * Result shapes of the built-in tools, as the tool-runtime contract states
 * them. Every result may instead be a tool error, `{"error": "..."}`: the
 * model reads those, so they are results, not exceptions. Fields not listed
 * here may appear (index signatures keep them reachable).
 */

/** Options of one tool call. */
export interface ToolCallOptions {
  /** Approvals given "for this session" apply per session id; defaults to the task's session id. */
  readonly sessionId?: string;
  /** Aborts the call on the client; the server stops the work when the call is cancelled. */
  readonly signal?: AbortSignal;
  /** Deadline for this call, in milliseconds from now. */
  readonly timeoutMs?: number;
}

/** A tool-level failure, as every tool may return. */
export interface ToolErrorResult {
  readonly error: string;
  readonly [key: string]: unknown;
}

/** `terminal` in the foreground: output with stderr merged, ANSI stripped, capped. */
export interface TerminalForegroundResult {
  readonly output: string;
  /** 124 after a timeout, 130 after an interrupt, -1 when the command was refused. */
  readonly exit_code: number;
  /** null when the command ran; a refusal message otherwise. */
  readonly error: string | null;
  readonly status?: 'error' | 'blocked' | 'pending_approval' | (string & {});
  /**
   * Where the command left the shell, when that differs (symlinks resolved)
   * from where it started: the `workdir`, else the task's working directory.
   * Absent after a timeout or an interrupt. With `workdir` the task's own
   * working directory stays as it was.
   */
  readonly cwd?: string;
  /**
   * Present when the task's container or sandbox had to be replaced: a fixed
   * warning that background processes and unpersisted files may be gone. The
   * output's `[Note: …]` line says what happened.
   */
  readonly environment_recreated?: string;
  readonly exit_code_meaning?: string;
  /** A recovery hint for a known failure shape, or a warning that exit code 0 probably masks a failure. */
  readonly hint?: string;
  readonly approval?: string;
  /** Set when a unary call waits for `Approve` (see {@link BerthTask.approve}). */
  readonly approval_id?: string;
  readonly approval_pending?: boolean;
  readonly [key: string]: unknown;
}

/** `terminal` with `background: true`. */
export interface TerminalBackgroundResult {
  readonly output: 'Background process started' | (string & {});
  /** The process id for `process_manage`: `proc_<12 hex>`. */
  readonly session_id: string;
  readonly pid: number;
  readonly exit_code: number;
  readonly error: null;
  /** Present when `notify` (or the older `notify_on_complete`/`watch_patterns`) was not set: nothing will say when it exits. */
  readonly hint?: string;
  /** Set when `notify` (true), `heartbeat` or a promoted foreground call asked for a notice at exit. */
  readonly notify_on_complete?: true;
  /** The interval heartbeats got (at least 60). */
  readonly heartbeat_seconds?: number;
  readonly persist_on_release?: true;
  /** The PTY was dropped for a command that reads piped input; write, then close. */
  readonly pty_note?: string;
  /** A foreground call over the timeout cap that was started in the background instead. */
  readonly promoted_from_foreground?: string;
  readonly [key: string]: unknown;
}

export type TerminalResult = TerminalForegroundResult | TerminalBackgroundResult;

/** `read_file`: numbered `N|line` rows (upstream Hermes' ReadResult). */
export interface ReadFileResult {
  readonly content: string;
  readonly total_lines: number;
  readonly file_size?: number;
  readonly truncated?: boolean;
  readonly hint?: string;
  readonly is_binary?: boolean;
  readonly is_image?: boolean;
  /** `"bytes"` when the page was cut at the 100,000-character budget; read on from `next_offset`. */
  readonly truncated_by?: 'bytes';
  readonly next_offset?: number;
  /** Unresolved git merge-conflict blocks in the lines returned. */
  readonly conflict_blocks?: number;
  readonly [key: string]: unknown;
}

export interface WriteFileResult {
  readonly bytes_written?: number;
  readonly dirs_created?: boolean;
  /** Absolute path written. */
  readonly resolved_path?: string;
  readonly files_modified?: string[];
  readonly error?: string;
  /** The file exists and this task has not seen all of its current content: read it, then write again. */
  readonly stale_write_blocked?: true;
  readonly [key: string]: unknown;
}

/** `patch` (upstream Hermes' PatchResult): `success` first; absolute paths. */
export interface PatchResult {
  readonly success?: boolean;
  /** The edit was already in the file; nothing was written. */
  readonly no_change?: boolean;
  readonly note?: string;
  readonly diff?: string;
  readonly files_modified?: string[];
  readonly files_created?: string[];
  readonly files_deleted?: string[];
  readonly error?: string;
  /** Absolute path of the one file edited. */
  readonly resolved_path?: string;
  /** What to do after a failed match (escalates after repeated failures on one file). */
  readonly _hint?: string;
  readonly [key: string]: unknown;
}

/** `search_files`: from 5 content matches on, rows come grouped as `matches_text` instead of `matches`. */
export interface SearchFilesResult {
  readonly total_count?: number;
  readonly matches?: Array<{ readonly path: string; readonly line: number; readonly content: string; readonly [key: string]: unknown }>;
  readonly matches_format?: string;
  readonly matches_text?: string;
  readonly files?: string[];
  readonly counts?: Record<string, number>;
  readonly truncated?: boolean;
  readonly total_count_is_lower_bound?: boolean;
  readonly limit_reason?: string;
  readonly warning?: string;
  readonly error?: string;
  readonly [key: string]: unknown;
}

/** `execute_code`: the script's stdout and how it ended. */
export interface ExecuteCodeResult {
  readonly status: 'success' | 'error' | 'timeout' | 'interrupted';
  readonly output: string;
  readonly tool_calls_made: number;
  readonly duration_seconds: number;
  readonly error?: string;
  readonly [key: string]: unknown;
}

/** `web_search`: `data.web` rows on success, `error` otherwise. */
export interface WebSearchResult {
  readonly success?: boolean;
  readonly data?: {
    readonly web: Array<{ readonly title: string; readonly url: string; readonly description: string; readonly position: number }>;
  };
  readonly error?: string;
  readonly [key: string]: unknown;
}

/** `web_extract`: one entry per URL; `error` is null for a page that was read. */
export interface WebExtractResult {
  readonly results?: Array<{ readonly url: string; readonly title: string; readonly content: string; readonly error: string | null }>;
  readonly error?: string;
  readonly [key: string]: unknown;
}

/** Result types by tool name, where the contract gives a shape. */
export interface ToolResults {
  terminal: TerminalResult;
  read_file: ReadFileResult;
  write_file: WriteFileResult;
  patch: PatchResult;
  search_files: SearchFilesResult;
  execute_code: ExecuteCodeResult;
  web_search: WebSearchResult;
  web_extract: WebExtractResult;
}

/**
 * The parsed result of tool `N`: its shape where the contract gives one,
 * otherwise unknown JSON. Any tool may answer `{"error": ...}` instead; test
 * with {@link isToolError}.
 */
export type ToolResultOf<N extends string> = N extends keyof ToolResults ? ToolResults[N] : unknown;

/** Whether a parsed result is a tool-level error: an object whose `error` is a non-empty string. */
export function isToolError(result: unknown): result is ToolErrorResult {
  if (typeof result !== 'object' || result === null) return false;
  const error = (result as { error?: unknown }).error;
  return typeof error === 'string' && error !== '';
}
