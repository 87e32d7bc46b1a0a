/**
 * The tool registry: which tools exist, whether each is available right now,
 * the schemas the model is shown, and the one dispatch path every call takes
 * (old-name aliases, argument coercion, hooks, error shaping, result cap).
 */
import type { Logger } from '../../common/logging.js';
import { isInfrastructureError } from '../../common/errors.js';
import { AGENT_LOOP_TOOLS } from './agent-loop-tools.js';
import { coerceArguments } from './coercion.js';
import { HookRegistry } from './hooks.js';
import { sanitizeErrorText } from './sanitize.js';
import { canonicalToolName } from './tool-aliases.js';
import type {
  CheckFn,
  OpenAiTool,
  ToolCallObserver,
  ToolContext,
  ToolRegistration,
  ToolSchema,
} from './tool-types.js';
import { capToolResult, errorMessage, errorResult, errorTypeName, normalizeHandlerResult } from './tool-results.js';

/** Default per-tool result cap in characters. */
export const DEFAULT_MAX_RESULT_SIZE_CHARS = 100_000;

/** How long a check result (true or false) is reused before the check runs again. */
export const CHECK_CACHE_TTL_MS = 30_000;

/**
 * A failing check this soon after the last success is assumed to be a blip
 * (a provider timing out once) rather than the tool going away, so tools do
 * not flicker in and out of the model's tool list.
 */
export const CHECK_FLAKE_WINDOW_MS = 60_000;

/** A registration as stored: `description` resolved from the schema when not given. */
export interface RegisteredTool extends ToolRegistration {
  readonly description: string;
}

export interface ToolRegistryOptions {
  readonly logger: Logger;
  /** Clock in milliseconds for check caching and call durations; tests inject a fake one. */
  readonly now?: () => number;
  /** Hooks to run around calls; the registry creates an empty set when omitted. */
  readonly hooks?: HookRegistry;
}

/** A toolset none of whose tools is available, as upstream's `check_tool_availability()` lists it, plus why. */
export interface UnavailableToolset {
  readonly name: string;
  readonly env_vars: string[];
  readonly tools: string[];
  readonly reason: string;
}

/** One tool whose check fails, wherever its toolset stands. */
export interface UnavailableTool {
  readonly name: string;
  readonly toolset: string;
  readonly env_vars: string[];
  readonly reason: string;
}

/**
 * `berth tools --explain`: registered toolsets with at least one available
 * tool, the toolsets with none (upstream's shape), and every unavailable tool
 * (a toolset can be available while one of its tools is not).
 */
export interface AvailabilityReport {
  readonly available: string[];
  readonly unavailable: UnavailableToolset[];
  readonly unavailable_tools: UnavailableTool[];
}

/** Said when a check fails and its tool gives no explanation. */
export const UNEXPLAINED_UNAVAILABLE = 'its availability check failed';

interface CheckState {
  /** The reusable answer and when it stops being reusable; absent after a flake. */
  cached?: { readonly value: boolean; readonly expiresAtMs: number };
  lastTrueAtMs?: number;
}

/**
 * Registry of tools. One instance per dispatcher; tool modules register into
 * it at startup, MCP and plugins at runtime.
 */
export class ToolRegistry {
  /** Hooks run around every dispatched call. */
  readonly hooks: HookRegistry;

  readonly #logger: Logger;
  readonly #nowMs: () => number;
  readonly #tools = new Map<string, RegisteredTool>();
  // Keyed by function object, weakly: an unloaded plugin's checks can be collected.
  readonly #checkStates = new WeakMap<CheckFn, CheckState>();
  /**
   * A check that is running is shared, not started again. A listing starts
   * all its checks at once, so this is also what makes a check shared by
   * several tools run once per listing, even when its answer is not cached.
   */
  readonly #checksInFlight = new Map<CheckFn, Promise<boolean>>();
  #observerCache: ReadonlySet<ToolCallObserver> | undefined;

  constructor(options: ToolRegistryOptions) {
    this.#logger = options.logger;
    this.#nowMs = options.now ?? Date.now;
    this.hooks = options.hooks ?? new HookRegistry();
  }

