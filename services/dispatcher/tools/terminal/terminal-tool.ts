/**
 * The `terminal` tool: runs a shell command in the task's environment, in the
 * foreground (wait for the result) or in the background (tracked by the
 * `process_manage` tool). Result shapes and error strings follow the Hermes tool
 * protocol (spec/tool-runtime.md §3); the executor does the running, ANSI
 * stripping and output truncation.
 */
import { effectiveHeartbeatSeconds } from '../../../common/process-notification.js';
import type { TaskExecResult } from '../../../common/task-client.js';
import type { ToolArgs, ToolContext, ToolRegistration, ToolSchema } from '../../registry/tool-types.js';
import { pythonTypeName } from '../python-type-name.js';
import {
  PTY_DISABLED_NOTE,
  commandRequiresPipeStdin,
  readBackgroundModifiers,
  type BackgroundModifiers,
} from './background-options.js';
import { terminalGuardPipeline } from './guards/guard-pipeline.js';
import {
  applyAfterRun,
  applyBeforeRun,
  refusal,
  type ForegroundOutcome,
  type TerminalCall,
  type TerminalGuard,
} from './guards/terminal-guard.js';

/** Limits the operator can tune; all in the units their names say. */
export interface TerminalToolOptions {
  /** Foreground timeout when the model sends none. */
  readonly defaultTimeoutSec: number;
  /** Larger foreground timeouts run the command in the background instead (env `TERMINAL_MAX_FOREGROUND_TIMEOUT`). */
  readonly maxForegroundTimeoutSec: number;
  /** Output cap handed to the executor, which keeps 40% head and 60% tail. */
  readonly maxOutputChars: number;
  /** Mask secrets in the output returned (`security.redact_secrets`). */
  readonly redactSecrets: boolean;
}

export const DEFAULT_TERMINAL_TOOL_OPTIONS: TerminalToolOptions = {
  defaultTimeoutSec: 180,
  maxForegroundTimeoutSec: 600,
  maxOutputChars: 50_000,
  redactSecrets: true,
};

/** Fills defaults and rejects contradictory limits at startup rather than on the first call. */
function compileOptions(options: Partial<TerminalToolOptions>): TerminalToolOptions {
  const compiled = { ...DEFAULT_TERMINAL_TOOL_OPTIONS, ...options };
  for (const [key, value] of Object.entries(compiled)) {
    if (typeof value === 'boolean') continue;
    if (!Number.isInteger(value) || value < 1) {
      throw new RangeError(`terminal tool option ${key} must be a positive integer, got ${String(value)}`);
    }
  }
  if (compiled.defaultTimeoutSec > compiled.maxForegroundTimeoutSec) {
    throw new RangeError(
      `terminal tool defaultTimeoutSec (${compiled.defaultTimeoutSec}) exceeds ` +
        `maxForegroundTimeoutSec (${compiled.maxForegroundTimeoutSec})`,
    );
  }
  return compiled;
}

