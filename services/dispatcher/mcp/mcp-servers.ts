/**
 * MCP servers as tools (`mcp_servers:` and `tenants[].mcp_servers`).
 *
 * - Naming: tool `t` of server `s` is `mcp__s__t` in toolset `mcp-s`
 *   (mcp-names.ts), registered in the one registry, so every call takes the
 *   registry's path (coercion, hooks, error shaping, result cap) and the
 *   dispatcher's (quotas, approvals, tracing, metrics).
 * - Visibility: a top-level server's tools are every tenant's; a tenant's
 *   own server's tools exist for that tenant only (listing and calling).
 *   Server names are unique across the whole config, so a tool name has one
 *   owner.
 * - Discovery (when the dispatcher learns a server's tools): lazily, the
 *   first time a tenant that sees the server lists its tools or calls one of
 *   its tools, by a tools/list in a throwaway discovery task of that tenant
 *   (a stdio server runs in a sandbox, never on the dispatcher or executor
 *   host). The list is kept for the dispatcher's lifetime; a failed
 *   discovery is retried after {@link DISCOVERY_RETRY_MS}, and is logged
 *   with what went wrong meanwhile. A server's tools then run in each
 *   calling task's own environment.
 * - Calls: approval first for a tool without `readOnlyHint: true` (as
 *   upstream); then the task's executor runs it; the result is rendered as
 *   upstream renders it and redacted like terminal output.
 */
import { ConfigError, type BerthConfig, type McpServerConfig } from '../../common/config.js';
import type { Logger } from '../../common/logging.js';
import type { TaskMcpRequest, TaskMcpResult } from '../../common/task-client.js';
import { requestApproval } from '../approval/flow/guard-hook.js';
import { redactSensitiveText } from '../redaction/redact.js';
import type { ToolRegistry } from '../registry/registry.js';
import { registerToolset } from '../registry/toolsets.js';
import type { ToolContext } from '../registry/tool-types.js';
import { isMcpToolName, mcpToolName, mcpToolsetName, normalizeMcpInputSchema, redactMcpError, sanitizeMcpNameComponent } from './mcp-names.js';

/** How long a failed discovery is remembered before the next listing or call tries again (upstream's base cooldown). */
export const DISCOVERY_RETRY_MS = 30_000;
/** Tools offered per server at most: what a server lists is hostile input, and every tool costs the model context. */
export const MAX_TOOLS_PER_SERVER = 256;
/** Extra time a discovery gets beyond the server's connect_timeout, for the discovery task's environment to come up. */
const DISCOVERY_SLACK_MS = 60_000;

interface ServerEntry {
  readonly name: string;
  readonly spec: McpServerConfig;
  readonly json: string;
  /** The tenant that owns it; undefined: every tenant. */
  readonly owner: string | undefined;
}

interface DiscoveryState {
  tools?: string[];
  failedAtMs?: number;
  error?: string;
  running?: Promise<void>;
}

/** Runs one MCP request for `tenant` in a throwaway task (the dispatcher places and ends it). */
export type DiscoveryRunner = (tenant: string, request: TaskMcpRequest, signal: AbortSignal) => Promise<TaskMcpResult>;

interface McpToolInfo {
  readonly name: string;
  readonly description?: string;
  readonly inputSchema?: unknown;
  readonly annotations?: { readonly readOnlyHint?: boolean };
}

export class McpServers {
  readonly #servers = new Map<string, ServerEntry>();
  /** Registry tool name → server name. */
  readonly #toolServer = new Map<string, string>();
  /** Per tenant and server (`tenant\0server`): a server's tools are a tenant's once its discovery for that tenant succeeded. */
  readonly #discovery = new Map<string, DiscoveryState>();
  readonly #redact: boolean;
  readonly #logger: Logger;
  readonly #now: () => number;
  #registry: ToolRegistry | undefined;
  #run: DiscoveryRunner | undefined;

