/**
 * The TypeScript client of a Berth dispatcher: `new BerthClient(address,
 * options)`, then `client.task(id)` for typed tool calls, the Session stream,
 * interrupts and ending the task.
 */
import { Metadata, createChannel, createClient, type CallOptions, type Channel } from 'nice-grpc';
import { DispatcherDefinition, type DispatcherClient } from '../gen/berth/v1/dispatcher.js';
import { channelCredentials, type TlsOptions } from './credentials.js';
import { BerthError, toBerthError } from './errors.js';
import { withRetry, type RetryOptions } from './retry.js';
import { BerthSession, SessionStream, parseResult, type ApprovalChoice } from './session.js';
import { ToolMethods } from './generated/tools.js';
import { BerthSnapshots } from './snapshots.js';
import { TaskEventStream, type TaskEventsOptions } from './task-events.js';
import type { ToolCallOptions } from './tool-results.js';

/** Metadata key telling the server nobody will answer approval requests (then `approvals.non_interactive` decides). */
export const INTERACTIVE_METADATA_KEY = 'berth-interactive';

/** Largest message either way; matches the server's limit. */
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

/**
 * Tools whose calls only read, so a call retried after UNAVAILABLE cannot
 * do anything twice. Everything else (terminal, writes, patches, process
 * input, scripts) is sent once.
 */
export const READ_ONLY_TOOLS: ReadonlySet<string> = new Set(['read_file', 'search_files']);

/** Options of {@link BerthClient}. */
export interface BerthClientOptions {
  /** Sent as `authorization: Bearer <key>`; selects the tenant. */
  readonly apiKey?: string;
  /**
   * TLS towards the dispatcher: `true` for the system's roots, or CA /
   * client certificate / key as PEM text or file paths. Plaintext when absent.
   */
  readonly tls?: TlsOptions | boolean;
  /**
   * False tells the server nobody answers approval requests for this
   * client's calls (metadata `berth-interactive: false`): the server's
   * `approvals.non_interactive` rule then approves or denies. Default true.
   */
  readonly interactive?: boolean;
  /** Retries of idempotent calls on UNAVAILABLE; `{ maxAttempts: 1 }` turns them off. */
  readonly retry?: RetryOptions;
  /** Extra metadata sent on every call (e.g. trace context). */
  readonly metadata?: Readonly<Record<string, string>>;
  /** Extra grpc-js channel options. */
  readonly channelOptions?: Readonly<Record<string, string | number>>;
}

/** Options of {@link BerthClient.listTools}. */
export interface ListToolsOptions {
  /** Toolsets to include (all when empty), as `berth tools --toolsets`. */
  readonly toolsets?: readonly string[];
  /** Toolsets to subtract, as `berth tools --disable`. */
  readonly disable?: readonly string[];
  /** Also ask which toolsets are unavailable and why, as `berth tools --explain`. */
  readonly explain?: boolean;
  readonly signal?: AbortSignal;
}

/** Which toolsets the server can offer, and why the others are missing (`listTools({ explain: true })`). */
export interface ToolAvailability {
  /** Toolsets with at least one available tool. */
  readonly available: string[];
  /** Toolsets with none, as upstream Hermes' check_tool_availability() lists them, plus the reason. */
  readonly unavailable: { name: string; env_vars: string[]; tools: string[]; reason: string }[];
  /** Every unavailable tool, also those of available toolsets. */
  readonly unavailable_tools: { name: string; toolset: string; env_vars: string[]; reason: string }[];
}

/** An OpenAI tool object, as ListTools returns them. */
export interface ToolDefinition {
  readonly type: 'function';
  readonly function: {
    readonly name: string;
    readonly description: string;
    /** JSON schema of the arguments. */
    readonly parameters: Record<string, unknown>;
  };
}

/** What {@link BerthClient.listTools} returns. */
export interface ToolListing {
  readonly tools: ToolDefinition[];
  /** Enabled toolset names the server does not know (reported, not fatal). */
  readonly unknownToolsets: string[];
  /** With `explain`: availability per toolset. */
  readonly availability?: ToolAvailability;
  /** The backend the caller's tasks run on (`local`, `docker`, ...); '' from a server that predates it. */
  readonly backend: string;
}

/** Options of {@link BerthClient.task}. */
export interface TaskOptions {
  /** Scope of approvals given "for this session"; empty scopes them to the task. */
  readonly sessionId?: string;
}

/**
 * A connection to one Berth dispatcher. Cheap to keep, one per process is
 * plenty; close it (or `using`) to release the channel.
 *
 * ```ts
 * const berth = new BerthClient('127.0.0.1:7700', { apiKey });
 * const task = berth.task('t1');
 * const r = await task.terminal({ command: 'pwd' });
 * ```
 */