  /**
   * Adds or replaces a tool. Same name in the same toolset replaces silently
   * (module reload). Same name in another toolset is allowed only between two
   * `mcp-*` toolsets or with `override` (operator opt-in for a plugin to
   * replace a built-in); otherwise the registration is rejected, an error is
   * logged and the existing tool stays.
   *
   * @returns whether the registration was accepted.
   */
  register(reg: ToolRegistration): boolean {
    if (reg.name === '' || reg.toolset === '') {
      this.#logger.error({ tool: reg.name, toolset: reg.toolset }, 'tool registration rejected: empty name or toolset');
      return false;
    }
    const existing = this.#tools.get(reg.name);
    if (existing !== undefined && existing.toolset !== reg.toolset) {
      const bothMcp = existing.toolset.startsWith('mcp-') && reg.toolset.startsWith('mcp-');
      if (!bothMcp && reg.override !== true) {
        this.#logger.error(
          { tool: reg.name, toolset: reg.toolset, existingToolset: existing.toolset },
          `tool registration rejected: ${reg.name} is already registered by toolset ${existing.toolset}; set override to replace it`,
        );
        return false;
      }
      this.#logger.warn(
        { tool: reg.name, toolset: reg.toolset, existingToolset: existing.toolset },
        `tool ${reg.name} from toolset ${existing.toolset} replaced by toolset ${reg.toolset}`,
      );
    }
    this.#tools.set(reg.name, { ...reg, description: reg.description ?? reg.schema.description });
    this.#observerCache = undefined;
    return true;
  }

  /** Removes a tool (an MCP server went away, a plugin unloaded); returns whether it existed. */
  unregister(name: string): boolean {
    this.#observerCache = undefined;
    return this.#tools.delete(name);
  }

  has(name: string): boolean {
    return this.#tools.has(name);
  }

  get(name: string): RegisteredTool | undefined {
    return this.#tools.get(name);
  }

  /** Registered tool names, sorted. */
  names(): string[] {
    return [...this.#tools.keys()].sort();
  }

  toolsetOf(name: string): string | undefined {
    return this.#tools.get(name)?.toolset;
  }

  /** Whether a registered tool's check passes now (cached per the check rules); false for unknown tools. */
  async isAvailable(name: string): Promise<boolean> {
    const tool = this.#tools.get(name);
    if (tool === undefined) return false;
    return this.#checkAvailability(tool);
  }

  /**
   * OpenAI function-calling definitions for the given names, sorted by name.
   * Unknown names and tools whose check fails are skipped; dynamic schema
   * overrides are applied (a throwing override keeps the static schema).
   */
  async getDefinitions(names: Iterable<string>): Promise<OpenAiTool[]> {
    const tools = [...new Set(names)]
      .sort()
      .map((name) => this.#tools.get(name))
      .filter((tool): tool is RegisteredTool => tool !== undefined);
    // All checks start together (see #checksInFlight); a slow provider check does not serialise the rest.
    const available = await Promise.all(tools.map((tool) => this.#checkAvailability(tool)));
    return tools
      .filter((_, i) => available[i] === true)
      .map((tool) => ({ type: 'function' as const, function: this.#emitSchema(tool) }));
  }

  /**
   * Which registered toolsets are available and, for those that are not, which
   * variables they need and why (checks cached as for listings).
   */
  async availabilityReport(): Promise<AvailabilityReport> {
    const tools = [...this.#tools.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const available = await Promise.all(tools.map((tool) => this.#checkAvailability(tool)));
    const unavailableTools: UnavailableTool[] = [];
    for (const [i, tool] of tools.entries()) {
      if (available[i] === true) continue;
      let reason = UNEXPLAINED_UNAVAILABLE;
      try {
        reason = (await tool.explainUnavailable?.()) || UNEXPLAINED_UNAVAILABLE;
      } catch (err) {
        this.#logger.warn({ err, tool: tool.name }, 'explaining why a tool is unavailable failed');
      }
      unavailableTools.push({ name: tool.name, toolset: tool.toolset, env_vars: [...(tool.requiresEnv ?? [])], reason });
    }
    const toolsets = [...new Set(tools.map((tool) => tool.toolset))].sort();
    const report: AvailabilityReport = { available: [], unavailable: [], unavailable_tools: unavailableTools };
    for (const toolset of toolsets) {
      const members = tools.filter((tool) => tool.toolset === toolset);
      const missing = unavailableTools.filter((tool) => tool.toolset === toolset);
      if (missing.length < members.length) {
        report.available.push(toolset);
        continue;
      }
      report.unavailable.push({
        name: toolset,
        env_vars: [...new Set(missing.flatMap((tool) => tool.env_vars))],
        tools: members.map((tool) => tool.name),
        reason: [...new Set(missing.map((tool) => tool.reason))].join('; '),
      });
    }
    return report;
  }

  /**
   * Runs a tool call and returns the string the model sees; never throws.
   *
   * Order: an old tool name is replaced by its current one (`process` →
   * `process_manage`), and everything after sees only that; a tool outside
   * `context.allowedTools` (the tenant's toolsets) gets the unknown-tool
   * answer; agent-loop and unknown-tool refusals; argument coercion; `pre_tool_call` hooks (may
   * block); the handler, whose result is normalised (a non-string becomes a
   * `tool_result_contract` error, an oversized `error` field is bounded);
   * `post_tool_call` hooks; `transform_tool_result` hooks; the result cap.
   * A handler throw becomes `Tool execution failed: ErrorType: message`; a
   * failure anywhere else (coercion, hooks) becomes `Error executing NAME:
   * message`. Both are sanitised, so they carry one `[TOOL_ERROR] ` prefix.
   * Every error text is bounded at 2,048 characters + `… [truncated]`.
   */
  async dispatch(calledName: string, args: unknown, context: ToolContext): Promise<string> {
    const name = canonicalToolName(calledName);
    // Outside the tenant's toolsets a tool does not exist for the caller: the same answer as a missing one.
    if (context.allowedTools !== undefined && !context.allowedTools.has(name)) return errorResult(`Unknown tool: ${name}`);
    // Checked before the lookup so the reserved names give the useful message even when not registered.
    if (AGENT_LOOP_TOOLS.has(name)) return errorResult(`${name} must be handled by the agent loop`);
    const tool = this.#tools.get(name);
    if (tool === undefined) return errorResult(`Unknown tool: ${name}`);
    for (const observer of this.#observers()) {
      try {
        observer.toolCalled(name, context);
      } catch (err) {
        context.logger.warn({ err, tool: name }, 'tool call observer failed');
      }
    }

    try {
      const coerced = coerceArguments(args, tool.schema.parameters);
      // Hooks get a frozen copy: a pre hook must not rewrite what the handler receives.
      const event = {
        toolName: name,
        args: Object.freeze({ ...coerced }),
        taskId: context.taskId,
        sessionId: context.sessionId,
      };
      const blocked = await this.hooks.runPreToolCall(event);
      if (blocked !== undefined) {
        context.logger.info({ tool: name }, 'tool call blocked by pre_tool_call hook');
        return errorResult(blocked);
      }

      const startedMs = this.#nowMs();
      let raw: unknown;
      try {
        raw = await tool.handler(coerced, context);
      } catch (err) {
        if (isInfrastructureError(err)) throw err;
        context.logger.warn({ err, tool: name }, 'tool handler failed');
        return errorResult(sanitizeErrorText(`Tool execution failed: ${errorTypeName(err)}: ${errorMessage(err)}`));
      }
      const result = normalizeHandlerResult(name, raw, context.logger);
      const durationMs = this.#nowMs() - startedMs;

      await this.hooks.runPostToolCall({ ...event, durationMs, result });
      const transformed = await this.hooks.runTransformToolResult({ ...event, durationMs, result });
      return capToolResult(transformed ?? result, tool.maxResultSizeChars ?? DEFAULT_MAX_RESULT_SIZE_CHARS);
    } catch (err) {
      if (isInfrastructureError(err)) throw err;
      context.logger.warn({ err, tool: name }, 'tool dispatch failed');
      return errorResult(sanitizeErrorText(`Error executing ${name}: ${errorMessage(err)}`));
    }
  }

  /** Tells the tools' observers that a task ended, so they drop what they kept for it. */
  taskEnded(tenant: string, taskId: string): void {
    for (const observer of this.#observers()) {
      try {
        observer.taskEnded(tenant, taskId);
      } catch (err) {
        this.#logger.warn({ err, tenant, task: taskId }, 'tool call observer failed on task end');
      }
    }
  }

  /** The distinct observers of the registered tools, recomputed after a registration changes. */
  #observers(): ReadonlySet<ToolCallObserver> {
    if (this.#observerCache === undefined) {
      const observers = new Set<ToolCallObserver>();
      for (const tool of this.#tools.values()) if (tool.callObserver !== undefined) observers.add(tool.callObserver);
      this.#observerCache = observers;
    }
    return this.#observerCache;
  }

  #emitSchema(tool: RegisteredTool): ToolSchema {
    const base: ToolSchema = { name: tool.name, description: tool.description, parameters: tool.schema.parameters };
    const override = tool.dynamicSchemaOverrides;
    if (override === undefined) return base;
    try {
      const patched: unknown = override(base);
      if (!isToolSchemaLike(patched)) throw new TypeError('override returned something that is not a tool schema');
      // The registered name is the dispatch key; a schema that renamed the tool would make it uncallable.
      return { name: tool.name, description: patched.description, parameters: patched.parameters };
    } catch (err) {
      this.#logger.warn({ err, tool: tool.name }, 'dynamic schema override failed; using the static schema');
      return base;
    }
  }

  #checkAvailability(tool: RegisteredTool): Promise<boolean> {
    const check = tool.checkFn;
    if (check === undefined) return Promise.resolve(true);
    return this.#evaluateCheck(check, tool.name);
  }

  #evaluateCheck(check: CheckFn, toolName: string): Promise<boolean> {
    const cached = this.#checkStates.get(check)?.cached;
    if (cached !== undefined && this.#nowMs() < cached.expiresAtMs) return Promise.resolve(cached.value);
    const inFlight = this.#checksInFlight.get(check);
    if (inFlight !== undefined) return inFlight;
    const run = this.#runCheck(check, toolName).finally(() => this.#checksInFlight.delete(check));
    this.#checksInFlight.set(check, run);
    return run;
  }

  async #runCheck(check: CheckFn, toolName: string): Promise<boolean> {
    let passed: boolean;
    let failure: unknown;
    try {
      passed = Boolean(await check());
    } catch (err) {
      passed = false;
      failure = err;
    }
    const nowMs = this.#nowMs();
    let state = this.#checkStates.get(check);
    if (state === undefined) {
      state = {};
      this.#checkStates.set(check, state);
    }
    if (passed) {
      state.lastTrueAtMs = nowMs;
      state.cached = { value: true, expiresAtMs: nowMs + CHECK_CACHE_TTL_MS };
      return true;
    }
    if (state.lastTrueAtMs !== undefined && nowMs - state.lastTrueAtMs < CHECK_FLAKE_WINDOW_MS) {
      // Not cached: the next listing asks again, so a real outage shows up once the window closes.
      state.cached = undefined;
      this.#logger.warn(
        { tool: toolName, err: failure, sinceLastTrueMs: nowMs - state.lastTrueAtMs },
        'availability check failed shortly after passing; treating it as a flake and keeping the tool',
      );
      return true;
    }
    state.cached = { value: false, expiresAtMs: nowMs + CHECK_CACHE_TTL_MS };
    if (failure !== undefined) {
      this.#logger.warn({ tool: toolName, err: failure }, 'availability check threw; tool unavailable');
    }
    return false;
  }
}

function isToolSchemaLike(value: unknown): value is ToolSchema {
  if (typeof value !== 'object' || value === null) return false;
  const candidate = value as { description?: unknown; parameters?: unknown };
  return (
    typeof candidate.description === 'string' &&
    typeof candidate.parameters === 'object' &&
    candidate.parameters !== null
  );
}