function buildSchema(options: TerminalToolOptions): ToolSchema {
  return {
    name: 'terminal',
    description:
      "Run a shell command (bash) in the task's environment and return its combined stdout and stderr with the exit code. " +
      'The working directory, exported variables and shell functions persist between calls, but each call is a fresh ' +
      'process: do not rely on background jobs started with & surviving. Output longer than ' +
      `${options.maxOutputChars} characters is cut in the middle; prefer commands that print only what you need ` +
      '(grep, head, tail, wc). For servers, watchers and anything that does not finish on its own, use background=true ' +
      'and then the process_manage tool to read output, wait for or stop it; add notify=true to background jobs that ' +
      'do finish, so their end is announced. Commands cannot prompt for input in the foreground; pass non-interactive ' +
      'flags (e.g. -y) instead, or run interactive programs with background=true and pty=true.',
    parameters: {
      type: 'object',
      properties: {
        command: {
          type: 'string',
          description: 'The bash command line to run. Pipes, && chains, redirections and heredocs are allowed.',
        },
        background: {
          type: 'boolean',
          default: false,
          description:
            'Start the command as a background process and return at once with a session_id (use the process_manage tool ' +
            'to poll, read its log, wait, send input or kill it). Required for servers and other long-running commands; ' +
            'do not use nohup, setsid or a trailing & instead. Pair with notify=true for anything with a defined end; ' +
            'without it the process runs silently. Its stdin is at end of input unless pty=true.',
        },
        timeout: {
          type: 'integer',
          minimum: 1,
          default: options.defaultTimeoutSec,
          description:
            `Seconds to wait for a foreground command before it is killed (exit code 124). Default ${options.defaultTimeoutSec}, ` +
            `foreground maximum ${options.maxForegroundTimeoutSec}. The call returns as soon as the command finishes, so a ` +
            `generous value costs nothing. A foreground timeout above ${options.maxForegroundTimeoutSec} starts the command ` +
            'as a tracked background process with notify=true instead (the result says so; do not run it again).',
        },
        workdir: {
          type: 'string',
          description:
            'Absolute directory to run this one command in, without changing the saved working directory. ' +
            'Omit to use the current working directory. Plain paths only: no shell metacharacters.',
        },
        pty: {
          type: 'boolean',
          default: false,
          description:
            'With background=true: run under a pseudo-terminal, for interactive programs that hang or refuse to run ' +
            'without one (REPLs, interactive CLIs); drive them with process_manage (action "submit" or "write"). ' +
            'Output then contains whatever the program draws.',
        },
        notify: {
          anyOf: [{ type: 'boolean' }, { type: 'array', items: { type: 'string' } }],
          description:
            'With background=true: notify=true sends exactly one notification when the process exits, with its exit ' +
            'code and final output (right for builds, test runs, deploys: anything that finishes). A list of strings ' +
            'instead notifies when an output line contains one of them: only for one-off readiness signals of ' +
            'processes that never exit (e.g. ["Application startup complete"]); rate-limited, and switched off if it ' +
            'fires too often. Omit for silent servers and daemons.',
        },
        heartbeat: {
          type: 'integer',
          minimum: 0,
          default: 0,
          description:
            'With background=true: also send a notification every this many seconds (at least 60) with the output ' +
            'produced since the last one; skipped when there is no new output. 0 turns it off. For long bounded jobs ' +
            'you must follow while they run (full test suites, deploys), never for servers or watchers. Implies notify=true.',
        },
        persist_on_release: {
          type: 'boolean',
          default: false,
          description:
            'With background=true: mark a long-running job the user wants kept; process_manage list shows it. The ' +
            'process still ends when the task ends, and process_manage kill still stops it.',
        },
      },
      required: ['command'],
    },
  };
}

/**
 * The reference tool's `environment_recreated` text, given when the task's
 * container or sandbox was replaced before or while the command ran. Berth's
 * own notice, in the output, says which backend did what.
 */
export const ENVIRONMENT_RECREATED_NOTE =
  'The execution environment was recreated while running this command (the previous container/sandbox was gone). ' +
  'Persistent files were restored where the backend supports it, but background processes and any files outside ' +
  'persisted paths from earlier commands may be lost — verify state before relying on prior work.';

/** Longest directory the result echoes; the executor's marker is bounded, this bounds what reaches the model. */
const MAX_CWD_CHARS = 4096;

/**
 * The `cwd` key: where the command ended, when that differs from where it
 * started (the workdir, else the task's cwd). The executor reports both with
 * symlinks resolved, as the reference tool compares `realpath`s, and only when
 * the command reported it itself (not timed out or interrupted).
 */
function changedCwd(result: TaskExecResult): string | undefined {
  const { startCwd, endCwd } = result;
  if (result.timedOut || result.interrupted || startCwd === undefined || endCwd === undefined) return undefined;
  const plausible = (dir: string) => dir.startsWith('/') && dir.length <= MAX_CWD_CHARS && !/[\0\n\r]/.test(dir);
  if (!plausible(startCwd) || !plausible(endCwd)) return undefined;
  return startCwd === endCwd ? undefined : endCwd;
}

/**
 * The foreground result. As in the reference tool the status suffix follows
 * the output as printed, and the whole text is then stripped of surrounding
 * whitespace, so a command that printed nothing reads
 * `[Command timed out after 5s]` without a leading newline. The after-run
 * guards shape it before Berth's own notices are added.
 */
