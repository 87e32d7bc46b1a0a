/**
 * Toolsets: named groups of tools that clients enable or disable instead of
 * listing tool names. The table mirrors the Hermes agent's names so existing
 * client configuration keeps working; plugins and MCP servers add their own
 * toolsets at runtime.
 */
import { InvalidArgumentError } from '../../common/errors.js';
import type { ToolRegistry } from './registry.js';
import { canonicalToolNames } from './tool-aliases.js';
import type { OpenAiTool, ToolSchema } from './tool-types.js';

/** A toolset as given to `registerToolset`. */
export interface ToolsetDefinition {
  readonly description: string;
  readonly tools: readonly string[];
  /** Other toolsets whose tools this one also contains. */
  readonly includes?: readonly string[];
  /** Other names that resolve to this toolset. */
  readonly aliases?: readonly string[];
}

/** A toolset as listed: includes resolved into `tools`. */
export interface ToolsetInfo {
  readonly name: string;
  readonly description: string;
  /** Every tool the toolset resolves to, includes expanded, sorted. */
  readonly tools: string[];
  readonly includes: string[];
  readonly aliases: string[];
  readonly builtin: boolean;
}

interface StoredToolset {
  readonly description: string;
  readonly tools: readonly string[];
  readonly includes: readonly string[];
  readonly aliases: readonly string[];
}

const BROWSER_TOOLS = [
  'browser_navigate',
  'browser_snapshot',
  'browser_click',
  'browser_type',
  'browser_scroll',
  'browser_back',
  'browser_press',
  'browser_close',
  'browser_get_images',
  'browser_vision',
] as const;

const SKILLS_TOOLS = ['skills_list', 'skill_view', 'skill_manage'] as const;

const LEAF_TOOLSETS: Readonly<Record<string, { description: string; tools: readonly string[] }>> = {
  terminal: { description: 'Run shell commands and manage background processes', tools: ['terminal', 'process_manage'] },
  file: { description: 'Read, write, patch and search files', tools: ['read_file', 'write_file', 'patch', 'search_files'] },
  code_execution: { description: 'Run Python scripts that call other tools', tools: ['execute_code'] },
  web: { description: 'Search the web and extract page content', tools: ['web_search', 'web_extract'] },
  browser: { description: 'Drive a web browser: navigate, read, click, type', tools: BROWSER_TOOLS },
  vision: { description: 'Analyse images', tools: ['vision_analyze'] },
  image_gen: { description: 'Generate images from text', tools: ['image_generate'] },
  skills: { description: 'List, read and manage skills', tools: SKILLS_TOOLS },
  cronjob: { description: 'Schedule recurring jobs', tools: ['cronjob_manage'] },
  tts: { description: 'Turn text into speech', tools: ['text_to_speech'] },
  todo: { description: 'Task list for the current session (agent loop)', tools: ['todo_list'] },
  memory: { description: 'Durable notes across sessions (agent loop)', tools: ['memory'] },
  session_search: { description: 'Search earlier sessions (agent loop)', tools: ['session_search'] },
  delegation: { description: 'Hand tasks to sub-agents (agent loop)', tools: ['delegate_task'] },
  clarify: { description: 'Ask the user a clarifying question', tools: ['clarify'] },
};

/** Every built-in tool: what a platform preset gives an agent. Sorted. */
export const CORE_TOOLS: readonly string[] = Object.freeze(
  [...new Set(Object.values(LEAF_TOOLSETS).flatMap((t) => t.tools))].sort(),
);

/** Platform presets; each resolves to `CORE_TOOLS`. */
export const PLATFORM_TOOLSETS: readonly string[] = Object.freeze([
  'hermes-cli',
  'hermes-api-server',
  'hermes-telegram',
  'hermes-discord',
  'hermes-slack',
  'hermes-whatsapp',
  'hermes-signal',
  'hermes-email',
]);

/**
 * Tools `execute_code` scripts may call, in the order the stub module lists
 * them. MCP and plugin tools are never among them.
 */
