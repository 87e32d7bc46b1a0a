/**
 * One tool call from its arrival to its result: refused when the tenant may
 * not use the tool, checked for size, enrolled for Interrupt, placed on the
 * task's executor (a new task again elsewhere when that executor is
 * draining), admitted by the quotas, given its approval hook and run by the
 * tool registry; counted, traced and logged on the way.
 */
import { performance } from 'node:perf_hooks';
import { BerthError, InvalidArgumentError } from '../../common/errors.js';
import { InterruptedBeforeStartError, unlessAborted } from '../../common/interrupts.js';
import { linkSignals, type LinkedSignal } from '../../common/linked-signal.js';
import type { Logger } from '../../common/logging.js';
import type { TaskClient } from '../../common/task-client.js';
import { SPAN_ATTRIBUTES } from '../../common/tracing/tracing.js';
import type { ExecutorClient } from '../../gen/berth/v1/executor.js';
import type { ApprovalGrant } from '../approval/flow/approval-guard.js';
import type { ApprovalService } from '../approval/flow/approval-service.js';
import type { ApprovalSurface } from '../approval/approval-types.js';
import { resultHasError, type DispatcherMetrics } from '../dispatcher-metrics.js';
import type { ExecutorRouter, Placement } from '../executors/executor-router.js';
import { ExecutorTaskClient, type ToolCallInterrupt } from '../executors/executor-task-client.js';
import { lostEnvironmentMessage, type TaskPlacements } from '../executors/task-placements.js';
import { isMcpToolName } from '../mcp/mcp-names.js';
import type { McpServers } from '../mcp/mcp-servers.js';
import { AdmittingTaskClient } from '../quotas/admitting-task-client.js';
import type { QuotaLedger } from '../quotas/quota-ledger.js';
import type { ToolRegistry } from '../registry/registry.js';
import { canonicalToolName } from '../registry/tool-aliases.js';
import type { ToolContext } from '../registry/tool-types.js';
import { checkTaskId } from '../task-ids.js';
import type { ToolCallTracing } from '../tool-call-tracing.js';
import { CallLeases } from './call-leases.js';
import type { RunningCall, RunningCalls } from './running-calls.js';

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

export interface ToolCallsOptions {
  readonly registry: ToolRegistry;
  readonly router: ExecutorRouter;
  readonly placements: TaskPlacements;
  readonly running: RunningCalls;
  readonly logger: Logger;
  readonly approvals: ApprovalService | undefined;
  readonly metrics: DispatcherMetrics | undefined;
  readonly quotas: QuotaLedger | undefined;
  readonly tracing: ToolCallTracing | undefined;
  /** The tools a tenant may list and call (its `toolsets`); undefined: every tool. */
  readonly tenantTools: (tenant: string) => ReadonlySet<string> | undefined;
  /** Configured MCP servers; undefined: none. */
  readonly mcp: McpServers | undefined;
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

/** A call placed on an executor, as it runs there. */
interface PlacedCall {
  readonly client: ExecutorClient;
  readonly executorId: string;
  readonly backend: string;
  readonly lost?: Placement['lost'];
  readonly log: Logger;
  readonly leases: CallLeases;
  readonly started: number;
  readonly allowedTools: ReadonlySet<string> | undefined;
  readonly interrupt: ToolCallInterrupt;
  /** Aborted when the executor leaves rotation unanswered; undefined for a lost placement. */
  readonly unreachable: AbortSignal | undefined;
}

export class ToolCalls {
  readonly #o: ToolCallsOptions;

  constructor(options: ToolCallsOptions) {
    this.#o = options;
  }

