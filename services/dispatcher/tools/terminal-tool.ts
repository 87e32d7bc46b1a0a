/**
 * The `terminal` tool: runs a shell command in the task's environment, in the
 * foreground (wait for the result) or in the background (tracked by the
 * `process_manage` tool). Result shapes and error strings follow the Hermes tool
 * protocol (spec/tool-runtime.md §3); the executor does the running, ANSI
 * stripping and output truncation.
 */
import { requestCommandApproval } from '../approval/guard-hook.js';
import type { TaskExecResult } from '../../common/task-client.js';
import { redactTerminalOutput } from '../redaction/output-redaction.js';
import type { ToolArgs, ToolContext, ToolRegistration, ToolSchema } from '../tool-types.js';
import { rewriteBackgroundChain } from './terminal-guards/background-chain.js';
import { exitCodeMeaning } from './terminal-guards/exit-code-meaning.js';
import { failureHint, maskedSuccessHint } from './terminal-guards/failure-hints.js';
import { findForegroundHazard } from './terminal-guards/foreground-hazard.js';
import { validateForegroundTimeout } from './terminal-guards/foreground-timeout.js';
import { validateWorkdir } from './terminal-guards/workdir.js';

/** Limits the operator can tune; all in the units their names say. */
export interface TerminalToolOptions {
  /** Foreground timeout when the model sends none. */
  readonly defaultTimeoutSec: number;
  /** Larger foreground timeouts are refused (env `TERMINAL_MAX_FOREGROUND_TIMEOUT`). */
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
      'and then the process_manage tool to read output, wait for or stop it. Commands cannot prompt for input in the ' +
      'foreground; pass non-interactive flags (e.g. -y) instead.',
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
            'do not use nohup, setsid or a trailing & instead.',
        },
        timeout: {
          type: 'integer',
          minimum: 1,
          default: options.defaultTimeoutSec,
          description:
            `Seconds to wait for a foreground command before it is killed (exit code 124). Default ${options.defaultTimeoutSec}, ` +
            `maximum ${options.maxForegroundTimeoutSec}; longer work belongs in background=true.`,
        },
        workdir: {
          type: 'string',
          description:
            'Absolute directory to run this one command in, without changing the saved working directory. ' +
            'Omit to use the current working directory. Plain paths only: no shell metacharacters.',
        },
        pty: {
          type: 'boolean',
          description:
            'Run under a pseudo-terminal, for programs that behave differently or refuse to run without one ' +
            '(interactive CLIs, REPLs started in the background and driven with the process_manage tool). Output then ' +
            'contains whatever the program draws.',
        },
        notify_on_complete: {
          type: 'boolean',
          description:
            'With background=true: announce when the process exits, with its exit code and final output, so you ' +
            'need not poll for it. Use for builds, test runs and other long jobs that do finish. Mutually exclusive ' +
            'with watch_patterns: when both are set, watch_patterns is dropped.',
        },
        watch_patterns: {
          type: 'array',
          items: { type: 'string' },
          description:
            'With background=true: strings or regular expressions to watch for in the output (e.g. "ready on port", ' +
            '"ERROR"); you are notified when a line matches, for example when a server becomes ready. Meant for rare ' +
            'one-off signals in long-lived processes; set either this or notify_on_complete, not both.',
        },
      },
      required: ['command'],
    },
  };
}

/**
 * Python's name for the type of a decoded JSON value. The protocol's agents
 * were written against a Python implementation and match on these names
 * (`got int`, `got NoneType`), so a missing command reads `NoneType` too.
 * JSON cannot tell 1.0 from 1, so a whole number is always `int`.
 */
export function pythonTypeName(value: unknown): string {
  if (value === null || value === undefined) return 'NoneType';
  if (typeof value === 'boolean') return 'bool';
  if (typeof value === 'number') return Number.isInteger(value) ? 'int' : 'float';
  if (typeof value === 'bigint') return 'int';
  if (typeof value === 'string') return 'str';
  if (Array.isArray(value)) return 'list';
  if (typeof value === 'object') return 'dict';
  return typeof value;
}

