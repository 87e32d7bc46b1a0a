/**
 * The dispatcher's core, free of gRPC: lists tools, runs tool calls for a
 * tenant's task on the right executor, interrupts and ends tasks. The gRPC
 * service (dispatcher-service.ts) is a thin adapter over this.
 */
import { performance } from 'node:perf_hooks';
import type { TerminalConfig } from '../common/config.js';
import { BerthError, InvalidArgumentError } from '../common/errors.js';
import type { Logger } from '../common/logging.js';
import type { TaskClient } from '../common/task-client.js';
import type { ExecutorClient } from '../gen/berth/v1/executor.js';
import type { ApprovalGrant } from './approval/approval-guard.js';
import type { ApprovalService } from './approval/approval-service.js';
import type { ApprovalSurface } from './approval/approval-types.js';
import type { ExecutorRouter, LossReason, Placement } from './executor-router.js';
import { resultHasError, type DispatcherMetrics } from './dispatcher-metrics.js';
import { ExecutorTaskClient } from './executor-task-client.js';
import { AdmittingTaskClient } from './quotas/admitting-task-client.js';
import type { QuotaLease, QuotaLedger } from './quotas/quota-ledger.js';
import type { AvailabilityReport, ToolRegistry } from './registry.js';
import { getToolDefinitions, resolveToolset, type ExecuteCodeSchemaBuilder } from './toolsets.js';
import { canonicalToolName } from './tool-aliases.js';
import type { ToolContext } from './tool-types.js';
import type { ToolCallTracing } from './tool-call-tracing.js';
import { SPAN_ATTRIBUTES } from '../common/tracing/tracing.js';

/** Task ids are opaque to us but bounded: they end up in paths and labels on the executor. */
const TASK_ID_PATTERN = /^[A-Za-z0-9_.:@=+-]{1,128}$/;

/** Arguments larger than this are refused before parsing (10 MB strings must not stall the server). */
export const MAX_ARGUMENTS_BYTES = 8 * 1024 * 1024;

/**
 * Built-in tools that use the task's environment: admitted by the quotas
 * before they run, so a task over quota gets no approval prompt either.
 * (`process_manage` never creates an environment.)
 */
const ENVIRONMENT_TOOLS: ReadonlySet<string> = new Set([
  'terminal',
  'read_file',
  'write_file',
  'patch',
  'search_files',
  'execute_code',
]);

/** Placements remembered for noticing lost environments. */
const MAX_PLACEMENTS = 100_000;

export interface CallToolInput {
  readonly name: string;
  readonly argumentsJson: string;
  readonly taskId: string;
  readonly sessionId: string;
}

export interface CallOptions {
  /** Client gone or server shutting down: in-flight work is cancelled. */
  readonly signal: AbortSignal;
  readonly onOutput?: (text: string) => void;
  /** Who answers approval requests; default `defer` (unary: park the call for the Approve RPC). */
  readonly approvalSurface?: ApprovalSurface;
  /** Lets the one command an Approve answer approved through (re-run of a parked call). */
  readonly approvalGrant?: ApprovalGrant;
}

export interface DispatcherOptions {
  readonly registry: ToolRegistry;
  readonly router: ExecutorRouter;
  readonly terminal: TerminalConfig;
  readonly logger: Logger;
  /** Rewrites the execute_code schema for the sandbox tools a listing keeps (configured limits). */
  readonly executeCodeSchema?: ExecuteCodeSchemaBuilder;
  /** The approval flow; without it only hardline rules guard commands. */
  readonly approvals?: ApprovalService;
  /** Where tool calls are counted; absent: metrics are off. */
  readonly metrics?: DispatcherMetrics;
  /** Per-tenant quotas; absent: none. */
  readonly quotas?: QuotaLedger;
  /** Tool-call spans; absent: tracing is off. */
  readonly tracing?: ToolCallTracing;
  /** The tools a tenant may list and call (its `toolsets`); undefined or absent: every tool. */
  readonly tenantTools?: (tenant: string) => ReadonlySet<string> | undefined;
}

/** What a call to a tool outside the tenant's toolsets gets: the same answer as a tool that does not exist. */
export function unknownToolResult(name: string): string {
  return JSON.stringify({ error: `Unknown tool: ${name}` });
}

