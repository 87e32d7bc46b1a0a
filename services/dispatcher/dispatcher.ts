/**
 * The dispatcher's core, free of gRPC: lists tools, runs tool calls for a
 * tenant's task on the right executor, interrupts and ends tasks. The gRPC
 * service (dispatcher-service.ts) is a thin adapter over this.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { TerminalConfig } from '../common/config.js';
import { BerthError, InvalidArgumentError, NotFoundError, ResourceExhaustedError } from '../common/errors.js';
import { InterruptedBeforeStartError, InterruptReason, unlessAborted } from '../common/interrupts.js';
import type { Logger } from '../common/logging.js';
import type { TaskClient } from '../common/task-client.js';
import type { ExecutorClient } from '../gen/berth/v1/executor.js';
import type { ApprovalGrant, ApproveRequestInput } from './approval/flow/approval-guard.js';
import type { ApprovalService } from './approval/flow/approval-service.js';
import type { ApprovalSurface } from './approval/approval-types.js';
import type { ExecutorRouter, LossReason, Placement } from './executors/executor-router.js';
import { resultHasError, type DispatcherMetrics } from './dispatcher-metrics.js';
import { ExecutorTaskClient, type ToolCallInterrupt } from './executors/executor-task-client.js';
import { AdmittingTaskClient } from './quotas/admitting-task-client.js';
import type { QuotaLease, QuotaLedger } from './quotas/quota-ledger.js';
import type { AvailabilityReport, ToolRegistry } from './registry/registry.js';
import { getToolDefinitions, resolveToolset, type ExecuteCodeSchemaBuilder } from './registry/toolsets.js';
import { canonicalToolName } from './registry/tool-aliases.js';
import type { ToolContext } from './registry/tool-types.js';
import type { ToolCallTracing } from './tool-call-tracing.js';
import type { McpServers } from './mcp/mcp-servers.js';
import { isMcpToolName } from './mcp/mcp-names.js';
import type { TaskMcpRequest, TaskMcpResult } from '../common/task-client.js';
import { SPAN_ATTRIBUTES } from '../common/tracing/tracing.js';
import { followTaskEvents, type TaskEventsItem } from './task-events.js';
import { TaskSnapshots } from './task-snapshots.js';

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

/**
 * Longest a ListTools waits for the tenant's MCP servers' tools to be
 * learnt; a server slower than that joins later listings.
 */
export const MCP_LISTING_WAIT_MS = 20_000;

