/**
 * The dispatcher's core, free of gRPC: lists tools, runs tool calls for a
 * tenant's task on the right executor, interrupts, suspends and ends tasks,
 * follows their events. The gRPC service (dispatcher-service.ts) is a thin
 * adapter over this; the work is its parts': tool-listing.ts,
 * calls/tool-calls.ts, task-snapshots.ts, task-events.ts.
 */
import type { TerminalConfig } from '../common/config.js';
import { NotFoundError, ResourceExhaustedError } from '../common/errors.js';
import type { Logger } from '../common/logging.js';
import type { TaskMcpRequest, TaskMcpResult } from '../common/task-client.js';
import type { ApproveRequestInput } from './approval/flow/approval-guard.js';
import type { ApprovalService } from './approval/flow/approval-service.js';
import { RunningCalls } from './calls/running-calls.js';
import { ToolCalls, type CallOptions, type CallToolInput } from './calls/tool-calls.js';
import type { DispatcherMetrics } from './dispatcher-metrics.js';
import type { ExecutorRouter } from './executors/executor-router.js';
import { ExecutorTaskClient } from './executors/executor-task-client.js';
import { TaskPlacements } from './executors/task-placements.js';
import type { McpServers } from './mcp/mcp-servers.js';
import type { QuotaLedger } from './quotas/quota-ledger.js';
import type { AvailabilityReport, ToolRegistry } from './registry/registry.js';
import type { ExecuteCodeSchemaBuilder } from './registry/toolsets.js';
import { checkTaskId } from './task-ids.js';
import { followTaskEvents, type TaskEventsItem } from './task-events.js';
import { TaskSnapshots } from './task-snapshots.js';
import type { ToolCallTracing } from './tool-call-tracing.js';
import { ToolListing, type ListedTools } from './tool-listing.js';

/** Event streams (TaskEvents and Session subscriptions) one tenant may have open on this dispatcher. */
export const MAX_EVENT_STREAMS_PER_TENANT = 256;

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
  /** MCP servers as tools (`mcp_servers`, `tenants[].mcp_servers`); absent: none. */
  readonly mcp?: McpServers;
}

export class Dispatcher {
  readonly #registry: ToolRegistry;
  readonly #router: ExecutorRouter;
  readonly #logger: Logger;
  readonly #approvals: ApprovalService | undefined;
  readonly #quotas: QuotaLedger | undefined;
  /** Which executor holds each task's environment, to notice when it moved (its executor died). */
  readonly #placements: TaskPlacements;
  /** Tool calls running per task, for Interrupt: from their arrival to their result. */
  readonly #running = new RunningCalls();
  readonly #listing: ToolListing;
  readonly #calls: ToolCalls;
  /** Open event streams per tenant. */
  readonly #eventStreams = new Map<string, number>();
  /** Snapshot, Fork, ListSnapshots, DeleteSnapshot. */
  readonly snapshots: TaskSnapshots;

  constructor(options: DispatcherOptions) {
    this.#registry = options.registry;
    this.#router = options.router;
    this.#logger = options.logger;
    this.#approvals = options.approvals;
    this.#quotas = options.quotas;
    this.#placements = new TaskPlacements(options.router);
    const tenantTools = options.tenantTools ?? (() => undefined);
    const mcp = options.mcp?.configured ? options.mcp : undefined;
    mcp?.attach(this.#registry, (tenant, request, signal) => this.#discoveryRequest(tenant, request, signal));
    this.#listing = new ToolListing({ registry: options.registry, executeCodeSchema: options.executeCodeSchema, tenantTools, mcp });
    this.#calls = new ToolCalls({
      registry: options.registry,
      router: options.router,
      placements: this.#placements,
      running: this.#running,
      logger: options.logger,
      approvals: options.approvals,
      metrics: options.metrics,
      quotas: options.quotas,
      tracing: options.tracing,
      tenantTools,
      mcp,
    });
    this.snapshots = new TaskSnapshots({
      router: this.#router,
      logger: this.#logger,
      ...(this.#quotas ? { quotas: this.#quotas } : {}),
      place: (tenant, taskId) => this.#placements.place(tenant, taskId),
      remember: (tenant, taskId, executorId) => this.#placements.remember(tenant, taskId, executorId),
    });
  }

  /**
   * One MCP request in a throwaway task of the tenant (tool discovery): placed
   * like any task, so a stdio server runs in a sandbox of the tenant's, and
   * ended at once.
   */
  async #discoveryRequest(tenant: string, request: TaskMcpRequest, signal: AbortSignal): Promise<TaskMcpResult> {
    const taskId = `mcp-discovery.${request.serverName}`.slice(0, 128);
    const placement = await this.#router.place(tenant, taskId, undefined);
    const task = new ExecutorTaskClient(placement.client, { tenant, taskId }, signal);
    try {
      return await task.mcpRequest(request);
    } finally {
      await placement.client.releaseTask({ task: { tenant, taskId } }).catch((err: unknown) => {
        this.#logger.warn({ err, tenant, task: taskId }, 'releasing an MCP discovery task failed');
      });
    }
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
  availabilityReport(tenant?: string): Promise<AvailabilityReport> {
    return this.#listing.availabilityReport(tenant);
  }