export const SANDBOX_TOOLS: readonly string[] = Object.freeze([
  'web_search',
  'web_extract',
  'read_file',
  'write_file',
  'search_files',
  'patch',
  'terminal',
]);

/**
 * Names older clients send; they are not toolsets (not listed, not part of
 * `all`) but resolve to the same tools, under the tools' current names.
 */
const LEGACY_TOOLSETS: Readonly<Record<string, readonly string[]>> = {
  web_tools: ['web_search', 'web_extract'],
  terminal_tools: ['terminal', 'process_manage'],
  file_tools: ['read_file', 'write_file', 'patch', 'search_files'],
  browser_tools: BROWSER_TOOLS,
  vision_tools: ['vision_analyze'],
  image_tools: ['image_generate'],
  skills_tools: SKILLS_TOOLS,
  cronjob_tools: ['cronjob_manage'],
  tts_tools: ['text_to_speech'],
};

const ALL_NAMES: ReadonlySet<string> = new Set(['all', '*']);

/** The sentence `browser_navigate` drops when no web tool is listed: it would point at tools the model lacks. */
export const BROWSER_WEB_HINT = ' For simple information retrieval, prefer web_search or web_extract (faster, cheaper).';

/** Names are config keys and log fields: no whitespace or control characters, bounded length. */
const TOOLSET_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,127}$/;

function builtinTable(): Map<string, StoredToolset> {
  const table = new Map<string, StoredToolset>();
  for (const [name, def] of Object.entries(LEAF_TOOLSETS)) {
    table.set(name, { description: def.description, tools: def.tools, includes: [], aliases: [] });
  }
  table.set('debugging', {
    description: 'Terminal, processes, web and files for debugging work',
    tools: ['terminal', 'process_manage'],
    includes: ['web', 'file'],
    aliases: [],
  });
  for (const name of PLATFORM_TOOLSETS) {
    table.set(name, { description: `Platform preset ${name}: the core tools`, tools: CORE_TOOLS, includes: [], aliases: [] });
  }
  return table;
}

const BUILTIN_NAMES: ReadonlySet<string> = new Set(builtinTable().keys());

// Process-wide like the tool modules that register into it; plugins and MCP add entries at runtime.
const toolsets = builtinTable();
const aliases = new Map<string, string>();

/**
 * Adds (or replaces) a plugin or MCP toolset. A toolset named `mcp-<server>`
 * also gets `<server>` as an alias. Aliases that would shadow a toolset, a
 * legacy name or another toolset's alias are skipped. Old tool names in
 * `tools` (`process`) stand for the current ones (`process_manage`).
 *
 * @returns the aliases that were applied.
 * @throws InvalidArgumentError for a malformed name, `all`/`*`, a built-in or legacy name.
 */
export function registerToolset(name: string, def: ToolsetDefinition): string[] {
  if (!TOOLSET_NAME_PATTERN.test(name) || ALL_NAMES.has(name)) {
    throw new InvalidArgumentError(
      `Invalid toolset name "${name}": use letters, digits and _ . : @ + - (all and * are reserved)`,
    );
  }
  if (BUILTIN_NAMES.has(name) || Object.hasOwn(LEGACY_TOOLSETS, name)) {
    throw new InvalidArgumentError(`Toolset "${name}" is built in and cannot be redefined`);
  }
  unregisterToolset(name);
  const requested = [...(def.aliases ?? [])];
  if (name.startsWith('mcp-') && name.length > 'mcp-'.length) requested.push(name.slice('mcp-'.length));
  const applied = [...new Set(requested)].filter(
    (alias) =>
      alias !== name &&
      !ALL_NAMES.has(alias) &&
      !toolsets.has(alias) &&
      !Object.hasOwn(LEGACY_TOOLSETS, alias) &&
      !aliases.has(alias),
  );
  for (const alias of applied) aliases.set(alias, name);
  toolsets.set(name, {
    description: def.description,
    tools: canonicalToolNames(def.tools),
    includes: [...(def.includes ?? [])],
    aliases: applied,
  });
  return applied;
}

