/**
 * Turns the JSON schemas of tool parameters into TypeScript source: one
 * argument interface per tool and one typed method per tool. Pure, so the
 * generator's output is tested without a registry.
 */

/** A JSON schema as tools publish it (the OpenAI function-calling subset). */
export type JsonSchema = Record<string, unknown>;

/** What the generator needs of one tool. */
export interface ToolSpec {
  readonly name: string;
  readonly description: string;
  readonly parameters: JsonSchema;
  /**
   * Names the tool had before (`process` for `process_manage`): each keeps a
   * deprecated method and argument type, so code written against the old name
   * still compiles; the call goes out under the current name.
   */
  readonly legacyNames?: readonly string[];
  /**
   * Arguments still accepted but no longer advertised: each becomes a
   * deprecated optional property of the argument type, so code written
   * against it still compiles.
   */
  readonly legacyParameters?: Readonly<Record<string, JsonSchema>>;
}

/** The parameters with the legacy ones added as optional properties marked deprecated. */
function withLegacyParameters(tool: ToolSpec): JsonSchema {
  const legacy = Object.entries(tool.legacyParameters ?? {});
  if (legacy.length === 0) return tool.parameters;
  const properties = (tool.parameters.properties ?? {}) as Record<string, unknown>;
  const deprecated = legacy.map(([key, schema]) => [
    key,
    { ...schema, description: `@deprecated ${typeof schema.description === 'string' ? schema.description : ''}`.trim() },
  ]);
  return { ...tool.parameters, properties: { ...properties, ...Object.fromEntries(deprecated) } };
}

/** `read_file` → `readFile`; `execute_code` → `executeCode`. */
export function methodName(tool: string): string {
  const camel = tool.replace(/[^A-Za-z0-9]+([A-Za-z0-9])/g, (_, c: string) => c.toUpperCase()).replace(/[^A-Za-z0-9]/g, '');
  return /^[0-9]/.test(camel) ? `_${camel}` : camel;
}

/** `read_file` → `ReadFileArgs`. */
export function argsTypeName(tool: string): string {
  const m = methodName(tool).replace(/^_/, '');
  return `${m.charAt(0).toUpperCase()}${m.slice(1)}Args`;
}

/** Text safe inside a TSDoc block: no comment terminator, one leading star per line. */
export function docText(text: string, indent: string): string {
  const lines = text.replace(/\*\//g, '*\u200b/').trim().split('\n');
  return lines.map((l) => `${indent} * ${l}`.trimEnd()).join('\n');
}

const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

function propKey(key: string): string {
  return IDENT.test(key) ? key : JSON.stringify(key);
}

function literal(value: unknown): string {
  return JSON.stringify(value);
}

/** The TypeScript type of one schema, `indent` being the indentation of the line it appears on. */
export function schemaToType(schema: unknown, indent = ''): string {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) return 'unknown';
  const s = schema as JsonSchema;
  if (Array.isArray(s.enum)) return s.enum.map(literal).join(' | ') || 'never';
  if ('const' in s) return literal(s.const);
  for (const key of ['anyOf', 'oneOf'] as const) {
    const options = s[key];
    if (Array.isArray(options)) return options.map((o) => schemaToType(o, indent)).join(' | ') || 'unknown';
  }
  const type = s.type;
  if (Array.isArray(type)) return type.map((t) => schemaToType({ ...s, type: t }, indent)).join(' | ');
  switch (type) {
    case 'string':
      return 'string';
    case 'integer':
    case 'number':
      return 'number';
    case 'boolean':
      return 'boolean';
    case 'null':
      return 'null';
    case 'array': {
      const item = schemaToType(s.items, indent);
      return /^[A-Za-z]+$/.test(item) ? `${item}[]` : `Array<${item}>`;
    }
    case 'object':
      return objectType(s, indent);
    default:
      return s.properties !== undefined ? objectType(s, indent) : 'unknown';
  }
}

function propertyDoc(schema: unknown, indent: string): string {
  if (typeof schema !== 'object' || schema === null) return '';
  const s = schema as JsonSchema;
  const parts: string[] = [];
  if (typeof s.description === 'string' && s.description.trim() !== '') parts.push(s.description);
  if (s.default !== undefined) parts.push(`@defaultValue ${literal(s.default)}`);
  if (parts.length === 0) return '';
  return `${indent}/**\n${docText(parts.join('\n'), indent)}\n${indent} */\n`;
}

