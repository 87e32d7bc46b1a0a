/**
 * Upstream Hermes's naming and schema repairs for MCP tools: a tool `t` of
 * server `s` is `mcp__<s>__<t>` in toolset `mcp-<s>`, each part sanitised;
 * its input schema is repaired so every provider accepts it.
 */
import type { JsonSchema } from '../registry/tool-types.js';

/** Non-word characters become `_`, runs of `_` collapse, edges are trimmed; empty is `unnamed` (upstream's rule). */
export function sanitizeMcpNameComponent(value: string): string {
  const result = value.replace(/[^A-Za-z0-9_]/g, '_').replace(/_{2,}/g, '_').replace(/^_+|_+$/g, '');
  return result === '' ? 'unnamed' : result;
}

/** The registry name of tool `tool` of server `server`. */
export function mcpToolName(server: string, tool: string): string {
  return `mcp__${sanitizeMcpNameComponent(server)}__${sanitizeMcpNameComponent(tool)}`;
}

/** The toolset of a server's tools. */
export function mcpToolsetName(server: string): string {
  return `mcp-${server}`;
}

export function isMcpToolName(name: string): boolean {
  return name.startsWith('mcp__') && name.indexOf('__', 'mcp__'.length) !== -1;
}

type Json = unknown;

function isObject(value: Json): value is Record<string, Json> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** `definitions` → `$defs` and `#/definitions/` refs → `#/$defs/` (some providers reject draft-07 names). */
function rewriteLocalRefs(node: Json): Json {
  if (Array.isArray(node)) return node.map(rewriteLocalRefs);
  if (!isObject(node)) return node;
  const out: Record<string, Json> = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === '$ref' && typeof value === 'string' && value.startsWith('#/definitions/')) {
      out.$ref = `#/$defs/${value.slice('#/definitions/'.length)}`;
    } else {
      out[key === 'definitions' ? '$defs' : key] = rewriteLocalRefs(value);
    }
  }
  return out;
}

/** `anyOf`/`oneOf` of one schema and `{"type": "null"}` becomes that schema (nullable unions are rejected by some providers). */
function stripNullableUnion(node: Json): Json {
  if (Array.isArray(node)) return node.map(stripNullableUnion);
  if (!isObject(node)) return node;
  const out: Record<string, Json> = {};
  for (const [key, value] of Object.entries(node)) out[key] = stripNullableUnion(value);
  for (const key of ['anyOf', 'oneOf']) {
    const union = out[key];
    if (!Array.isArray(union)) continue;
    const rest = union.filter((branch) => !(isObject(branch) && branch.type === 'null'));
    if (rest.length === 1 && rest.length < union.length && isObject(rest[0])) {
      const { [key]: _dropped, ...others } = out;
      return { ...others, ...rest[0] };
    }
  }
  return out;
}

/** Object nodes get `type` and `properties`; `required` keeps only names that are properties. */
function repairObjectShape(node: Json): Json {
  if (Array.isArray(node)) return node.map(repairObjectShape);
  if (!isObject(node)) return node;
  const out: Record<string, Json> = {};
  for (const [key, value] of Object.entries(node)) out[key] = repairObjectShape(value);
  const looksObject = out.type === 'object' || ((out.type === undefined || out.type === null) && isObject(out.properties));
  if (!looksObject) return out;
  out.type = 'object';
  if (!isObject(out.properties)) out.properties = {};
  if (Array.isArray(out.required)) {
    const props = out.properties as Record<string, Json>;
    const valid = out.required.filter((r): r is string => typeof r === 'string' && Object.hasOwn(props, r));
    if (valid.length === 0) delete out.required;
    else out.required = valid;
  }
  return out;
}

/**
 * An MCP tool's `inputSchema` repaired as upstream's
 * `_normalize_mcp_input_schema` does; always an object schema.
 */
export function normalizeMcpInputSchema(schema: unknown): JsonSchema {
  if (!isObject(schema) || Object.keys(schema).length === 0) return { type: 'object', properties: {} };
  const normalized = repairObjectShape(stripNullableUnion(rewriteLocalRefs(schema)));
  if (!isObject(normalized)) return { type: 'object', properties: {} };
  if (normalized.type === 'object' && !isObject(normalized.properties)) return { ...normalized, properties: {} };
  return normalized;
}

/** Upstream's `_sanitize_error`: credential-looking text in an error becomes `[REDACTED]` before the model sees it. */
const CREDENTIAL_PATTERN =
  /(?:ghp_[A-Za-z0-9_]{1,255}|sk-[A-Za-z0-9_-](?:\.?[A-Za-z0-9_-]){0,254}|Bearer\s+\S+|(?:token|key|API_KEY|password|secret)=[^\s&,;"']{1,255})/gi;

export function redactMcpError(text: string): string {
  return text.replace(CREDENTIAL_PATTERN, '[REDACTED]');
}