/** Removes a plugin or MCP toolset and its aliases; built-ins stay. Returns whether one was removed. */
export function unregisterToolset(name: string): boolean {
  if (BUILTIN_NAMES.has(name)) return false;
  const existing = toolsets.get(name);
  if (existing === undefined) return false;
  for (const alias of existing.aliases) aliases.delete(alias);
  return toolsets.delete(name);
}

/** Whether a name means something: a toolset, an alias, a legacy name, or `all`/`*`. */
export function validateToolsetName(name: string): boolean {
  return ALL_NAMES.has(name) || canonicalToolset(name) !== undefined || Object.hasOwn(LEGACY_TOOLSETS, name);
}

/** Every toolset (built-in and registered), sorted by name, with its resolved tools. */
export function listToolsets(): ToolsetInfo[] {
  return [...toolsets.entries()]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([name, def]) => ({
      name,
      description: def.description,
      tools: resolveToolset(name),
      includes: [...def.includes],
      aliases: [...def.aliases],
      builtin: BUILTIN_NAMES.has(name),
    }));
}

/**
 * The tools a toolset stands for, includes expanded recursively, sorted and
 * without duplicates. `all` and `*` mean every toolset; aliases and legacy
 * names resolve to their targets; an unknown name resolves to nothing.
 */
export function resolveToolset(name: string): string[] {
  const tools = new Set<string>();
  expandInto(name, tools, new Set());
  return [...tools].sort();
}

// `visited` makes cycles terminate and diamonds expand once.
function expandInto(name: string, tools: Set<string>, visited: Set<string>): void {
  if (ALL_NAMES.has(name)) {
    for (const toolset of toolsets.keys()) expandInto(toolset, tools, visited);
    return;
  }
  const canonical = canonicalToolset(name);
  if (canonical === undefined) {
    const legacy = Object.hasOwn(LEGACY_TOOLSETS, name) ? LEGACY_TOOLSETS[name] : undefined;
    for (const tool of legacy ?? []) tools.add(tool);
    return;
  }
  if (visited.has(canonical)) return;
  visited.add(canonical);
  const def = toolsets.get(canonical);
  if (def === undefined) return;
  for (const tool of def.tools) tools.add(tool);
  for (const included of def.includes) expandInto(included, tools, visited);
}

/**
 * The tools a list of toolset names allows (a tenant's `toolsets`): each name
 * resolved as a client's names are (aliases, legacy names, `all`/`*`) and the
 * results united. An empty list allows nothing. Names that mean nothing are
 * returned in `unknown` (in the order given, once each) and allow nothing.
 */
export function resolveToolsets(names: readonly string[]): { tools: Set<string>; unknown: string[] } {
  const tools = new Set<string>();
  const unknown: string[] = [];
  for (const name of names) {
    if (!validateToolsetName(name)) {
      if (!unknown.includes(name)) unknown.push(name);
      continue;
    }
    for (const tool of resolveToolset(name)) tools.add(tool);
  }
  return { tools, unknown };
}

/** Every name a toolset list may use: toolsets and their aliases, then the legacy names; each group sorted. */
export function knownToolsetNames(): string[] {
  return [...[...toolsets.keys(), ...aliases.keys()].sort(), ...Object.keys(LEGACY_TOOLSETS).sort()];
}

function canonicalToolset(name: string): string | undefined {
  if (toolsets.has(name)) return name;
  return aliases.get(name);
}

function isPlatformBundle(name: string): boolean {
  return (canonicalToolset(name) ?? name).startsWith('hermes-');
}

