/**
 * Kubernetes stand-in (a test double): the API server's decoding of a request
 * body against the resource's schema. The schema is the one generated from
 * the Kubernetes OpenAPI document into @kubernetes/client-node's models
 * (each model's attributeTypeMap), so the stand-in knows every field of the
 * API version it serves without a hand-kept list.
 *
 * `fieldValidation` as the server honours it: `Strict` rejects unknown
 * fields with 400 (`strict decoding error: unknown field "spec.foo"`),
 * `Warn` (the default) drops them and sends a `Warning` header, `Ignore`
 * drops them silently. A value of the wrong JSON type is always 400.
 */
import { badRequest } from './errors.js';

interface Attribute {
  readonly baseName: string;
  readonly type: string;
}

type ModelClass = { readonly attributeTypeMap?: readonly Attribute[] };

let models: Readonly<Record<string, unknown>> | undefined;

/** Loads the generated models once (the package is large; only the stand-in needs it). */
export async function loadSchemas(): Promise<void> {
  models ??= (await import('@kubernetes/client-node')) as unknown as Record<string, unknown>;
}

function attributes(type: string): readonly Attribute[] | undefined {
  if (!models) throw new Error('loadSchemas() was not awaited');
  const cls = models[type] as ModelClass | undefined;
  return cls?.attributeTypeMap;
}

export type FieldValidation = 'Strict' | 'Warn' | 'Ignore';

export function fieldValidationOf(query: URLSearchParams): FieldValidation {
  const v = query.get('fieldValidation') ?? 'Warn';
  if (v !== 'Strict' && v !== 'Warn' && v !== 'Ignore') {
    throw badRequest(`fieldValidation must be one of "Ignore", "Warn", or "Strict", not "${v}"`);
  }
  return v;
}

export interface Decoded {
  /** The body with unknown fields removed. */
  readonly value: Record<string, unknown>;
  /** `unknown field "spec.foo"` for each one dropped (Warn). */
  readonly warnings: readonly string[];
}

const goTypeName = (type: string) => type.replace(/^V1/, '');

function jsonTypeOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  return typeof v === 'number' ? 'number' : typeof v;
}

/**
 * Checks `body` against model `type` (`V1Pod`). `what` names the object for
 * the error, e.g. `Pod in version "v1" cannot be handled as a Pod`.
 */
export function decode(body: unknown, type: string, mode: FieldValidation, what: string): Decoded {
  const unknown: string[] = [];
  const mismatch = (path: string, parent: string, v: unknown, want: string): never => {
    throw badRequest(`${what}: json: cannot unmarshal ${jsonTypeOf(v)} into Go struct field ${goTypeName(parent)}.${path} of type ${want}`);
  };
  const walk = (value: unknown, t: string, path: string, parent: string): unknown => {
    if (value === null || t === 'any' || t === 'object') return value;
    if (t === 'string' || t === 'Date') return typeof value === 'string' ? value : mismatch(path, parent, value, 'string');
    if (t === 'number') return typeof value === 'number' ? value : mismatch(path, parent, value, 'int64');
    if (t === 'boolean') return typeof value === 'boolean' ? value : mismatch(path, parent, value, 'bool');
    if (t === 'IntOrString') return typeof value === 'string' || typeof value === 'number' ? value : mismatch(path, parent, value, 'intstr.IntOrString');
    const array = /^Array<(.+)>$/.exec(t);
    if (array) {
      if (!Array.isArray(value)) return mismatch(path, parent, value, `[]${goTypeName(array[1]!)}`);
      return value.map((v, i) => walk(v, array[1]!, `${path}[${i}]`, parent));
    }
    const map = /^\{ \[key: string\]: (.+); \}$/.exec(t);
    if (map) {
      if (typeof value !== 'object' || Array.isArray(value)) return mismatch(path, parent, value, `map[string]${goTypeName(map[1]!)}`);
      return Object.fromEntries(Object.entries(value as object).map(([k, v]) => [k, walk(v, map[1]!, `${path}[${k}]`, parent)]));
    }
    const attrs = attributes(t);
    if (!attrs) return value;
    if (typeof value !== 'object' || Array.isArray(value)) return mismatch(path, parent, value, goTypeName(t));
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value as object)) {
      const attr = attrs.find((a) => a.baseName === k);
      const at = path ? `${path}.${k}` : k;
      if (!attr) {
        unknown.push(`unknown field "${at}"`);
        continue;
      }
      out[k] = walk(v, attr.type, at, t);
    }
    return out;
  };
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw badRequest(`${what}: json: cannot unmarshal ${jsonTypeOf(body)} into Go value of type ${goTypeName(type)}`);
  }
  const value = walk(body, type, '', type) as Record<string, unknown>;
  if (unknown.length > 0 && mode === 'Strict') throw badRequest(`${what}: strict decoding error: ${unknown.join(', ')}`);
  return { value, warnings: mode === 'Warn' ? unknown : [] };
}