export class BerthClient implements Disposable {
  /** The generated nice-grpc client, for calls this class does not wrap. */
  readonly rpc: DispatcherClient;
  readonly address: string;
  readonly #channel: Channel;
  readonly #options: BerthClientOptions;

  constructor(address: string, options: BerthClientOptions = {}) {
    this.address = address;
    this.#options = options;
    this.#channel = createChannel(address, channelCredentials(options.tls), {
      'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
      'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
      ...(typeof options.tls === 'object' && options.tls.serverName !== undefined
        ? { 'grpc.ssl_target_name_override': options.tls.serverName, 'grpc.default_authority': options.tls.serverName }
        : {}),
      ...options.channelOptions,
    });
    this.rpc = createClient(DispatcherDefinition, this.#channel);
  }

  /** Metadata of every call: API key, interactivity, extras. */
  metadata(extra?: { readonly interactive?: boolean }): Metadata {
    const metadata = new Metadata();
    for (const [key, value] of Object.entries(this.#options.metadata ?? {})) metadata.set(key, value);
    if (this.#options.apiKey) metadata.set('authorization', `Bearer ${this.#options.apiKey}`);
    if ((extra?.interactive ?? this.#options.interactive) === false) metadata.set(INTERACTIVE_METADATA_KEY, 'false');
    return metadata;
  }

  /** @internal Call options with metadata, signal and deadline. */
  callOptions(options: { readonly signal?: AbortSignal; readonly timeoutMs?: number } = {}): CallOptions {
    return {
      metadata: this.metadata(),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      ...(options.timeoutMs === undefined ? {} : { deadline: new Date(Date.now() + options.timeoutMs) }),
    };
  }

  /** @internal Runs `call` with the client's retry policy (idempotent calls only). */
  retrying<T>(method: string, signal: AbortSignal | undefined, call: () => Promise<T>): Promise<T> {
    return withRetry(method, this.#options.retry ?? {}, signal, async () => {
      try {
        return await call();
      } catch (err) {
        throw toBerthError(err);
      }
    });
  }

  /**
   * The tools the server offers, as OpenAI tool objects (names, descriptions,
   * JSON schemas). Retried on UNAVAILABLE.
   */
  async listTools(options: ListToolsOptions = {}): Promise<ToolListing> {
    const response = await this.retrying('ListTools', options.signal, () =>
      this.rpc.listTools(
        {
          enabledToolsets: [...(options.toolsets ?? [])],
          disabledToolsets: [...(options.disable ?? [])],
          explain: options.explain ?? false,
        },
        this.callOptions(options),
      ),
    );
    const listing = {
      tools: JSON.parse(response.toolsJson) as ToolDefinition[],
      unknownToolsets: response.unknownToolsets,
      backend: response.backend,
    };
    // A server without explain support answers ''.
    return response.availabilityJson === ''
      ? listing
      : { ...listing, availability: JSON.parse(response.availabilityJson) as ToolAvailability };
  }

  /** A handle on one task: its environment (cwd, variables, processes, files) lives on the server. */
  task(taskId: string, options: TaskOptions = {}): BerthTask {
    return new BerthTask(this, taskId, options.sessionId ?? '');
  }

  /**
   * The background-process events of a task (notify-on-complete
   * completions, watch-pattern matches, heartbeats), for clients that use
   * unary calls: every event the server still keeps after `after` (all of
   * them by default), then new ones as they happen. Resumes by itself after
   * UNAVAILABLE, from the last id it delivered.
   *
   * ```ts
   * for await (const ev of berth.events('t1', { after: lastSeen })) console.log(ev.text);
   * ```
   */
  events(taskId: string, options: TaskEventsOptions = {}): TaskEventStream {
    return new TaskEventStream(this.rpc, taskId, () => this.callOptions(), options);
  }

  /** Snapshots and forks of this client's tasks (docs/lifecycle.md). */
  get snapshots(): BerthSnapshots<BerthTask> {
    return new BerthSnapshots(this);
  }

  /** Closes the channel; calls in flight fail. */
  close(): void {
    this.#channel.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/**
 * One task of a {@link BerthClient}: a typed method per built-in tool
 * (generated from the tool schemas), {@link BerthTask.call} for any tool by
 * name, the Session stream, Interrupt, Approve and EndTask.
 */
export class BerthTask extends ToolMethods {
  readonly client: BerthClient;
  readonly taskId: string;
  readonly sessionId: string;

  /** @internal Created by {@link BerthClient.task}. */
  constructor(client: BerthClient, taskId: string, sessionId: string) {
    super();
    this.client = client;
    this.taskId = taskId;
    this.sessionId = sessionId;
  }

  /**
   * Runs one tool call (unary CallTool) and resolves with the result string
   * as the model would see it. Calls of {@link READ_ONLY_TOOLS} are retried
   * on UNAVAILABLE; all others are sent once. A command that needs approval
   * comes back as `status: "pending_approval"` with an `approval_id` for
   * {@link BerthTask.approve}; use {@link BerthTask.session} to be asked instead.
   *
   * @throws {@link BerthError} when the call fails as a call.
   */
  async callRaw(name: string, args: Record<string, unknown> = {}, options: ToolCallOptions = {}): Promise<string> {
    const send = async () =>
      (
        await this.client.rpc.callTool(
          { name, argumentsJson: JSON.stringify(args), taskId: this.taskId, sessionId: options.sessionId ?? this.sessionId },
          this.client.callOptions(options),
        )
      ).resultJson;
    if (READ_ONLY_TOOLS.has(name)) return this.client.retrying(`CallTool/${name}`, options.signal, send);
    try {
      return await send();
    } catch (err) {
      throw toBerthError(err);
    }
  }

  /** Like {@link BerthTask.callRaw}, with the result parsed from JSON. */
  override async call<T = unknown>(name: string, args: Record<string, unknown> = {}, options: ToolCallOptions = {}): Promise<T> {
    return parseResult(await this.callRaw(name, args, options)) as T;
  }

  /**
   * Opens a Session stream for this task: live output, approval requests to
   * answer, several calls at once. `signal` cancels the whole stream (the
   * server stops what still runs on it). `interactive: false` tells the server
   * nobody answers approvals on it.
   */
  session(options: { readonly signal?: AbortSignal; readonly interactive?: boolean } = {}): BerthSession {
    const stream = new SessionStream(this.client.rpc, {
      metadata: this.client.metadata(options.interactive === undefined ? {} : { interactive: options.interactive }),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    });
    return new BerthSession(stream, this.taskId, this.sessionId);
  }

  /** This task's background-process events: {@link BerthClient.events}. */
  events(options: TaskEventsOptions = {}): TaskEventStream {
    return this.client.events(this.taskId, options);
  }

  /**
   * Answers a call that a unary {@link BerthTask.call} left pending
   * (`approval_id` in its result) and resolves with that call's result string.
   */
  async approve(approvalId: string, choice: ApprovalChoice, options: ToolCallOptions = {}): Promise<string> {
    try {
      const response = await this.client.rpc.approve(
        { taskId: this.taskId, sessionId: options.sessionId ?? this.sessionId, approvalId, choice },
        this.client.callOptions(options),
      );
      return response.resultJson;
    } catch (err) {
      throw toBerthError(err);
    }
  }

  /** Stops the task's running foreground work; resolves with how many calls were interrupted. Sent once. */
  async interrupt(options: { readonly signal?: AbortSignal } = {}): Promise<number> {
    try {
      return (await this.client.rpc.interrupt({ taskId: this.taskId }, this.client.callOptions(options))).interrupted;
    } catch (err) {
      throw toBerthError(err);
    }
  }

  /**
   * Releases the task's environment: processes, container, files it owns.
   * Resolves with whether there was one. Retried on UNAVAILABLE: ending an
   * ended task is harmless.
   */
  async end(options: { readonly signal?: AbortSignal } = {}): Promise<boolean> {
    const response = await this.client.retrying('EndTask', options.signal, () =>
      this.client.rpc.endTask({ taskId: this.taskId }, this.client.callOptions(options)),
    );
    return response.released;
  }

  /**
   * Suspends the task's environment (docs/suspend.md): no CPU, memory freed
   * as far as the backend can; files and shell state are kept and the next
   * call resumes it. `suspended` is false when the task has no environment;
   * `processesKept` false means its background processes ended. Rejects with
   * FAILED_PRECONDITION while a call runs on the task, or on a backend that
   * cannot suspend. Retried on UNAVAILABLE.
   */
  async suspend(options: { readonly signal?: AbortSignal } = {}): Promise<{ suspended: boolean; processesKept: boolean }> {
    const r = await this.client.retrying('Suspend', options.signal, () =>
      this.client.rpc.suspend({ taskId: this.taskId }, this.client.callOptions(options)),
    );
    return { suspended: r.suspended, processesKept: r.processesKept };
  }

  /** Resumes the task's suspended environment now; false when it has none or it was not suspended. Retried on UNAVAILABLE. */
  async resume(options: { readonly signal?: AbortSignal } = {}): Promise<boolean> {
    const r = await this.client.retrying('Resume', options.signal, () =>
      this.client.rpc.resume({ taskId: this.taskId }, this.client.callOptions(options)),
    );
    return r.resumed;
  }
}

export { BerthError };