/** Which toolsets a listing should include and exclude. */
export interface ToolSelection {
  /**
   * Toolsets to include; absent or empty means all. Empty counts as absent
   * because a protobuf repeated field cannot tell "not sent" from "empty".
   */
  readonly enabled?: readonly string[] | undefined;
  /** Toolsets to subtract after inclusion. */
  readonly disabled?: readonly string[] | undefined;
  /**
   * The tools the caller may have at all (its tenant's `toolsets`); the
   * selection is cut down to them, so `enabled` can narrow but never widen.
   * Absent: no limit.
   */
  readonly within?: ReadonlySet<string> | undefined;
}

/**
 * The tool names a listing covers. Enabled toolsets (or all of them) are
 * resolved and united; disabled toolsets are subtracted last, except that
 * disabling a platform bundle (`hermes-*`) removes only its non-core tools, so
 * "disable hermes-discord" cannot empty the core list. Unknown names in either
 * list are reported in `unknown` (in the order given, once each), not fatal.
 * Last, anything outside `within` (the tenant's tools) is dropped.
 */
export function selectToolNames(selection: ToolSelection = {}): { names: string[]; unknown: string[] } {
  const unknown: string[] = [];
  const noteUnknown = (name: string): void => {
    if (!unknown.includes(name)) unknown.push(name);
  };

  const names = new Set<string>();
  const enabled = selection.enabled ?? [];
  for (const name of enabled.length > 0 ? enabled : ['all']) {
    if (!validateToolsetName(name)) noteUnknown(name);
    else for (const tool of resolveToolset(name)) names.add(tool);
  }

  const core = new Set(CORE_TOOLS);
  for (const name of selection.disabled ?? []) {
    if (!validateToolsetName(name)) {
      noteUnknown(name);
      continue;
    }
    const platform = isPlatformBundle(name);
    for (const tool of resolveToolset(name)) {
      if (!(platform && core.has(tool))) names.delete(tool);
    }
  }
  const within = selection.within;
  const kept = within === undefined ? [...names] : [...names].filter((tool) => within.has(tool));
  return { names: kept.sort(), unknown };
}

/**
 * Rebuilds the `execute_code` schema for the sandbox tools that are actually
 * listed (the execute_code module owns the wording).
 */
export type ExecuteCodeSchemaBuilder = (availableSandboxTools: string[], schema: ToolSchema) => ToolSchema;

/** Listing-time schema rewrites supplied by the caller. */
export interface ToolDefinitionPatchers {
  readonly executeCode?: ExecuteCodeSchemaBuilder;
}

/**
 * The tool definitions for a listing: names selected by toolsets, schemas
 * from the registry (availability checks applied), then the patches that
 * depend on what survived: `execute_code` lists only surviving sandbox tools
 * (via `patchers.executeCode`; without one the static schema stays), and
 * `browser_navigate` drops its web hint when neither web tool survived.
 * A throwing patcher propagates: it is our own code, and a wrong schema is
 * worse than a failed listing.
 */
export async function getToolDefinitions(
  registry: Pick<ToolRegistry, 'getDefinitions'>,
  selection: ToolSelection = {},
  patchers: ToolDefinitionPatchers = {},
): Promise<{ tools: OpenAiTool[]; unknownToolsets: string[] }> {
  const { names, unknown } = selectToolNames(selection);
  const definitions = await registry.getDefinitions(names);
  const listed = new Set(definitions.map((tool) => tool.function.name));
  const tools = definitions.map((tool): OpenAiTool => {
    const schema = tool.function;
    if (schema.name === 'execute_code' && patchers.executeCode !== undefined) {
      const sandbox = SANDBOX_TOOLS.filter((name) => listed.has(name));
      const patched = patchers.executeCode(sandbox, schema);
      // The registered name stays the dispatch key whatever the builder returns.
      return {
        type: 'function',
        function: { name: schema.name, description: patched.description, parameters: patched.parameters },
      };
    }
    if (schema.name === 'browser_navigate' && !listed.has('web_search') && !listed.has('web_extract')) {
      return { type: 'function', function: { ...schema, description: schema.description.replace(BROWSER_WEB_HINT, '') } };
    }
    return tool;
  });
  return { tools, unknownToolsets: unknown };
}