function foregroundResult(call: TerminalCall, result: TaskExecResult, guards: readonly TerminalGuard[]): string {
  let output = result.output;
  let exitCode = result.exitCode;
  if (result.timedOut) {
    exitCode = 124;
    output += `\n[Command timed out after ${call.timeoutSec}s]`;
  } else if (result.interrupted) {
    exitCode = 130;
    output += '\n[Command interrupted]';
  }
  const outcome: ForegroundOutcome = {
    call,
    result,
    output: output.trim(),
    exitCode,
    exitCodeMeaning: undefined,
    hint: undefined,
    approval: undefined,
  };
  applyAfterRun(guards, outcome);
  let shown = outcome.output;
  for (const notice of result.notices) shown += `${shown === '' ? '' : '\n'}[Note: ${notice}]`;
  const cwd = changedCwd(result);
  // Optional keys in the reference tool's order: cwd, environment_recreated, approval, exit_code_meaning, hint.
  return JSON.stringify({
    output: shown,
    exit_code: exitCode,
    error: null,
    ...(cwd === undefined ? {} : { cwd }),
    ...(result.environmentRecreated === true ? { environment_recreated: ENVIRONMENT_RECREATED_NOTE } : {}),
    ...(outcome.approval === undefined ? {} : { approval: outcome.approval }),
    ...(outcome.exitCodeMeaning === undefined ? {} : { exit_code_meaning: outcome.exitCodeMeaning }),
    ...(outcome.hint === undefined ? {} : { hint: outcome.hint }),
  });
}

/** A call that sent execute_code's `code` instead of `command` is told which tool and argument it meant. */
export const CODE_ARGUMENT_ERROR = JSON.stringify({
  error:
    "terminal received a 'code' parameter, but it requires a shell command in 'command'. " +
    'Use execute_code(code=...) for Python; for shell, retry as terminal(command=...).',
});

/**
 * Told with a background start that asked for no notification. The reference
 * tool's text, which still names `process`, the old name of `process_manage`
 * (an alias Berth accepts, so the calls it suggests work).
 */
export const SILENT_BACKGROUND_HINT =
  'background=true without notify_on_complete=true means this process runs SILENTLY — you will not be told when ' +
  'it exits. If this is a bounded task (test suite, build, CI poller, deploy, anything with a defined end), you ' +
  'almost certainly wanted notify_on_complete=true so the system pings you on exit. Re-launch with ' +
  "notify_on_complete=true, or call process(action='poll') / process(action='wait') yourself to learn the " +
  'outcome. Only ignore this hint for genuine long-lived processes that never exit (servers, watchers, daemons).';

/** Why watch_patterns were dropped when notify_on_complete was also set. */
export const WATCH_PATTERNS_IGNORED =
  'watch_patterns ignored because notify_on_complete=True; these two flags produce duplicate notifications when combined';

/**
 * Told with a foreground call whose timeout was over the cap and which was
 * started in the background instead (upstream `_PROMOTED_NOTE`: Berth
 * delivers completion notices, so the variant that promises one).
 */
export function promotedFromForegroundNote(requestedSec: number, capSec: number): string {
  return (
    `Requested foreground timeout ${requestedSec}s exceeds the ${capSec}s cap, so this command was started as a ` +
    'tracked background process with notify_on_complete=true instead of being refused. Do NOT re-run it. ' +
    'Its completion (exit code + output tail) arrives as a notification; poll with ' +
    'process(action="poll", session_id=...) if you need it sooner.'
  );
}

/**
 * Reads the command and the background modifiers (refusing those that need
 * background=true on a foreground call), runs the guards before it
 * (guard-pipeline.ts: each may refuse the call or fill in and rewrite it),
 * runs it in the background or the foreground, and shapes a foreground
 * result with the guards after it. A foreground call whose timeout is over
 * the cap runs in the background with notify, as upstream promotes it.
 */
async function runTerminal(
  args: ToolArgs,
  ctx: ToolContext,
  options: TerminalToolOptions,
  guards: readonly TerminalGuard[],
): Promise<string> {
  if (!('command' in args) && 'code' in args) return CODE_ARGUMENT_ERROR;
  const modifiers = readBackgroundModifiers(args, args.background === true);
  if (typeof modifiers === 'string') return modifiers;
  const command = args.command;
  if (typeof command !== 'string') {
    return refusal(`Invalid command: expected string, got ${pythonTypeName(command)}`, 'error');
  }
  if (command.includes('\0')) {
    // No shell can take a NUL byte in its command text; say so instead of failing at spawn.
    return refusal('Invalid command: contains a NUL character (\\0), which a shell cannot run', 'error');
  }
  if (command.trim() === '') return refusal('Invalid command: command is empty', 'error');

  const call: TerminalCall = {
    args,
    background: args.background === true,
    command,
    workdir: undefined,
    timeoutSec: options.defaultTimeoutSec,
    promotedFromTimeoutSec: undefined,
    approvalNote: undefined,
  };
  const refused = await applyBeforeRun(guards, call, ctx);
  if (refused !== undefined) return refused;
  if (call.background) return startBackground(call, modifiers, ctx);
  if (call.promotedFromTimeoutSec !== undefined) {
    // Watch patterns are background-only and exclusive with notify anyway; a foreground call has none.
    const promoted = { ...modifiers, notifyOnComplete: true, watchPatterns: undefined };
    const result = JSON.parse(await startBackground(call, promoted, ctx)) as Record<string, unknown>;
    result.promoted_from_foreground = promotedFromForegroundNote(call.promotedFromTimeoutSec, options.maxForegroundTimeoutSec);
    return JSON.stringify(result);
  }

  const result = await ctx.task.exec({
    command: call.command,
    timeoutMs: call.timeoutSec * 1000,
    ...(call.workdir === undefined ? {} : { workdir: call.workdir }),
    maxOutputChars: options.maxOutputChars,
    signal: ctx.signal,
    ...(ctx.onOutput === undefined ? {} : { onOutput: ctx.onOutput }),
  });
  return foregroundResult(call, result, guards);
}