/** Parses a CallTool argument string the way models send them; never throws. */
export function parseArguments(text: string): { args: unknown } | { error: string } {
  if (text.trim() === '') return { args: {} };
  try {
    return { args: JSON.parse(text) as unknown };
  } catch (err) {
    return { error: `Invalid JSON in tool arguments: ${(err as Error).message}` };
  }
}

export class Dispatcher {
  readonly #registry: ToolRegistry;
  readonly #router: ExecutorRouter;
  readonly #logger: Logger;
  readonly #executeCodeSchema: ExecuteCodeSchemaBuilder | undefined;
  readonly #approvals: ApprovalService | undefined;
  readonly #metrics: DispatcherMetrics | undefined;
  readonly #quotas: QuotaLedger | undefined;
  readonly #tracing: ToolCallTracing | undefined;
  readonly #tenantTools: (tenant: string) => ReadonlySet<string> | undefined;
  /** Which executor holds each task's environment, to notice when it moved (its executor died). */
  readonly #placements = new Map<string, string>();

  constructor(options: DispatcherOptions) {
    this.#registry = options.registry;
    this.#router = options.router;
    this.#logger = options.logger;
    this.#executeCodeSchema = options.executeCodeSchema;
    this.#approvals = options.approvals;
    this.#metrics = options.metrics;
    this.#quotas = options.quotas;
    this.#tracing = options.tracing;
    this.#tenantTools = options.tenantTools ?? (() => undefined);
  }

  get approvals(): ApprovalService | undefined {
    return this.#approvals;
  }

  get registry(): ToolRegistry {
    return this.#registry;
  }

  /**
   * Which toolsets are available and why the others are not (`berth tools
   * --explain`); for a tenant with `toolsets`, only about its own tools.
   */
  async availabilityReport(tenant?: string): Promise<AvailabilityReport> {
    const report = await this.#registry.availabilityReport();
    const scope = tenant === undefined ? undefined : this.#tenantTools(tenant);
    if (scope === undefined) return report;
    return {
      available: report.available.filter((toolset) => resolveToolset(toolset).some((tool) => scope.has(tool))),
      unavailable: report.unavailable
        .map((toolset) => ({ ...toolset, tools: toolset.tools.filter((tool) => scope.has(tool)) }))
        .filter((toolset) => toolset.tools.length > 0),
      unavailable_tools: report.unavailable_tools.filter((tool) => scope.has(tool.name)),
    };
  }

  /** The tenant's tool definitions; the client's toolset choice narrows the tenant's `toolsets`, never widens them. */
  async listTools(tenant: string, enabled: readonly string[], disabled: readonly string[]) {
    const within = this.#tenantTools(tenant);
    return getToolDefinitions(
      this.#registry,
      { enabled: enabled.length > 0 ? [...enabled] : undefined, disabled: [...disabled], ...(within ? { within } : {}) },
      this.#executeCodeSchema ? { executeCode: this.#executeCodeSchema } : {},
    );
  }

  /** Validates a client-supplied task id; the tenant namespaces it from here on. */
  static checkTaskId(taskId: string): string {
    const id = taskId === '' ? 'default' : taskId;
    if (!TASK_ID_PATTERN.test(id)) {
      throw new InvalidArgumentError(
        'task_id must be 1-128 characters of A-Z a-z 0-9 and _ . : @ = + -',
      );
    }
    return id;
  }

  /**
   * Runs one tool call. An old tool name (`process`) is replaced by the
   * current one (`process_manage`) first: spans, metrics, logs, quotas,
   * approvals (and a parked call's re-run) and the result all see the new name.
   */
  async callTool(tenant: string, call: CallToolInput, options: CallOptions): Promise<string> {
    const input: CallToolInput = { ...call, name: canonicalToolName(call.name) };
    const tracing = this.#tracing;
    if (tracing === undefined) return this.#measuredCall(tenant, input, options);
    const span = { tool: input.name, tenant, taskId: input.taskId || 'default', nested: false };
    return tracing.run(span, () => this.#measuredCall(tenant, input, options));
  }

  async #measuredCall(tenant: string, input: CallToolInput, options: CallOptions): Promise<string> {
    const metrics = this.#metrics;
    if (metrics === undefined) return this.#callTool(tenant, input, options);
    const started = performance.now();
    try {
      const result = await this.#callTool(tenant, input, options);
      metrics.toolCallDone(input.name, (performance.now() - started) / 1000, result);
      return result;
    } catch (err) {
      metrics.toolCallFailed(input.name, (performance.now() - started) / 1000, err);
      throw err;
    }
  }

