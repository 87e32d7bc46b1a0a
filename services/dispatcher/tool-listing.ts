/**
 * What a tenant sees of the tools: ListTools' definitions and `berth tools
 * --explain`'s availability report, narrowed to the tenant's `toolsets` and
 * to its own MCP servers' tools.
 */
import type { McpServers } from './mcp/mcp-servers.js';
import type { AvailabilityReport, ToolRegistry } from './registry/registry.js';
import { getToolDefinitions, resolveToolset, type ExecuteCodeSchemaBuilder } from './registry/toolsets.js';
import type { OpenAiTool } from './registry/tool-types.js';

/**
 * Longest a ListTools waits for the tenant's MCP servers' tools to be
 * learnt; a server slower than that joins later listings.
 */
export const MCP_LISTING_WAIT_MS = 20_000;

/** A tenant's tool definitions, and the toolsets it asked for that do not exist. */
export interface ListedTools {
  tools: OpenAiTool[];
  unknownToolsets: string[];
}

export interface ToolListingOptions {
  readonly registry: ToolRegistry;
  /** Rewrites the execute_code schema for the sandbox tools a listing keeps (configured limits). */
  readonly executeCodeSchema: ExecuteCodeSchemaBuilder | undefined;
  /** The tools a tenant may list and call (its `toolsets`); undefined: every tool. */
  readonly tenantTools: (tenant: string) => ReadonlySet<string> | undefined;
  /** Configured MCP servers; undefined: none. */
  readonly mcp: McpServers | undefined;
}

export class ToolListing {
  readonly #o: ToolListingOptions;

  constructor(options: ToolListingOptions) {
    this.#o = options;
  }

  /**
   * Which toolsets are available and why the others are not (`berth tools
   * --explain`); for a tenant with `toolsets`, only about its own tools.
   */
  async availabilityReport(tenant?: string): Promise<AvailabilityReport> {
    const full = await this.#o.registry.availabilityReport();
    const mcp = this.#o.mcp;
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
    const scope = tenant === undefined ? undefined : this.#o.tenantTools(tenant);
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
  async listTools(tenant: string, enabled: readonly string[], disabled: readonly string[]): Promise<ListedTools> {
    const mcp = this.#o.mcp;
    // The tenant's MCP servers' tools are learnt on its first listing (see mcp/mcp-servers.ts). A slow
    // server does not hold the listing past MCP_LISTING_WAIT_MS: its discovery goes on, later listings have it.
    if (mcp !== undefined) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        mcp.discover(tenant, AbortSignal.timeout(5 * 60_000)),
        new Promise<void>((resolve) => (timer = setTimeout(resolve, MCP_LISTING_WAIT_MS).unref())),
      ]).finally(() => clearTimeout(timer));
    }
    const within = this.#o.tenantTools(tenant);
    const listing = await getToolDefinitions(
      this.#o.registry,
      { enabled: enabled.length > 0 ? [...enabled] : undefined, disabled: [...disabled], ...(within ? { within } : {}) },
      this.#o.executeCodeSchema ? { executeCode: this.#o.executeCodeSchema } : {},
    );
    if (mcp === undefined) return listing;
    return { ...listing, tools: listing.tools.filter((tool) => mcp.visible(tenant, tool.function.name)) };
  }
}