function objectType(s: JsonSchema, indent: string): string {
  const properties = (typeof s.properties === 'object' && s.properties !== null ? s.properties : {}) as Record<string, unknown>;
  const required = new Set(Array.isArray(s.required) ? (s.required as unknown[]).filter((r) => typeof r === 'string') : []);
  const keys = Object.keys(properties);
  const open = s.additionalProperties !== false;
  if (keys.length === 0) return open ? 'Record<string, unknown>' : 'Record<string, never>';
  const inner = `${indent}  `;
  const lines = keys.map((key) => {
    const optional = required.has(key) ? '' : '?';
    return `${propertyDoc(properties[key], inner)}${inner}${propKey(key)}${optional}: ${schemaToType(properties[key], inner)};`;
  });
  return `{\n${lines.join('\n')}\n${indent}}`;
}

/** The whole generated module: argument interfaces, the tool name list, and the method class. */
export function generateToolModule(tools: readonly ToolSpec[], generator: string): string {
  const sorted = [...tools].sort((a, b) => a.name.localeCompare(b.name));
  const out: string[] = [];
  out.push(`// Generated by ${generator} from the tool registry's schemas. Do not edit by hand:`);
  out.push('// run `make client-gen` (or `npm run build`) after changing a tool schema.');
  out.push("import type { ToolCallOptions, ToolResultOf } from '../tool-results.js';");
  out.push('');
  out.push('/** Names of the built-in tools this client has typed methods for. */');
  out.push(`export const BUILTIN_TOOL_NAMES = ${JSON.stringify(sorted.map((t) => t.name))} as const;`);
  out.push('');
  for (const tool of sorted) {
    const type = schemaToType(withLegacyParameters(tool), '');
    out.push(`/** Arguments of the \`${tool.name}\` tool. */`);
    if (type.startsWith('{')) out.push(`export interface ${argsTypeName(tool.name)} ${type}`);
    else out.push(`export type ${argsTypeName(tool.name)} = ${type};`);
    out.push('');
    for (const old of tool.legacyNames ?? []) {
      out.push(`/** @deprecated The \`${old}\` tool is now \`${tool.name}\`: use {@link ${argsTypeName(tool.name)}}. */`);
      out.push(`export type ${argsTypeName(old)} = ${argsTypeName(tool.name)};`);
      out.push('');
    }
  }
  out.push('/** Arguments of each built-in tool, by tool name. */');
  out.push('export interface ToolArgsMap {');
  for (const tool of sorted) out.push(`  ${propKey(tool.name)}: ${argsTypeName(tool.name)};`);
  out.push('}');
  out.push('');
  out.push('/** One typed method per built-in tool; each sends a call and parses its result JSON. */');
  out.push('export abstract class ToolMethods {');
  out.push('  /** Sends one call by tool name and resolves with the parsed result. */');
  out.push('  abstract call<T = unknown>(name: string, args: Record<string, unknown>, options?: ToolCallOptions): Promise<T>;');
  for (const tool of sorted) {
    out.push('');
    out.push('  /**');
    out.push(docText(tool.description, '  '));
    out.push('   *');
    out.push(`   * Calls the \`${tool.name}\` tool; resolves with its parsed result (tool errors are results too).`);
    out.push('   */');
    const required = Array.isArray(tool.parameters.required) && tool.parameters.required.length > 0;
    const param = `args: ${argsTypeName(tool.name)}${required ? '' : ' = {}'}`;
    out.push(`  ${methodName(tool.name)}(${param}, options?: ToolCallOptions): Promise<ToolResultOf<${literal(tool.name)}>> {`);
    out.push(`    return this.call(${literal(tool.name)}, args as unknown as Record<string, unknown>, options);`);
    out.push('  }');
    for (const old of tool.legacyNames ?? []) {
      out.push('');
      out.push('  /**');
      out.push(`   * @deprecated The \`${old}\` tool is now \`${tool.name}\`: use {@link ToolMethods.${methodName(tool.name)}}.`);
      out.push(`   * Calls the \`${tool.name}\` tool, as that method does.`);
      out.push('   */');
      out.push(`  ${methodName(old)}(${param}, options?: ToolCallOptions): Promise<ToolResultOf<${literal(tool.name)}>> {`);
      out.push(`    return this.${methodName(tool.name)}(args, options);`);
      out.push('  }');
    }
  }
  out.push('}');
  out.push('');
  return out.join('\n');
}