/** Result for a call refused before anything ran. */
function refusal(error: string, status: 'error' | 'blocked'): string {
  return JSON.stringify({ output: '', exit_code: -1, error, status });
}

type Validated<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly result: string };

/** Whole seconds; a fractional value is rounded up so the command gets at least what was asked. */
function readTimeoutSec(raw: unknown, options: TerminalToolOptions): Validated<number> {
  if (raw === undefined || raw === null) return { ok: true, value: options.defaultTimeoutSec };
  if (typeof raw !== 'number' || !Number.isFinite(raw) || raw <= 0) {
    return {
      ok: false,
      result: refusal(
        `Invalid timeout: expected a positive integer number of seconds, got ${JSON.stringify(raw) ?? String(raw)}`,
        'error',
      ),
    };
  }
  return { ok: true, value: Math.ceil(raw) };
}

/** An empty or absent workdir means "the task's current directory". */
function readWorkdir(raw: unknown): Validated<string | undefined> {
  if (raw === undefined || raw === null || raw === '') return { ok: true, value: undefined };
  if (typeof raw !== 'string') {
    return { ok: false, result: refusal(`Invalid workdir: expected string, got ${pythonTypeName(raw)}`, 'error') };
  }
  const blocked = validateWorkdir(raw);
  if (blocked !== null) return { ok: false, result: refusal(blocked, 'blocked') };
  // Relative paths would resolve against whatever cwd the task has drifted to.
  if (!raw.startsWith('/') && !raw.startsWith('~')) {
    return { ok: false, result: refusal(`Invalid workdir: expected an absolute path, got ${raw}`, 'error') };
  }
  return { ok: true, value: raw };
}