/** Event streams (TaskEvents and Session subscriptions) one tenant may have open on this dispatcher. */
export const MAX_EVENT_STREAMS_PER_TENANT = 256;

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
  /** MCP servers as tools (`mcp_servers`, `tenants[].mcp_servers`); absent: none. */
  readonly mcp?: McpServers;
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
  readonly #mcp: McpServers | undefined;
  /** Which executor holds each task's environment, to notice when it moved (its executor died). */
  readonly #placements = new Map<string, string>();
  /** Tool calls running per task (`tenant/task`), for Interrupt: from their arrival to their result. */
  readonly #running = new Map<string, Set<RunningCall>>();
  /** Open event streams per tenant. */
  readonly #eventStreams = new Map<string, number>();
  /** Snapshot, Fork, ListSnapshots, DeleteSnapshot. */
  readonly snapshots: TaskSnapshots;

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
    this.#mcp = options.mcp?.configured ? options.mcp : undefined;
    this.#mcp?.attach(this.#registry, (tenant, request, signal) => this.#discoveryRequest(tenant, request, signal));
    this.snapshots = new TaskSnapshots({
      router: this.#router,
      logger: this.#logger,
      ...(this.#quotas ? { quotas: this.#quotas } : {}),
      place: (tenant, taskId) => this.#router.place(tenant, taskId, this.#placements.get(`${tenant}/${taskId}`)),
      remember: (tenant, taskId, executorId) => this.#remember(`${tenant}/${taskId}`, executorId),
      checkTaskId: (taskId) => Dispatcher.checkTaskId(taskId),
    });
  }

  /** Whether `tenant` sees tool `name` at all (another tenant's MCP servers' tools it does not). */
  #visible(tenant: string, name: string): boolean {
    return this.#mcp === undefined || this.#mcp.visible(tenant, name);
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
  async availabilityReport(tenant?: string): Promise<AvailabilityReport> {
    const full = await this.#registry.availabilityReport();
    const mcp = this.#mcp;
    // An MCP server whose tools could not be learnt is an unavailable toolset, with what went wrong.
    const report: AvailabilityReport =
      tenant === undefined || mcp === undefined
        ? full
        : {
            available: full.available.filter((toolset) => !toolset.startsWith('mcp-') || resolveToolset(toolset).some((tool) => mcp.visible(tenant, tool))),
            unavailable: [
              ...full.unavailable,
              ...mcp.failures(tenant).map((f) => ({ name: `mcp-${f.server}`, env_vars: [], tools: [], reason: f.error })),
            ],
            unavailable_tools: full.unavailable_tools.filter((tool) => mcp.visible(tenant, tool.name)),
          };
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

  /** The backend the tenant's tasks run on (ListTools says it, so clients can say what isolates them). */
  backendFor(tenant: string): string {
    return this.#router.backendFor(tenant);
  }

  /** The tenant's tool definitions; the client's toolset choice narrows the tenant's `toolsets`, never widens them. */
  async listTools(tenant: string, enabled: readonly string[], disabled: readonly string[]) {
    // The tenant's MCP servers' tools are learnt on its first listing (see mcp/mcp-servers.ts). A slow
    // server does not hold the listing past MCP_LISTING_WAIT_MS: its discovery goes on, later listings have it.
    if (this.#mcp !== undefined) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        this.#mcp.discover(tenant, AbortSignal.timeout(5 * 60_000)),
        new Promise<void>((resolve) => (timer = setTimeout(resolve, MCP_LISTING_WAIT_MS).unref())),
      ]).finally(() => clearTimeout(timer));
    }
    const within = this.#tenantTools(tenant);
    const listing = await getToolDefinitions(
      this.#registry,
      { enabled: enabled.length > 0 ? [...enabled] : undefined, disabled: [...disabled], ...(within ? { within } : {}) },
      this.#executeCodeSchema ? { executeCode: this.#executeCodeSchema } : {},
    );
    if (this.#mcp === undefined) return listing;
    return { ...listing, tools: listing.tools.filter((tool) => this.#visible(tenant, tool.function.name)) };
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
    if (this.#mcp !== undefined && isMcpToolName(input.name) && !this.#mcp.visible(tenant, input.name)) {
      await this.#mcp.discover(tenant, options.signal);
    }
    const allowedTools = this.#tenantTools(tenant);
    if ((allowedTools !== undefined && !allowedTools.has(input.name)) || !this.#visible(tenant, input.name)) {
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
    // From here an Interrupt of the task reaches this call, whatever it is waiting for.
    const running = this.#enrol(key);
    try {
      return await this.#placedCall(tenant, taskId, input, options, { key, started, running, allowedTools });
    } finally {
      running.leave();
    }
  }

  async #placedCall(
    tenant: string,
    taskId: string,
    input: CallToolInput,
    options: CallOptions,
    { key, started, running, allowedTools }: { key: string; started: number; running: RunningCall; allowedTools: ReadonlySet<string> | undefined },
  ): Promise<string> {
    let placement = await this.#router.place(tenant, taskId, this.#placements.get(key));
    const log = this.#logger.child({ tenant, task: taskId, tool: input.name, backend: placement.backend });
    this.#tracing?.annotate({ [SPAN_ATTRIBUTES.backend]: placement.backend });
    const quotas = this.#quotas;
    const leases = new Leases();
    if (quotas) leases.push(quotas.beginCall(tenant));
    try {
      for (let attempt = 0; ; attempt++) {
        // After the one lost-environment error the task is placed afresh (its new executor may not be known yet).
        if (placement.lost) this.#placements.delete(key);
        else this.#remember(key, placement.executorId);
        try {
          return await this.#runCall(tenant, taskId, input, options, { ...placement, log, leases, started, allowedTools, interrupt: running });
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
      leases.releaseAll();
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
      leases: Leases;
      started: number;
      allowedTools: ReadonlySet<string> | undefined;
      interrupt: ToolCallInterrupt;
    },
  ): Promise<string> {
    const { client, executorId, lost, log, leases, started, allowedTools, interrupt } = call;
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
      let task: TaskClient = new ExecutorTaskClient(client, { tenant, taskId }, options.signal, interrupt);
      const quotas = this.#quotas;
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
    const id = Dispatcher.checkTaskId(taskId);
    const running = [...(this.#running.get(`${tenant}/${id}`) ?? [])].filter((c) => !c.signal.aborted);
    for (const call of running) call.abort();
    const client = await this.#locate(tenant, id);
    const r = await client.interruptTask({ task: { tenant, taskId: id }, callIds: running.map((c) => c.callId) });
    const interrupted = Math.max(running.length, r.interrupted);
    this.#logger.info({ tenant, task: id, interrupted }, 'interrupt');
    return interrupted;
  }

  /** Registers a tool call of the task `key` for Interrupt; `leave` once it has its result. */
  #enrol(key: string): RunningCall {
    const controller = new AbortController();
    let calls = this.#running.get(key);
    if (!calls) {
      calls = new Set();
      this.#running.set(key, calls);
    }
    const set = calls;
    const call: RunningCall = {
      callId: randomUUID(),
      signal: controller.signal,
      abort: () => controller.abort(new InterruptReason()),
      leave: () => {
        set.delete(call);
        if (set.size === 0 && this.#running.get(key) === set) this.#running.delete(key);
      },
    };
    set.add(call);
    return call;
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
    const id = Dispatcher.checkTaskId(taskId);
    const open = this.#eventStreams.get(tenant) ?? 0;
    if (open >= MAX_EVENT_STREAMS_PER_TENANT) {
      throw new ResourceExhaustedError(
        `too many event streams open (${MAX_EVENT_STREAMS_PER_TENANT} per tenant); close some, or follow several tasks on one Session`,
      );
    }
    this.#eventStreams.set(tenant, open + 1);
    try {
      const client = await this.#locate(tenant, id);
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

  /**
   * Suspends the task's environment on its executor (docs/suspend.md). A
   * task with no environment, another tenant's included, answers
   * `suspended: false`, as EndTask answers `released: false`.
   */
  async suspend(tenant: string, taskId: string): Promise<{ suspended: boolean; processesKept: boolean }> {
    const id = Dispatcher.checkTaskId(taskId);
    const client = await this.#locate(tenant, id);
    const r = await client.suspendTask({ task: { tenant, taskId: id } });
    this.#logger.info({ tenant, task: id, suspended: r.suspended, processesKept: r.processesKept }, 'suspend task');
    return { suspended: r.suspended, processesKept: r.processesKept };
  }

  /** Resumes the task's suspended environment now; false when it has none or it is not suspended. */
  async resume(tenant: string, taskId: string): Promise<boolean> {
    const id = Dispatcher.checkTaskId(taskId);
    const client = await this.#locate(tenant, id);
    const r = await client.resumeTask({ task: { tenant, taskId: id } });
    this.#logger.info({ tenant, task: id, resumed: r.resumed }, 'resume task');
    return r.resumed;
  }
}

/** A tool call in flight, as Interrupt sees it. */
interface RunningCall extends ToolCallInterrupt {
  abort(): void;
  leave(): void;
}

/** The quota leases of one call; one that arrives after the call ended (a late admission) is released at once. */
class Leases {
  readonly #held: QuotaLease[] = [];
  #ended = false;

  push(lease: QuotaLease): void {
    if (this.#ended) lease.release();
    else this.#held.push(lease);
  }

  releaseAll(): void {
    this.#ended = true;
    for (const lease of this.#held.splice(0)) lease.release();
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
