/**
 * Plugin hooks around tool calls. Policy (blocking a call), observation
 * (audit, metrics) and result rewriting live here instead of in handlers, so
 * every tool gets them the same way.
 */
import type { ToolArgs } from './tool-types.js';

/** What every hook learns about a call. `args` are the coerced arguments, frozen. */
export interface ToolCallEvent {
  readonly toolName: string;
  readonly args: Readonly<ToolArgs>;
  readonly taskId: string;
  readonly sessionId: string;
}

/** A finished call: adds the handler's wall time and its result string. */
export interface ToolResultEvent extends ToolCallEvent {
  readonly durationMs: number;
  readonly result: string;
}

/**
 * A pre-call verdict: a non-empty string, or `{error}` with a non-empty
 * string, blocks the call and becomes the `error` the model sees. Anything
 * else lets the call proceed.
 */
export type PreToolCallVerdict = string | { readonly error: string } | undefined | void;

export type PreToolCallHook = (event: ToolCallEvent) => PreToolCallVerdict | Promise<PreToolCallVerdict>;
export type PostToolCallHook = (event: ToolResultEvent) => void | Promise<void>;
/** Return a string to replace the result; anything else leaves it to the next hook. */
export type TransformToolResultHook = (
  event: ToolResultEvent,
) => string | undefined | void | Promise<string | undefined | void>;

/** Hook names as plugins know them, with the function each expects. */
export interface ToolHookMap {
  pre_tool_call: PreToolCallHook;
  post_tool_call: PostToolCallHook;
  transform_tool_result: TransformToolResultHook;
}

export type ToolHookName = keyof ToolHookMap;

/**
 * Ordered lists of hooks per event. Hooks run in registration order; a hook
 * that throws propagates to the caller (the registry turns that into an
 * "Error executing" result) rather than being skipped, because a failing
 * policy hook must not silently let a call through.
 */
export class HookRegistry {
  readonly #pre: PreToolCallHook[] = [];
  readonly #post: PostToolCallHook[] = [];
  readonly #transform: TransformToolResultHook[] = [];

  /** Adds a hook; returns a function that removes it (for plugin unload). */
  on<K extends ToolHookName>(name: K, hook: ToolHookMap[K]): () => void {
    const list = this.#listFor(name) as ToolHookMap[K][];
    list.push(hook);
    return () => {
      const index = list.indexOf(hook);
      if (index >= 0) list.splice(index, 1);
    };
  }

  /** How many hooks are registered for an event. */
  count(name: ToolHookName): number {
    return this.#listFor(name).length;
  }

  /** Runs pre-call hooks until one blocks; returns the block message, if any. */
  async runPreToolCall(event: ToolCallEvent): Promise<string | undefined> {
    for (const hook of [...this.#pre]) {
      const message = blockMessage(await hook(event));
      if (message !== undefined) return message;
    }
    return undefined;
  }

  /** Runs every post-call hook, in order. */
  async runPostToolCall(event: ToolResultEvent): Promise<void> {
    for (const hook of [...this.#post]) await hook(event);
  }

  /**
   * Runs transform hooks until one returns a string, which is the new result.
   * Later hooks are not called: the first rewrite wins, so chaining two
   * rewrites by accident cannot happen.
   */
  async runTransformToolResult(event: ToolResultEvent): Promise<string | undefined> {
    for (const hook of [...this.#transform]) {
      const replaced = await hook(event);
      if (typeof replaced === 'string') return replaced;
    }
    return undefined;
  }

  #listFor(name: ToolHookName): unknown[] {
    switch (name) {
      case 'pre_tool_call':
        return this.#pre;
      case 'post_tool_call':
        return this.#post;
      case 'transform_tool_result':
        return this.#transform;
      default:
        // Plugins may be plain JavaScript; a typo must fail at registration, not be ignored.
        throw new TypeError(`Unknown tool hook: ${String(name)}`);
    }
  }
}

function blockMessage(verdict: unknown): string | undefined {
  if (typeof verdict === 'string') return verdict === '' ? undefined : verdict;
  if (typeof verdict === 'object' && verdict !== null && 'error' in verdict) {
    const error = (verdict as { error: unknown }).error;
    if (typeof error === 'string' && error !== '') return error;
  }
  return undefined;
}