function readStringList(raw: unknown): string[] | undefined {
  if (!Array.isArray(raw)) return undefined;
  const strings = raw.filter((item): item is string => typeof item === 'string' && item !== '');
  return strings.length > 0 ? strings : undefined;
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
 * `[Command timed out after 5s]` without a leading newline.
 */
function foregroundResult(
  command: string,
  result: TaskExecResult,
  timeoutSec: number,
  redact: boolean,
  approval?: string,
): string {
  let output = result.output;
  let exitCode = result.exitCode;
  if (result.timedOut) {
    exitCode = 124;
    output += `\n[Command timed out after ${timeoutSec}s]`;
  } else if (result.interrupted) {
    exitCode = 130;
    output += '\n[Command interrupted]';
  }
  output = output.trim();
  // As upstream: the whole stripped output, its status suffix included, by the command-aware policy.
  if (redact) output = redactTerminalOutput(output, command);
  const meaning = result.timedOut || result.interrupted ? undefined : exitCodeMeaning(command, exitCode);
  // As the reference tool: a recovery hint for a failure with no exit-code meaning, a warning for a 0 that
  // probably masks one. Scanned before Berth's own notices are added, so only the command's output counts.
  const hint =
    exitCode === 0 ? maskedSuccessHint(command, output) : meaning === undefined ? failureHint(exitCode, output) : undefined;
  for (const notice of result.notices) output += `${output === '' ? '' : '\n'}[Note: ${notice}]`;
  // An approved command that was then interrupted must not read as if it ran to completion.
  const approvalNote =
    approval !== undefined && result.interrupted ? `${approval.replace(/\.+$/, '')}, then interrupted.` : approval;
  const cwd = changedCwd(result);
  // Optional keys in the reference tool's order: cwd, environment_recreated, approval, exit_code_meaning, hint.
  return JSON.stringify({
    output,
    exit_code: exitCode,
    error: null,
    ...(cwd === undefined ? {} : { cwd }),
    ...(result.environmentRecreated === true ? { environment_recreated: ENVIRONMENT_RECREATED_NOTE } : {}),
    ...(approvalNote === undefined ? {} : { approval: approvalNote }),
    ...(meaning === undefined ? {} : { exit_code_meaning: meaning }),
    ...(hint === undefined ? {} : { hint }),
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

async function runTerminal(args: ToolArgs, ctx: ToolContext, options: TerminalToolOptions): Promise<string> {
  if (!('command' in args) && 'code' in args) return CODE_ARGUMENT_ERROR;
  const rawCommand = args.command;
  if (typeof rawCommand !== 'string') {
    return refusal(`Invalid command: expected string, got ${pythonTypeName(rawCommand)}`, 'error');
  }
  if (rawCommand.includes('\0')) {
    // No shell can take a NUL byte in its command text; say so instead of failing at spawn.
    return refusal('Invalid command: contains a NUL character (\\0), which a shell cannot run', 'error');
  }
  if (rawCommand.trim() === '') return refusal('Invalid command: command is empty', 'error');

  const workdir = readWorkdir(args.workdir);
  if (!workdir.ok) return workdir.result;
  const pty = typeof args.pty === 'boolean' ? args.pty : undefined;

  if (args.background === true) {
    // Background commands need the same approval as foreground ones: running later is still running.
    const verdict = await requestCommandApproval(ctx, 'terminal', rawCommand);
    if (!verdict.allowed) return verdict.result;
    const notifyOnComplete = args.notify_on_complete === true;
    const requestedPatterns = readStringList(args.watch_patterns);
    // Both together would notify once per match and again at exit; the exit notice is the one kept.
    const watchPatterns = notifyOnComplete ? undefined : requestedPatterns;
    const started = await ctx.task.startBackground({
      command: rewriteBackgroundChain(rawCommand),
      ...(workdir.value === undefined ? {} : { workdir: workdir.value }),
      ...(pty === undefined ? {} : { pty }),
      notifyOnComplete,
      ...(watchPatterns === undefined ? {} : { watchPatterns }),
    });
    return JSON.stringify({
      output: 'Background process started',
      session_id: started.sessionId,
      pid: started.pid,
      exit_code: 0,
      error: null,
      ...(verdict.note === undefined ? {} : { approval: verdict.note }),
      ...(!notifyOnComplete && requestedPatterns === undefined ? { hint: SILENT_BACKGROUND_HINT } : {}),
      ...(notifyOnComplete && requestedPatterns !== undefined ? { watch_patterns_ignored: WATCH_PATTERNS_IGNORED } : {}),
      ...(notifyOnComplete ? { notify_on_complete: true } : {}),
      ...(watchPatterns === undefined ? {} : { watch_patterns: watchPatterns }),
    });
  }

  const timeoutSec = readTimeoutSec(args.timeout, options);
  if (!timeoutSec.ok) return timeoutSec.result;
  const overCap = validateForegroundTimeout(timeoutSec.value, options.maxForegroundTimeoutSec);
  // The reference tool answers this one with the error alone, no output/exit_code/status.
  if (overCap !== null) return JSON.stringify({ error: overCap });
  const hazard = findForegroundHazard(rawCommand);
  if (hazard !== null) return refusal(hazard, 'error');
  // Asked last, so nobody is asked about a command that would be refused anyway.
  const verdict = await requestCommandApproval(ctx, 'terminal', rawCommand);
  if (!verdict.allowed) return verdict.result;

  // The guardrail lets a foreground `&` through only when it backgrounds a
  // --help/--version command; the rewrite keeps the rest of such a chain in
  // the foreground, as in background mode.
  const command = rewriteBackgroundChain(rawCommand);
  const result = await ctx.task.exec({
    command,
    timeoutMs: timeoutSec.value * 1000,
    ...(workdir.value === undefined ? {} : { workdir: workdir.value }),
    ...(pty === undefined ? {} : { pty }),
    maxOutputChars: options.maxOutputChars,
    signal: ctx.signal,
    ...(ctx.onOutput === undefined ? {} : { onOutput: ctx.onOutput }),
  });
  return foregroundResult(command, result, timeoutSec.value, options.redactSecrets, verdict.note);
}

/**
 * The `terminal` tool registration (toolset `terminal`). Options default to
 * a 180 s timeout, a 600 s foreground cap and a 50,000-character output cap;
 * contradictory options throw a RangeError.
 */
export function terminalToolRegistration(options: Partial<TerminalToolOptions> = {}): ToolRegistration {
  const compiled = compileOptions(options);
  return {
    name: 'terminal',
    toolset: 'terminal',
    schema: buildSchema(compiled),
    handler: (args, ctx) => runTerminal(args, ctx, compiled),
    emoji: '💻',
  };
}
