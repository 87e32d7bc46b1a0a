import type { Logger } from '../../common/logging.js';
import type { ApprovalHook } from '../approval/approval-types.js';
import type { TaskClient } from '../../common/task-client.js';

/** JSON Schema of a tool's parameters (OpenAI function-calling flavour). */
export type JsonSchema = Record<string, unknown>;

/** The `function` part of an OpenAI tool: name, description, parameters. */
export interface ToolSchema {
  readonly name: string;
  readonly description: string;
  readonly parameters: JsonSchema;
}

/** What a handler gets besides its arguments. */
export interface ToolContext {
  readonly tenant: string;
  readonly taskId: string;
  readonly sessionId: string;
  /** The task's environment on its executor. */
  readonly task: TaskClient;
  /**
   * Aborted on client disconnect or server shutdown. An Interrupt reaches
   * the call through `task` instead (its commands and scripts answer as
   * interrupted, with what they printed; see docs/tools.md "Interrupts").
   */
  readonly signal: AbortSignal;
  readonly logger: Logger;
  /** Live output for a streaming client (Session); absent for unary calls. */
  readonly onOutput?: (text: string) => void;
  /**
   * The approval guard (tool-runtime spec §5). Tools that run commands ask it
   * first, through `requestApproval` (approval/flow/guard-hook.ts). The dispatcher
   * always sets it; without it only the hardline rules apply.
   */
  readonly approval?: ApprovalHook;
  /**
   * The tools the caller may call (its tenant's `toolsets`); absent: every
   * tool. The registry answers any other tool as unknown, and `execute_code`
   * offers its scripts only these; script calls inherit it.
   */
  readonly allowedTools?: ReadonlySet<string>;
}

export type ToolArgs = Record<string, unknown>;

/** Returns the result string the model sees (normally JSON). */
export type ToolHandler = (args: ToolArgs, context: ToolContext) => Promise<string> | string;

/**
 * Told about every call the registry dispatches (before its handler runs) and
 * about tasks that end, so tools that keep per-task state across calls (the
 * file tools' repeated-read guard) can reset and free it. Must not throw or
 * block; it runs on every call.
 */
export interface ToolCallObserver {
  toolCalled(toolName: string, context: ToolContext): void;
  taskEnded(tenant: string, taskId: string): void;
}

/** Availability check; false or a throw means "unavailable". */
export type CheckFn = () => boolean | Promise<boolean>;

/** Rewrites a schema at listing time (e.g. to list only the tools that survived filtering). */
export type SchemaOverride = (schema: ToolSchema) => ToolSchema;

export interface ToolRegistration {
  readonly name: string;
  readonly toolset: string;
  readonly schema: ToolSchema;
  readonly handler: ToolHandler;
  readonly checkFn?: CheckFn;
  readonly requiresEnv?: readonly string[];
  /**
   * Why the check fails, for `berth tools --explain` (a variable to set, a backend
   * that does not answer); asked only when the check failed.
   */
  readonly explainUnavailable?: () => string | Promise<string>;
  readonly isAsync?: boolean;
  /** Defaults to the schema's description. */
  readonly description?: string;
  readonly emoji?: string;
  /** Result cap in characters; default 100,000. */
  readonly maxResultSizeChars?: number;
  readonly dynamicSchemaOverrides?: SchemaOverride;
  /** Operator opt-in for a plugin to replace a built-in of another toolset. */
  readonly override?: boolean;
  /** Observes every dispatched call while this tool is registered (one observer may serve several tools). */
  readonly callObserver?: ToolCallObserver;
  /**
   * Arguments the handler still accepts but the schema no longer advertises
   * (upstream renamed them), each with its schema and a description that
   * says what replaces it. Never shown to a model; the typed client keeps
   * them as deprecated properties so code written against them compiles.
   */
  readonly legacyParameters?: Readonly<Record<string, JsonSchema>>;
}

/** An OpenAI tool object as emitted by listings. */
export interface OpenAiTool {
  readonly type: 'function';
  readonly function: ToolSchema;
}