  /** Validates the config's servers and registers their toolsets (empty until discovered), so tenants' `toolsets` may name them. */
  constructor(config: Pick<BerthConfig, 'mcp_servers' | 'tenants' | 'security'>, logger: Logger, now: () => number = Date.now) {
    this.#logger = logger.child({ component: 'mcp' });
    this.#redact = config.security.redact_secrets;
    this.#now = now;
    const problems: string[] = [];
    const bySanitised = new Map<string, string>();
    const add = (name: string, spec: McpServerConfig, owner: string | undefined, key: string) => {
      const clash = this.#servers.get(name);
      if (clash !== undefined) {
        problems.push(`${key}: the name '${name}' is already used by ${clash.owner === undefined ? 'mcp_servers' : `tenants[${clash.owner}].mcp_servers`}; MCP server names must differ across the whole config`);
        return;
      }
      const sanitised = sanitizeMcpNameComponent(name);
      const other = bySanitised.get(sanitised);
      if (other !== undefined) {
        problems.push(`${key}: '${name}' and '${other}' give the same tool prefix mcp__${sanitised}__; rename one`);
        return;
      }
      bySanitised.set(sanitised, name);
      this.#servers.set(name, { name, spec, json: JSON.stringify(spec), owner });
    };
    for (const [name, spec] of Object.entries(config.mcp_servers)) add(name, spec, undefined, `mcp_servers.${name}`);
    for (const t of config.tenants) {
      for (const [name, spec] of Object.entries(t.mcp_servers ?? {})) add(name, spec, t.id, `tenants[${t.id}].mcp_servers.${name}`);
    }
    if (problems.length > 0) throw new ConfigError(`invalid config:\n${problems.map((p) => `✖ ${p}`).join('\n')}`);
    for (const server of this.#servers.values()) {
      registerToolset(mcpToolsetName(server.name), { description: this.#toolsetDescription(server), tools: [] });
    }
  }

  get configured(): boolean {
    return this.#servers.size > 0;
  }

  /** Connects the registry the tools go into and the way discoveries run. */
  attach(registry: ToolRegistry, run: DiscoveryRunner): void {
    this.#registry = registry;
    this.#run = run;
  }

  /**
   * Whether `tenant` may see tool `name`: every non-MCP tool, and the MCP
   * tools of servers it sees (its own and the top-level ones) whose
   * discovery succeeded for it (an HTTP server its egress policy refuses
   * stays out of its list).
   */
  visible(tenant: string, name: string): boolean {
    if (!isMcpToolName(name)) return true;
    const server = this.#toolServer.get(name);
    const entry = server === undefined ? undefined : this.#servers.get(server);
    if (entry === undefined || !entry.spec.enabled || (entry.owner !== undefined && entry.owner !== tenant)) return false;
    return this.#discovery.get(discoveryKey(tenant, entry.name))?.tools?.includes(name) === true;
  }

  /** The MCP tools `tenant` sees now. */
  toolsOf(tenant: string): string[] {
    return [...this.#toolServer.keys()].filter((name) => this.visible(tenant, name));
  }

  /** Servers whose discovery failed last, with why, for `tenant` (logs, explain). */
  failures(tenant: string): Array<{ server: string; error: string }> {
    return this.#serversOf(tenant).flatMap((s) => {
      const d = this.#discovery.get(discoveryKey(tenant, s.name));
      return d?.error !== undefined && d.tools === undefined ? [{ server: s.name, error: d.error }] : [];
    });
  }

  /**
   * Learns the tools of every server `tenant` sees that is not known yet
   * (each discovery at most once at a time; a failed one again after
   * {@link DISCOVERY_RETRY_MS}). Never throws: a failure is logged and
   * leaves that server without tools; other servers are not held up.
   */
  async discover(tenant: string, signal: AbortSignal): Promise<void> {
    const pending = this.#serversOf(tenant).map((server) => this.#discoverOne(tenant, server, signal));
    await Promise.all(pending);
  }

  #serversOf(tenant: string): ServerEntry[] {
    return [...this.#servers.values()].filter((s) => s.spec.enabled && (s.owner === undefined || s.owner === tenant));
  }

  #discoverOne(tenant: string, server: ServerEntry, signal: AbortSignal): Promise<void> {
    const key = discoveryKey(tenant, server.name);
    let state = this.#discovery.get(key);
    if (state === undefined) {
      state = {};
      this.#discovery.set(key, state);
    }
    if (state.tools !== undefined) return Promise.resolve();
    if (state.running !== undefined) return state.running;
    if (state.failedAtMs !== undefined && this.#now() - state.failedAtMs < DISCOVERY_RETRY_MS) return Promise.resolve();
    const run = this.#run;
    if (run === undefined) return Promise.resolve();
    const current = state;
    const timeout = AbortSignal.timeout(server.spec.connect_timeout * 1000 + DISCOVERY_SLACK_MS);
    current.running = (async () => {
      let outcome: TaskMcpResult;
      try {
        outcome = await run(tenant, { serverName: server.name, serverJson: server.json, method: 'list_tools' }, AbortSignal.any([signal, timeout]));
      } catch (err) {
        outcome = { error: err instanceof Error ? err.message : String(err) };
      }
      if ('error' in outcome) {
        current.failedAtMs = this.#now();
        current.error = outcome.error;
        this.#logger.warn({ mcpServer: server.name, tenant, error: outcome.error }, `MCP server '${server.name}': tool discovery failed: ${outcome.error}`);
        return;
      }
      current.tools = this.#register(server, outcome.resultJson);
      current.error = undefined;
      this.#logger.info({ mcpServer: server.name, tools: current.tools }, 'MCP server tools registered');
    })().finally(() => {
      current.running = undefined;
    });
    return current.running;
  }

  /** Registers a server's listed tools; returns their registry names. */
  #register(server: ServerEntry, resultJson: string): string[] {
    const registry = this.#registry!;
    let listed: McpToolInfo[] = [];
    try {
      const parsed = JSON.parse(resultJson) as { tools?: unknown };
      listed = Array.isArray(parsed.tools) ? (parsed.tools as McpToolInfo[]).filter((t) => typeof t?.name === 'string') : [];
    } catch {
      this.#logger.warn({ mcpServer: server.name }, 'MCP server sent a tool list that is not JSON');
    }
    const { include, exclude } = server.spec.tools;
    const names: string[] = [];
    for (const tool of listed) {
      if (names.length >= MAX_TOOLS_PER_SERVER) {
        this.#logger.warn({ mcpServer: server.name, listed: listed.length }, `MCP server '${server.name}' lists more than ${MAX_TOOLS_PER_SERVER} tools; the rest are not offered (narrow them with tools.include)`);
        break;
      }
      if (include.length > 0 ? !include.includes(tool.name) : exclude.includes(tool.name)) continue;
      const name = mcpToolName(server.name, tool.name);
      if (names.includes(name)) {
        this.#logger.warn({ mcpServer: server.name, tool: tool.name }, `MCP tool '${tool.name}' sanitises to ${name}, already taken by another tool of the server; skipped`);
        continue;
      }
      const description = typeof tool.description === 'string' && tool.description !== '' ? tool.description : `MCP tool ${tool.name} from ${server.name}`;
      const readOnly = tool.annotations?.readOnlyHint === true;
      const accepted = registry.register({
        name,
        toolset: mcpToolsetName(server.name),
        schema: { name, description, parameters: normalizeMcpInputSchema(tool.inputSchema) },
        handler: (args, context) => this.#call(server, tool.name, readOnly, args, context),
      });
      if (!accepted) continue;
      names.push(name);
      this.#toolServer.set(name, server.name);
    }
    registerToolset(mcpToolsetName(server.name), { description: this.#toolsetDescription(server), tools: names });
    return names;
  }

  #toolsetDescription(server: ServerEntry): string {
    return `Tools of MCP server ${server.name}`;
  }

  async #call(server: ServerEntry, tool: string, readOnly: boolean, args: Record<string, unknown>, context: ToolContext): Promise<string> {
    if (!readOnly) {
      const verdict = await requestApproval(context, {
        tool: mcpToolName(server.name, tool),
        command: `MCP ${server.name}.${tool}\narguments: ${JSON.stringify(args)}`,
        patternKey: `mcp ${server.name}.${tool}`,
        description: `MCP tool '${tool}' on server '${server.name}' can modify external state because readOnlyHint=true was not supplied.`,
        detect: false,
      });
      if (!verdict.allowed) return verdict.result;
    }
    if (context.task.mcpRequest === undefined) {
      return JSON.stringify({ error: `MCP server '${server.name}' is not connected: this executor does not run MCP servers` });
    }
    const outcome = await context.task.mcpRequest({
      serverName: server.name,
      serverJson: server.json,
      method: 'call_tool',
      tool,
      argumentsJson: JSON.stringify(args),
    });
    if ('error' in outcome) return JSON.stringify({ error: redactMcpError(outcome.error) });
    return this.#render(server.name, outcome.resultJson);
  }

