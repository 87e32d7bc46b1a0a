/**
 * Old tool names that still work. The Hermes tool protocol renamed some tools
 * (`process` → `process_manage`, `todo` → `todo_list`, `cronjob` →
 * `cronjob_manage`); saved prompts, old sessions and operator allowlists still
 * use the old names. Every place a tool name comes in (a call, a script's
 * call, a toolset's tool list, an allowlist) maps it through this table first,
 * so hooks, approvals, metrics, traces and results only ever see the new name.
 * Listings advertise only the new names.
 */

/** Old name → current name. */
export const LEGACY_TOOL_ALIASES: Readonly<Record<string, string>> = Object.freeze({
  todo: 'todo_list',
  cronjob: 'cronjob_manage',
  process: 'process_manage',
});

/** The current name of a tool: the alias target for an old name, the name itself otherwise. */
export function canonicalToolName(name: string): string {
  return Object.hasOwn(LEGACY_TOOL_ALIASES, name) ? LEGACY_TOOL_ALIASES[name]! : name;
}

/** A list of tool names with old names replaced, order kept, duplicates dropped. */
export function canonicalToolNames(names: Iterable<string>): string[] {
  return [...new Set([...names].map(canonicalToolName))];
}