  /**
   * Runs one tool call. An old tool name (`process`) is replaced by the
   * current one (`process_manage`) first: spans, metrics, logs, quotas,
   * approvals (and a parked call's re-run) and the result all see the new name.
   */
  async run(tenant: string, call: CallToolInput, options: CallOptions): Promise<string> {
    const input: CallToolInput = { ...call, name: canonicalToolName(call.name) };
    const tracing = this.#o.tracing;
    if (tracing === undefined) return this.#measuredCall(tenant, input, options);
    const span = { tool: input.name, tenant, taskId: input.taskId || 'default', nested: false };
    return tracing.run(span, () => this.#measuredCall(tenant, input, options));
  }

  async #measuredCall(tenant: string, input: CallToolInput, options: CallOptions): Promise<string> {
    const metrics = this.#o.metrics;
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
    const mcp = this.#o.mcp;
    // Before anything else: no placement, quota, approval or executor work for a tool the tenant may not use.
    if (mcp !== undefined && isMcpToolName(input.name) && !mcp.visible(tenant, input.name)) {
      await mcp.discover(tenant, options.signal);
    }
    const allowedTools = this.#o.tenantTools(tenant);
    if ((allowedTools !== undefined && !allowedTools.has(input.name)) || (mcp !== undefined && !mcp.visible(tenant, input.name))) {
      this.#o.logger.info({ tenant, task: input.taskId || 'default', tool: input.name }, "tool call refused: not in the tenant's toolsets");
      return unknownToolResult(input.name);
    }
    const taskId = checkTaskId(input.taskId);
    if (Buffer.byteLength(input.argumentsJson, 'utf8') > MAX_ARGUMENTS_BYTES) {
      throw new InvalidArgumentError(
        `arguments_json is larger than ${MAX_ARGUMENTS_BYTES} bytes; send large content in several calls`,
      );
    }
    const started = performance.now();
    // From here an Interrupt of the task reaches this call, whatever it is waiting for.
    const running = this.#o.running.enrol(tenant, taskId);
    try {
      return await this.#placedCall(tenant, taskId, input, options, { started, running, allowedTools });
    } finally {
      running.leave();
    }
  }

  async #placedCall(
    tenant: string,
    taskId: string,
    input: CallToolInput,
    options: CallOptions,
    { started, running, allowedTools }: { started: number; running: RunningCall; allowedTools: ReadonlySet<string> | undefined },
  ): Promise<string> {
    const placements = this.#o.placements;
    let placement = await placements.place(tenant, taskId);
    const log = this.#o.logger.child({ tenant, task: taskId, tool: input.name, backend: placement.backend });
    this.#o.tracing?.annotate({ [SPAN_ATTRIBUTES.backend]: placement.backend });
    const quotas = this.#o.quotas;
    const leases = new CallLeases();
    if (quotas) leases.push(quotas.beginCall(tenant));
    try {
      for (let attempt = 0; ; attempt++) {
        // After the one lost-environment error the task is placed afresh (its new executor may not be known yet).
        if (placement.lost) placements.forget(tenant, taskId);
        else placements.remember(tenant, taskId, placement.executorId);
        // Aborted when the executor leaves rotation unanswered while the call runs (a stopped executor answers nothing).
        const unreachable = placement.lost ? undefined : this.#o.router.unreachableSignal(placement.executorId);
        const cut = () => unreachable?.signal.aborted === true && !options.signal.aborted;
        try {
          const result = await this.#runCall(tenant, taskId, input, options, {
            ...placement,
            log,
            leases,
            started,
            allowedTools,
            interrupt: running,
            unreachable: unreachable?.signal,
          });
          // Whatever the tool made of its cut executor calls, the call ends as the task's one error.
          return cut() ? this.#unreachable(log, tenant, taskId, placement.executorId) : result;
        } catch (err) {
          // Where a new task's first call failed is no home of it: the next call looks for a holder again.
          if (placement.fresh) placements.forget(tenant, taskId);
          // The executor holding the task died (it answers no health check either): this is the task's one error.
          if (
            cut() ||
            (!placement.fresh && !placement.lost && isUnavailable(err) && !isDrainingRefusal(err) && (await this.#o.router.confirmDown(placement.executorId)))
          ) {
            return this.#unreachable(log, tenant, taskId, placement.executorId);
          }
          // A draining executor refuses tasks it does not hold before doing anything: a new task may go elsewhere.
          if (!(placement.fresh && attempt === 0 && isDrainingRefusal(err))) throw err;
          log.info({ executor: placement.executorId }, 'executor is draining; placing the new task elsewhere');
          this.#o.router.markDraining(placement.executorId);
          placements.forget(tenant, taskId);
          placement = await this.#o.router.place(tenant, taskId, undefined);
        } finally {
          unreachable?.done();
        }
      }
    } finally {
      leases.releaseAll();
    }
  }

