/**
 * The `execute_code` tool (spec §6): runs a Python script in the task's
 * environment whose `hermes_tools` calls come back here and go through the
 * same registry dispatch as a top-level call (same tenant, task, session and
 * approval guard). This side owns the policy: which tools a script may call,
 * how many calls it gets, which terminal arguments it may not use, and the
 * shape of the result.
 */
import { requestApproval } from '../../approval/flow/guard-hook.js';
import { performance } from 'node:perf_hooks';
import type { BerthConfig } from '../../../common/config.js';
import { BerthError } from '../../../common/errors.js';
import { redactSensitiveText } from '../../redaction/redact.js';
import { SANDBOX_TOOLS, type ExecuteCodeSchemaBuilder } from '../../registry/toolsets.js';
import { canonicalToolName, canonicalToolNames } from '../../registry/tool-aliases.js';
import type { ToolContext, ToolRegistration } from '../../registry/tool-types.js';
import { pythonTypeName } from '../python-type-name.js';
import { shapeExecuteCodeResult, roundSeconds } from './execute-code-result.js';
import { buildExecuteCodeSchema, buildHermesToolsModule, sandboxToolsIn, type ExecuteCodeLimits } from './hermes-tools-module.js';

/**
 * The web providers' credentials and endpoints: the dispatcher uses them, a script never sees them
 * (in `berth serve` the executor shares the dispatcher's environment).
 */
export const WEB_PROVIDER_ENV: readonly string[] = [
  'TAVILY_API_KEY',
  'TAVILY_API_URL',
  'TAVILY_BASE_URL',
  'SEARXNG_URL',
  'SEARXNG_TIMEOUT',
];

export const NO_CODE_RESULT = JSON.stringify({
  error:
    "No code provided. execute_code requires a non-empty 'code' parameter containing Python source. " +
    'To run shell commands, use terminal(command=...) instead.',
});

/** A call that sent terminal's `command` instead of `code` is told which tool and argument it meant. */
export const COMMAND_ARGUMENT_RESULT = JSON.stringify({
  error:
    "execute_code received a 'command' parameter, but it requires Python source in 'code'. " +
    'Use terminal(command=...) for shell commands; for Python, retry as execute_code(code=...).',
});

/** `code` that is not a string, named by its Python type as the reference tool does. */
export function nonStringCodeResult(code: unknown): string {
  return JSON.stringify({
    error:
      `execute_code received a ${pythonTypeName(code)} in 'code', but it requires Python source as a string. ` +
      'Retry as execute_code(code="...").',
  });
}

/** terminal arguments a script may not use (upstream `_TERMINAL_BLOCKED_PARAMS`): it runs foreground commands only. */
export const STRIPPED_TERMINAL_ARGS: readonly string[] = [
  'background',
  'pty',
  'notify',
  'notify_on_complete',
  'watch_patterns',
  'heartbeat',
  'persist_on_release',
];

export function toolNotAvailableError(tool: string, allowed: readonly string[]): string {
  return JSON.stringify({
    error: `Tool '${tool}' is not available in execute_code. Available: ${[...allowed].sort().join(', ')}`,
  });
}

export function toolCallLimitError(maxToolCalls: number): string {
  return JSON.stringify({
    error: `Tool call limit reached (${maxToolCalls}). No more tool calls allowed in this execution.`,
  });
}

/**
 * Admits a script's tool calls: whitelisted tools only, at most
 * `maxToolCalls` of them. Refused calls do not count. Old tool names
 * (`process`) stand for the current ones (`process_manage`) on both sides:
 * in the whitelist and in a call.
 */
export class ScriptToolPolicy {
  readonly #allowed: ReadonlySet<string>;
  readonly #allowedList: readonly string[];
  readonly #maxToolCalls: number;
  #made = 0;

  constructor(allowed: readonly string[], maxToolCalls: number) {
    this.#allowedList = canonicalToolNames(allowed);
    this.#allowed = new Set(this.#allowedList);
    this.#maxToolCalls = maxToolCalls;
  }

  /** Calls admitted so far. */
  get callsMade(): number {
    return this.#made;
  }