  /** The backend the tenant's tasks run on (ListTools says it, so clients can say what isolates them). */
  backendFor(tenant: string): string {
    return this.#router.backendFor(tenant);
  }

  /** The tenant's tool definitions; the client's toolset choice narrows the tenant's `toolsets`, never widens them. */
  listTools(tenant: string, enabled: readonly string[], disabled: readonly string[]): Promise<ListedTools> {
    return this.#listing.listTools(tenant, enabled, disabled);
  }

  /** Runs one tool call (calls/tool-calls.ts); an old tool name is replaced by the current one first. */
  callTool(tenant: string, call: CallToolInput, options: CallOptions): Promise<string> {
    return this.#calls.run(tenant, call, options);
  }

  /**
   * The Approve RPC's work: answers a unary call that was parked for
   * approval, then runs it (with a grant for exactly that command) or
   * returns the denial. Returns the result the model sees.
   */
  async approve(tenant: string, request: ApproveRequestInput, signal: AbortSignal): Promise<string> {
    const approvals = this.#approvals;
    if (approvals === undefined) throw new NotFoundError(`no pending approval with id '${request.approvalId}'`);
    const outcome = await approvals.guard.approve(tenant, request);
    if (outcome.kind === 'result') return outcome.result;
    return this.callTool(tenant, outcome.call, {
      signal,
      approvalSurface: { kind: 'defer' },
      approvalGrant: outcome.grant,
    });
  }

  /**
   * Interrupts the task's running calls, whatever stage each is in: here
   * (placement, quota admission) they stop waiting and answer as
   * interrupted; on the executor the task's calls in flight are interrupted
   * (commands killed, waits for the environment ended), and those of this
   * dispatcher still on their way there are named so they are interrupted
   * on arrival. Returns how many calls were interrupted.
   */
  async interrupt(tenant: string, taskId: string): Promise<number> {
    const id = checkTaskId(taskId);
    const running = this.#running.uninterrupted(tenant, id);
    for (const call of running) call.abort();
    const client = await this.#placements.locate(tenant, id);
    const r = await client.interruptTask({ task: { tenant, taskId: id }, callIds: running.map((c) => c.callId) });
    const interrupted = Math.max(running.length, r.interrupted);
    this.#logger.info({ tenant, task: id, interrupted }, 'interrupt');
    return interrupted;
  }

  /**
   * Follows the task's background-process events (see task-events.ts) until
   * `signal` aborts. A task of another tenant is out of reach (task ids are
   * the tenant's own): it answers as a task with no events.
   * @throws ResourceExhaustedError past {@link MAX_EVENT_STREAMS_PER_TENANT} open streams.
   */
  async *taskEvents(
    tenant: string,
    taskId: string,
    options: { readonly after: string; readonly fromLatest?: boolean; readonly signal: AbortSignal },
  ): AsyncGenerator<TaskEventsItem> {
    const id = checkTaskId(taskId);
    const open = this.#eventStreams.get(tenant) ?? 0;
    if (open >= MAX_EVENT_STREAMS_PER_TENANT) {
      throw new ResourceExhaustedError(
        `too many event streams open (${MAX_EVENT_STREAMS_PER_TENANT} per tenant); close some, or follow several tasks on one Session`,
      );
    }
    this.#eventStreams.set(tenant, open + 1);
    try {
      const client = await this.#placements.locate(tenant, id);
      yield* followTaskEvents(client, { tenant, taskId: id }, {
        after: options.after,
        fromLatest: options.fromLatest ?? false,
        signal: options.signal,
        logger: this.#logger,
      });
    } finally {
      const left = (this.#eventStreams.get(tenant) ?? 1) - 1;
      if (left > 0) this.#eventStreams.set(tenant, left);
      else this.#eventStreams.delete(tenant);
    }
  }

  /** Releases the task's environment on its executor. */
  async endTask(tenant: string, taskId: string): Promise<boolean> {
    const id = checkTaskId(taskId);
    const client = await this.#placements.locate(tenant, id);
    this.#placements.forget(tenant, id);
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

  /**
   * Suspends the task's environment on its executor (docs/suspend.md). A
   * task with no environment, another tenant's included, answers
   * `suspended: false`, as EndTask answers `released: false`.
   */
  async suspend(tenant: string, taskId: string): Promise<{ suspended: boolean; processesKept: boolean }> {
    const id = checkTaskId(taskId);
    const client = await this.#placements.locate(tenant, id);
    const r = await client.suspendTask({ task: { tenant, taskId: id } });
    this.#logger.info({ tenant, task: id, suspended: r.suspended, processesKept: r.processesKept }, 'suspend task');
    return { suspended: r.suspended, processesKept: r.processesKept };
  }

  /** Resumes the task's suspended environment now; false when it has none or it is not suspended. */
  async resume(tenant: string, taskId: string): Promise<boolean> {
    const id = checkTaskId(taskId);
    const client = await this.#placements.locate(tenant, id);
    const r = await client.resumeTask({ task: { tenant, taskId: id } });
    this.#logger.info({ tenant, task: id, resumed: r.resumed }, 'resume task');
    return r.resumed;
  }
}