  async #callTool(tenant: string, input: CallToolInput, options: CallOptions): Promise<string> {
    // Before anything else: no placement, quota, approval or executor work for a tool the tenant may not use.
    const allowedTools = this.#tenantTools(tenant);
    if (allowedTools !== undefined && !allowedTools.has(input.name)) {
      this.#logger.info({ tenant, task: input.taskId || 'default', tool: input.name }, "tool call refused: not in the tenant's toolsets");
      return unknownToolResult(input.name);
    }
    const taskId = Dispatcher.checkTaskId(input.taskId);
    if (Buffer.byteLength(input.argumentsJson, 'utf8') > MAX_ARGUMENTS_BYTES) {
      throw new InvalidArgumentError(
        `arguments_json is larger than ${MAX_ARGUMENTS_BYTES} bytes; send large content in several calls`,
      );
    }
    const started = performance.now();
    const key = `${tenant}/${taskId}`;
    let placement = await this.#router.place(tenant, taskId, this.#placements.get(key));
    const log = this.#logger.child({ tenant, task: taskId, tool: input.name, backend: placement.backend });
    this.#tracing?.annotate({ [SPAN_ATTRIBUTES.backend]: placement.backend });
    const quotas = this.#quotas;
    const leases: QuotaLease[] = [];
    if (quotas) leases.push(quotas.beginCall(tenant));
    try {
      for (let attempt = 0; ; attempt++) {
        // After the one lost-environment error the task is placed afresh (its new executor may not be known yet).
        if (placement.lost) this.#placements.delete(key);
        else this.#remember(key, placement.executorId);
        try {
          return await this.#runCall(tenant, taskId, input, options, { ...placement, log, leases, started, allowedTools });
        } catch (err) {
          // Where a new task's first call failed is no home of it: the next call looks for a holder again.
          if (placement.fresh) this.#placements.delete(key);
          // A draining executor refuses tasks it does not hold before doing anything: a new task may go elsewhere.
          if (!(placement.fresh && attempt === 0 && isDrainingRefusal(err))) throw err;
          log.info({ executor: placement.executorId }, 'executor is draining; placing the new task elsewhere');
          this.#router.markDraining(placement.executorId);
          this.#placements.delete(key);
          placement = await this.#router.place(tenant, taskId, undefined);
        }
      }
    } finally {
      for (const l of leases) l.release();
    }
  }

  async #runCall(
    tenant: string,
    taskId: string,
    input: CallToolInput,
    options: CallOptions,
    call: {
      client: ExecutorClient;
      executorId: string;
      backend: string;
      lost?: Placement['lost'];
      log: Logger;
      leases: QuotaLease[];
      started: number;
      allowedTools: ReadonlySet<string> | undefined;
    },
  ): Promise<string> {
    const { client, executorId, lost, log, leases, started, allowedTools } = call;
    if (lost !== undefined) {
      log.warn({ lostExecutor: lost.executorId, reason: lost.reason, executor: executorId }, 'task environment lost with its executor');
      return JSON.stringify({ error: lostEnvironmentMessage(taskId, lost.executorId, lost.reason) });
    }
    let outcome = 'ok';
    try {
      const parsed = parseArguments(input.argumentsJson);
      if ('error' in parsed) {
        outcome = 'bad_arguments';
        return JSON.stringify({ error: parsed.error });
      }
      let task: TaskClient = new ExecutorTaskClient(client, { tenant, taskId }, options.signal);
      const quotas = this.#quotas;
      if (quotas) {
        let admitted: Promise<void> | undefined;
        const admit = () =>
          (admitted ??= quotas.admitTask(tenant, taskId, executorId).then((lease) => {
            leases.push(lease);
          }));
        if (input.name === 'execute_code') leases.push(quotas.beginScript(tenant));
        if (ENVIRONMENT_TOOLS.has(input.name)) await admit();
        if (input.name === 'execute_code') await quotas.admitCodeContainer(tenant, taskId, executorId);
        task = new AdmittingTaskClient(task, admit);
      }
      if (this.#tracing) task = this.#tracing.traceScriptCalls(task, { tenant, taskId, backend: call.backend });
      const context: ToolContext = {
        tenant,
        taskId,
        sessionId: input.sessionId,
        task,
        signal: options.signal,
        logger: log,
        ...(allowedTools ? { allowedTools } : {}),
        ...(options.onOutput ? { onOutput: options.onOutput } : {}),
        ...(this.#approvals
          ? {
              approval: this.#approvals.hookFor({
                tenant,
                taskId,
                sessionId: input.sessionId,
                surface: options.approvalSurface ?? { kind: 'defer' },
                signal: options.signal,
                logger: log,
                executorId,
                executor: client,
                parked: { ...input, taskId },
                ...(options.approvalGrant ? { grant: options.approvalGrant } : {}),
              }),
            }
          : {}),
      };
      const result = await this.#registry.dispatch(input.name, parsed.args, context);
      if (resultHasError(result)) outcome = 'tool_error';
      return result;
    } catch (err) {
      outcome = 'failed';
      throw err;
    } finally {
      log.info({ durationMs: Math.round((performance.now() - started) * 100) / 100, outcome }, 'tool call');
    }
  }

  /** Records where a task lives. */
  #remember(key: string, executorId: string): void {
    if (this.#placements.get(key) === executorId) return;
    // Bounded: forget the oldest placements first (Map keeps insertion order).
    if (this.#placements.size >= MAX_PLACEMENTS) {
      const oldest = this.#placements.keys().next().value;
      if (oldest !== undefined) this.#placements.delete(oldest);
    }
    this.#placements.delete(key);
    this.#placements.set(key, executorId);
  }

  /** The executor holding the task's environment, without reporting a loss (interrupt, end). */
  async #locate(tenant: string, taskId: string): Promise<ExecutorClient> {
    const placement = await this.#router.place(tenant, taskId, this.#placements.get(`${tenant}/${taskId}`));
    return placement.client;
  }

  /** Interrupts the task's running foreground work; returns how many commands were stopped. */
  async interrupt(tenant: string, taskId: string): Promise<number> {
    const id = Dispatcher.checkTaskId(taskId);
    const client = await this.#locate(tenant, id);
    const r = await client.interruptTask({ task: { tenant, taskId: id } });
    this.#logger.info({ tenant, task: id, interrupted: r.interrupted }, 'interrupt');
    return r.interrupted;
  }

  /** Releases the task's environment on its executor. */
  async endTask(tenant: string, taskId: string): Promise<boolean> {
    const id = Dispatcher.checkTaskId(taskId);
    const client = await this.#locate(tenant, id);
    this.#placements.delete(`${tenant}/${id}`);
    this.#approvals?.guard.forgetTask(tenant, id);
    this.#registry.taskEnded(tenant, id);
    const released = this.#quotas?.releaseTask(tenant, id);
    let r: { released: boolean };
    try {
      r = await client.releaseTask({ task: { tenant, taskId: id } });
    } finally {
      released?.();
    }
    this.#logger.info({ tenant, task: id, released: r.released }, 'end task');
    return r.released;
  }
}

const LOSS_CAUSES: Readonly<Record<LossReason, string>> = {
  unreachable: 'stopped answering',
  draining: 'was shut down (drained for an upgrade or a scale-down)',
  removed: 'is gone from the executor membership (scaled down, replaced or failed)',
};

/** The one error a task gets when its environment went with its executor. */
export function lostEnvironmentMessage(taskId: string, executorId: string, reason: LossReason): string {
  return (
    `The environment of task '${taskId}' was lost: its executor (${executorId}) ${LOSS_CAUSES[reason]}. ` +
    'A new environment will be created on a healthy executor; working directory, variables, files ' +
    'outside shared storage and background processes are gone (on the docker backend with ' +
    'terminal.container_persistent, /workspace and the home directory come back from their volumes). ' +
    'Re-run any setup, then retry.'
  );
}

/** The refusal of an executor that is draining and does not hold the task (see TaskEnvironments.drain). */
function isDrainingRefusal(err: unknown): boolean {
  return err instanceof BerthError && err.code === 'UNAVAILABLE' && /\bis draining\b/.test(err.message);
}