  /** The task's one error when its executor stopped answering: its next call is placed afresh. */
  #unreachable(log: Logger, tenant: string, taskId: string, executorId: string): string {
    log.warn({ lostExecutor: executorId, reason: 'unreachable' }, 'task environment lost with its executor');
    this.#o.placements.forget(tenant, taskId);
    return JSON.stringify({ error: lostEnvironmentMessage(taskId, executorId, 'unreachable') });
  }

  async #runCall(tenant: string, taskId: string, input: CallToolInput, options: CallOptions, call: PlacedCall): Promise<string> {
    const { client, executorId, lost, log, leases, started, allowedTools, interrupt, unreachable } = call;
    if (lost !== undefined) {
      log.warn({ lostExecutor: lost.executorId, reason: lost.reason, executor: executorId }, 'task environment lost with its executor');
      return JSON.stringify({ error: lostEnvironmentMessage(taskId, lost.executorId, lost.reason) });
    }
    let outcome = 'ok';
    let executorSignal: LinkedSignal | undefined;
    try {
      const parsed = parseArguments(input.argumentsJson);
      if ('error' in parsed) {
        outcome = 'bad_arguments';
        return JSON.stringify({ error: parsed.error });
      }
      // Its executor calls also end when the executor leaves rotation unanswered (not an Interrupt, not the client leaving).
      executorSignal = linkSignals(options.signal, unreachable);
      let task: TaskClient = new ExecutorTaskClient(client, { tenant, taskId }, executorSignal.signal, interrupt);
      const quotas = this.#o.quotas;
      if (quotas) {
        let admitted: Promise<void> | undefined;
        const admitOnce = () =>
          (admitted ??= quotas.admitTask(tenant, taskId, executorId).then((lease) => leases.push(lease)));
        // Admission may wait for executors' usage reports. An Interrupt ends the wait: the tool then runs
        // against a task client that starts nothing and answers as interrupted. A client that left gets nothing.
        const admit = (step: () => Promise<unknown>) =>
          unlessAborted(step(), AbortSignal.any([options.signal, interrupt.signal]), 'the call').catch((err: unknown) => {
            if (!(err instanceof InterruptedBeforeStartError)) throw err;
            options.signal.throwIfAborted();
          });
        if (input.name === 'execute_code') leases.push(quotas.beginScript(tenant));
        if (ENVIRONMENT_TOOLS.has(input.name) || isMcpToolName(input.name)) await admit(admitOnce);
        if (input.name === 'execute_code') await admit(() => quotas.admitCodeContainer(tenant, taskId, executorId));
        task = new AdmittingTaskClient(task, () => admit(admitOnce));
      }
      const tracing = this.#o.tracing;
      if (tracing) task = tracing.traceScriptCalls(task, { tenant, taskId, backend: call.backend });
      const approvals = this.#o.approvals;
      const context: ToolContext = {
        tenant,
        taskId,
        sessionId: input.sessionId,
        task,
        signal: options.signal,
        logger: log,
        ...(allowedTools ? { allowedTools } : {}),
        ...(options.onOutput ? { onOutput: options.onOutput } : {}),
        ...(approvals
          ? {
              approval: approvals.hookFor({
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
      const result = await this.#o.registry.dispatch(input.name, parsed.args, context);
      if (resultHasError(result)) outcome = 'tool_error';
      return result;
    } catch (err) {
      outcome = 'failed';
      throw err;
    } finally {
      executorSignal?.done();
      log.info({ durationMs: Math.round((performance.now() - started) * 100) / 100, outcome }, 'tool call');
    }
  }
}

function isUnavailable(err: unknown): boolean {
  return err instanceof BerthError && err.code === 'UNAVAILABLE';
}

/** The refusal of an executor that is draining and does not hold the task (see TaskEnvironments.drain). */
function isDrainingRefusal(err: unknown): boolean {
  return isUnavailable(err) && /\bis draining\b/.test((err as Error).message);
}