/**
 * Starts a background process the guards let through and answers at once
 * with its session id, in upstream's key order: `persist_on_release`,
 * `approval`, `pty_note`, `hint`, `watch_patterns_ignored`,
 * `notify_on_complete`, `heartbeat_seconds`, `watch_patterns`.
 */
async function startBackground(call: TerminalCall, modifiers: BackgroundModifiers, ctx: ToolContext): Promise<string> {
  const { notifyOnComplete, watchPatterns: requestedPatterns, heartbeatSeconds, persistOnRelease } = modifiers;
  // Both together would notify once per match and again at exit; the exit notice is the one kept.
  const watchPatterns = notifyOnComplete ? undefined : requestedPatterns;
  // Under a PTY a command waiting for EOF on piped input would hang; it gets a stdin pipe instead,
  // which the model ends with process_manage close, as the note tells it.
  const ptyDropped = modifiers.pty && commandRequiresPipeStdin(call.command);
  const pty = modifiers.pty && !ptyDropped;
  const started = await ctx.task.startBackground({
    command: call.command,
    ...(call.workdir === undefined ? {} : { workdir: call.workdir }),
    ...(pty ? { pty: true } : {}),
    ...(ptyDropped ? { pipeStdin: true } : {}),
    notifyOnComplete,
    ...(watchPatterns === undefined ? {} : { watchPatterns }),
    ...(heartbeatSeconds > 0 ? { heartbeatSeconds } : {}),
    ...(persistOnRelease ? { persistOnRelease: true } : {}),
  });
  return JSON.stringify({
    output: 'Background process started',
    session_id: started.sessionId,
    pid: started.pid,
    exit_code: 0,
    error: null,
    ...(persistOnRelease ? { persist_on_release: true } : {}),
    ...(call.approvalNote === undefined ? {} : { approval: call.approvalNote }),
    ...(ptyDropped ? { pty_note: PTY_DISABLED_NOTE } : {}),
    ...(!notifyOnComplete && requestedPatterns === undefined ? { hint: SILENT_BACKGROUND_HINT } : {}),
    ...(notifyOnComplete && requestedPatterns !== undefined ? { watch_patterns_ignored: WATCH_PATTERNS_IGNORED } : {}),
    ...(notifyOnComplete ? { notify_on_complete: true } : {}),
    ...(heartbeatSeconds > 0 ? { heartbeat_seconds: effectiveHeartbeatSeconds(heartbeatSeconds) } : {}),
    ...(watchPatterns === undefined ? {} : { watch_patterns: watchPatterns }),
  });
}

/** Upstream no longer advertises these ("legacy aliases, still accepted"); `notify` replaces both. */
const LEGACY_PARAMETERS = {
  notify_on_complete: { type: 'boolean', description: 'Use notify=true.' },
  watch_patterns: { type: 'array', items: { type: 'string' }, description: 'Use notify=[...patterns].' },
} as const;

/**
 * The `terminal` tool registration (toolset `terminal`). Options default to
 * a 180 s timeout, a 600 s foreground cap and a 50,000-character output cap;
 * contradictory options throw a RangeError.
 */
export function terminalToolRegistration(options: Partial<TerminalToolOptions> = {}): ToolRegistration {
  const compiled = compileOptions(options);
  const guards = terminalGuardPipeline(compiled);
  return {
    name: 'terminal',
    toolset: 'terminal',
    schema: buildSchema(compiled),
    handler: (args, ctx) => runTerminal(args, ctx, compiled, guards),
    legacyParameters: LEGACY_PARAMETERS,
    emoji: '💻',
  };
}