  /**
   * Undefined when the call may be dispatched (and counts it); otherwise the
   * error result to return, naming the tool as the script sent it.
   */
  admit(tool: string): string | undefined {
    if (!this.#allowed.has(canonicalToolName(tool))) return toolNotAvailableError(tool, this.#allowedList);
    if (this.#made >= this.#maxToolCalls) return toolCallLimitError(this.#maxToolCalls);
    this.#made += 1;
    return undefined;
  }
}

/** A script's terminal arguments without the ones that would leave the foreground. */
export function stripTerminalArgs(args: Record<string, unknown>): Record<string, unknown> {
  const out = { ...args };
  for (const name of STRIPPED_TERMINAL_ARGS) delete out[name];
  return out;
}

export interface ExecuteCodeToolOptions {
  readonly mode: 'project' | 'strict';
  readonly timeoutSec: number;
  readonly maxToolCalls: number;
  readonly maxStdoutBytes: number;
  readonly maxStderrBytes: number;
  /** terminal.env_passthrough plus skill-declared names. */
  readonly envPassthrough: readonly string[];
  /** Credential variables never passed, besides the provider list (the smart-approval key's variable). */
  readonly credentialEnv: readonly string[];
  /** Single-user mode: the local backend may run scripts as host subprocesses. */
  readonly allowHostSubprocess: boolean;
  /** IANA time zone for scripts' TZ (config `timezone`); empty keeps each environment's own. */
  readonly timezone?: string;
  /** Mask secrets in the script's stdout and stderr (`security.redact_secrets`); default true. */
  readonly redactSecrets?: boolean;
  /** The sandbox tools a script may call now (registered and available). */
  readonly availableTools: () => Promise<readonly string[]>;
  /** The dispatch path of top-level calls (the registry's), reused for every script call. */
  readonly dispatch: (name: string, args: unknown, context: ToolContext) => Promise<string>;
}

/** The options from config; `availableTools` and `dispatch` come from the registry. */
export function executeCodeOptionsFromConfig(
  config: BerthConfig,
  registry: Pick<ExecuteCodeToolOptions, 'availableTools' | 'dispatch'>,
): ExecuteCodeToolOptions {
  const ce = config.code_execution;
  return {
    mode: ce.mode,
    timeoutSec: ce.timeout,
    maxToolCalls: ce.max_tool_calls,
    maxStdoutBytes: ce.max_stdout_bytes,
    maxStderrBytes: ce.max_stderr_bytes,
    envPassthrough: config.terminal.env_passthrough,
    credentialEnv: [
      ...(config.approvals.smart.api_key_env ? [config.approvals.smart.api_key_env] : []),
      ...WEB_PROVIDER_ENV,
    ],
    allowHostSubprocess: config.tenants.length === 0 || config.allow_local_multi_tenant,
    timezone: config.timezone,
    redactSecrets: config.security.redact_secrets,
    ...registry,
  };
}

/** The limits the schema advertises, from config. */
export function executeCodeLimitsFromConfig(config: BerthConfig): ExecuteCodeLimits {
  const ce = config.code_execution;
  return { timeoutSec: ce.timeout, maxStdoutBytes: ce.max_stdout_bytes, maxToolCalls: ce.max_tool_calls };
}

export function limitsOf(options: Pick<ExecuteCodeToolOptions, 'timeoutSec' | 'maxStdoutBytes' | 'maxToolCalls'>): ExecuteCodeLimits {
  return { timeoutSec: options.timeoutSec, maxStdoutBytes: options.maxStdoutBytes, maxToolCalls: options.maxToolCalls };
}

/** The listing-time patcher: the schema names only the sandbox tools that survived filtering. */
export function executeCodeSchemaPatcher(limits: ExecuteCodeLimits): ExecuteCodeSchemaBuilder {
  return (availableSandboxTools) => buildExecuteCodeSchema(availableSandboxTools, limits);
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function executeCodeToolRegistration(options: ExecuteCodeToolOptions): ToolRegistration {
  const limits = limitsOf(options);
  // Listings replace it with the tools that survived filtering (executeCodeSchemaPatcher).
  const schema = buildExecuteCodeSchema(SANDBOX_TOOLS, limits);
  return {
    name: 'execute_code',
    toolset: 'code_execution',
    schema,
    emoji: '🐍',
    handler: async (args, context) => {
      if (!('code' in args) && 'command' in args) return COMMAND_ARGUMENT_RESULT;
      const code = args.code;
      if (code !== undefined && code !== null && typeof code !== 'string') return nonStringCodeResult(code);
      if (typeof code !== 'string' || code.trim() === '') return NO_CODE_RESULT;
      // The operator's approvals.deny rules apply to the script's text too (each command it runs is checked on its own).
      const verdict = await requestApproval(context, { tool: 'execute_code', command: code, detect: false });
      if (!verdict.allowed) return verdict.result;
      const runCode = context.task.runCode?.bind(context.task);
      if (runCode === undefined) {
        return JSON.stringify({ error: 'execute_code is not available: this task environment cannot run scripts.' });
      }
      // A tenant limited to some toolsets gets stubs (and a whitelist) for those tools only.
      const scope = context.allowedTools;
      const allowed = sandboxToolsIn(await options.availableTools()).filter((tool) => scope?.has(tool) ?? true);
      const policy = new ScriptToolPolicy(allowed, options.maxToolCalls);
      // Script calls get the caller's context minus live output (only print() output goes back),
      // and end with the script: a call still running when the script is gone is cancelled.
      const scriptCalls = new AbortController();
      const { onOutput: _liveOutput, ...rest } = context;
      const nestedContext: ToolContext = { ...rest, signal: AbortSignal.any([context.signal, scriptCalls.signal]) };
      const startedMs = performance.now();
      try {
        const result = await runCode({
          code,
          stubModule: buildHermesToolsModule(allowed),
          mode: options.mode,
          timeoutMs: options.timeoutSec * 1000,
          maxStdoutBytes: options.maxStdoutBytes,
          maxStderrBytes: options.maxStderrBytes,
          envPassthrough: options.envPassthrough,
          credentialEnv: options.credentialEnv,
          allowedTools: allowed,
          allowHostSubprocess: options.allowHostSubprocess,
          ...(options.timezone ? { timezone: options.timezone } : {}),
          signal: context.signal,
          onToolCall: async ({ tool: sent, argsJson }) => {
            const refusal = policy.admit(sent);
            if (refusal !== undefined) return refusal;
            const tool = canonicalToolName(sent);
            let callArgs = JSON.parse(argsJson) as Record<string, unknown>;
            if (tool === 'terminal') callArgs = stripTerminalArgs(callArgs);
            try {
              return await options.dispatch(tool, callArgs, nestedContext);
            } catch (err) {
              // Infrastructure failures end a top-level call; inside a script they are a result the script can handle.
              return JSON.stringify({ error: `[TOOL_ERROR] Error executing ${tool}: ${errorMessage(err)}` });
            }
          },
        });
        // As upstream: printed output in source-preserving mode (a script may print a file it read).
        const redact = (text: string): string =>
          options.redactSecrets === false ? text : redactSensitiveText(text, { codeFile: true });
        const shaped = shapeExecuteCodeResult({
          stdout: redact(result.stdout),
          stderr: redact(result.stderr),
          exitCode: result.exitCode,
          timedOut: result.timedOut,
          interrupted: result.interrupted,
          toolCallsMade: policy.callsMade,
          durationMs: performance.now() - startedMs,
          timeoutSec: options.timeoutSec,
          notices: result.notices,
          importableTools: allowed,
        });
        context.logger.info(
          {
            ranIn: result.ranIn,
            interpreter: result.interpreter,
            status: shaped.status,
            toolCallsMade: shaped.tool_calls_made,
            durationSeconds: shaped.duration_seconds,
          },
          `execute_code ${shaped.status} in ${result.ranIn}`,
        );
        return JSON.stringify(shaped);
      } catch (err) {
        // Setup refused (no rpcDir, multi-tenant local, probe failed): the model reads why; infrastructure errors propagate.
        if (err instanceof BerthError && (err.code === 'FAILED_PRECONDITION' || err.code === 'INVALID_ARGUMENT')) {
          context.logger.warn({ err }, 'execute_code could not start');
          return JSON.stringify({
            status: 'error',
            output: '',
            tool_calls_made: policy.callsMade,
            duration_seconds: roundSeconds(performance.now() - startedMs),
            error: err.message,
          });
        }
        throw err;
      } finally {
        scriptCalls.abort();
      }
    },
  };
}
