/**
 * Models often send every argument as a string ("42", "true", "[1,2]") even
 * when the schema asks for a number, boolean or array. Coercing those before
 * dispatch saves a round trip of "expected integer, got string" errors. Only
 * strings are touched, only top-level properties the schema describes, and a
 * value is left unchanged whenever the intended meaning is not clear.
 */
import type { JsonSchema } from './tool-types.js';

/** Returned by the inner coercers when the string cannot become any allowed type. */
const NOT_COERCIBLE: unique symbol = Symbol('not-coercible');

/** Plain decimal numbers only: `Number()` would also accept "", "0x10" and "Infinity". */
const DECIMAL_PATTERN = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

/**
 * Coerces string arguments to the types their schema properties declare.
 *
 * - `"42"` becomes a number for `number`, and for `integer` only when integral
 *   (and a safe integer: a rounded huge id is worse than a clear type error);
 * - `"true"`/`"false"` (any case, surrounding spaces ignored) become booleans;
 * - JSON text becomes an array or object for those types;
 * - `"null"` becomes null only where the schema allows null (`type` list with
 *   `"null"`, `nullable: true`, or an `anyOf`/`oneOf` member of type null);
 * - for array types, a bare scalar becomes a one-element array, the element
 *   coerced by the `items` schema.
 *
 * A string is left alone when the schema also accepts strings (it is already
 * valid), when the property has no type information, or when no allowed type
 * fits. Non-object `args` (arrays, null, scalars) become `{}`. The input is not
 * mutated.
 */
export function coerceArguments(args: unknown, parameters: JsonSchema): Record<string, unknown> {
  if (!isPlainObject(args)) return {};
  const properties = isPlainObject(parameters['properties']) ? parameters['properties'] : {};
  // fromEntries defines own properties, so a "__proto__" key stays data instead of changing the prototype.
  return Object.fromEntries(
    Object.entries(args).map(([key, value]) => {
      const propertySchema = Object.hasOwn(properties, key) ? properties[key] : undefined;
      if (typeof value !== 'string' || !isPlainObject(propertySchema)) return [key, value];
      const coerced = coerceString(value, propertySchema);
      return [key, coerced === NOT_COERCIBLE ? value : coerced];
    }),
  );
}

/**
 * The string as the schema wants it: a converted value, the string itself when
 * the schema accepts strings or says nothing, or NOT_COERCIBLE.
 */
function coerceString(value: string, schema: Record<string, unknown>): unknown {
  const types = allowedTypes(schema);
  if (types.size === 0 || types.has('string')) return value;
  const text = value.trim();

  if (types.has('null') && text === 'null') return null;
  if (types.has('integer')) {
    const n = parseDecimal(text);
    if (n !== undefined && Number.isSafeInteger(n)) return n;
  }
  if (types.has('number')) {
    const n = parseDecimal(text);
    if (n !== undefined) return n;
  }
  if (types.has('boolean')) {
    const lower = text.toLowerCase();
    if (lower === 'true') return true;
    if (lower === 'false') return false;
  }
  if (types.has('object')) {
    const parsed = parseJson(text);
    if (isPlainObject(parsed)) return parsed;
  }
  if (types.has('array')) {
    const parsed = parseJson(text);
    if (Array.isArray(parsed)) return parsed;
    // "null" and "" say "nothing", not "a list holding this one value".
    if (text !== '' && text !== 'null') {
      const element = coerceString(value, itemsSchema(schema));
      if (element !== NOT_COERCIBLE) return [element];
    }
  }
  return NOT_COERCIBLE;
}

/** Types a schema admits, from `type` (string or list), `nullable` and `anyOf`/`oneOf` members. */
function allowedTypes(schema: Record<string, unknown>): Set<string> {
  const types = new Set<string>();
  const declared = schema['type'];
  if (typeof declared === 'string') types.add(declared);
  else if (Array.isArray(declared)) {
    for (const t of declared) if (typeof t === 'string') types.add(t);
  }
  if (schema['nullable'] === true) types.add('null');
  for (const member of unionMembers(schema)) {
    for (const t of allowedTypes(member)) types.add(t);
  }
  return types;
}

/** The element schema of an array type, looking inside `anyOf`/`oneOf` when needed; `{}` when unknown. */
function itemsSchema(schema: Record<string, unknown>): Record<string, unknown> {
  const items = schema['items'];
  if (isPlainObject(items)) return items;
  for (const member of unionMembers(schema)) {
    if (allowedTypes(member).has('array')) return itemsSchema(member);
  }
  return {};
}

function unionMembers(schema: Record<string, unknown>): Record<string, unknown>[] {
  const members: Record<string, unknown>[] = [];
  for (const key of ['anyOf', 'oneOf']) {
    const list = schema[key];
    if (Array.isArray(list)) members.push(...list.filter(isPlainObject));
  }
  return members;
}

function parseDecimal(text: string): number | undefined {
  if (!DECIMAL_PATTERN.test(text)) return undefined;
  const n = Number(text);
  return Number.isFinite(n) ? n : undefined;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