  /** A CallToolResult as upstream's handler returns it: `{"result": text}`, structured content when there is no text, `{"error"}` when the tool failed. */
  #render(server: string, resultJson: string): string {
    let result: { content?: unknown; isError?: unknown; structuredContent?: unknown };
    try {
      result = JSON.parse(resultJson) as typeof result;
    } catch {
      return JSON.stringify({ error: `MCP server '${server}' sent a result that is not JSON` });
    }
    const parts: string[] = [];
    let usable = 0;
    for (const block of Array.isArray(result.content) ? (result.content as Array<Record<string, unknown>>) : []) {
      if (block?.type === 'text' && typeof block.text === 'string') {
        parts.push(block.text);
        if (block.text.trim() !== '') usable += 1;
      } else {
        parts.push(`[${String(block?.type ?? 'unknown')} content from MCP server '${server}' not shown: Berth passes text only]`);
      }
    }
    const text = this.#redact ? redactSensitiveText(parts.join('\n')) : parts.join('\n');
    if (result.isError === true) return JSON.stringify({ error: redactMcpError(text || 'MCP tool returned an error') });
    const structured = result.structuredContent;
    if (structured === undefined || structured === null || usable > 0) return JSON.stringify({ result: text });
    const shown = this.#redact ? redactStructured(structured) : structured;
    return JSON.stringify(text ? { result: text, structuredContent: shown } : { result: shown });
  }
}

function discoveryKey(tenant: string, server: string): string {
  return `${tenant}\0${server}`;
}

/** Structured content with secrets masked as in terminal output; if masking broke the JSON, the masked text. */
function redactStructured(value: unknown): unknown {
  const masked = redactSensitiveText(JSON.stringify(value), { codeFile: true });
  try {
    return JSON.parse(masked) as unknown;
  } catch {
    return masked;
  }
}
