/**
 * The configuration reference of docs/configuration.md, rendered from the
 * schema and the environment table, so every key is documented with its
 * type, default, variable and description, and the page cannot drift from
 * the code: a unit test compares it with what this renders.
 */
import { z } from 'zod';
import { configSchema } from './config.js';
import { ENV_VARIABLES } from './config-env.js';

export const REFERENCE_BEGIN =
  '<!-- BEGIN config-reference: generated from services/common/config.ts and config-env.ts by `make config-doc`; edit those, not this -->';
export const REFERENCE_END = '<!-- END config-reference -->';

/** One documented key. */
export interface ReferenceRow {
  readonly key: string;
  readonly type: string;
  readonly default: string;
  readonly description: string;
}

type Schema = z.core.$ZodType;
interface Def {
  type: string;
  innerType?: Schema;
  in?: Schema;
  out?: Schema;
  element?: Schema;
  options?: Schema[];
  shape?: Record<string, Schema>;
  entries?: Record<string, string>;
  values?: unknown[];
  valueType?: Schema;
  defaultValue?: unknown;
  format?: string;
  checks?: Array<{ _zod: { def: { check: string; value?: unknown; inclusive?: boolean; minimum?: number; format?: string } } }>;
}

const defOf = (s: Schema): Def => (s as unknown as { _zod: { def: Def } })._zod.def;
const describedBy = (s: Schema): string | undefined => z.globalRegistry.get(s)?.description;
const typeNameOf = (s: Schema): string | undefined => z.globalRegistry.get(s)?.typeName as string | undefined;

/** Peels default/prefault/optional/pipe wrappers: the type underneath, its default and its description. */
function unwrap(schema: Schema): { core: Schema; defaultValue: unknown; hasDefault: boolean; optional: boolean; commaList: boolean; description: string | undefined } {
  let s = schema;
  let description = describedBy(s);
  let defaultValue: unknown;
  let hasDefault = false;
  let optional = false;
  let commaList = false;
  for (;;) {
    const d = defOf(s);
    if (d.type === 'default' || d.type === 'prefault') {
      if (!hasDefault) {
        hasDefault = true;
        defaultValue = d.defaultValue;
      }
      s = d.innerType!;
    } else if (d.type === 'optional') {
      optional = true;
      s = d.innerType!;
    } else if (d.type === 'pipe' && defOf(d.in!).type === 'transform') {
      // z.preprocess: a list an environment variable may give comma-separated.
      commaList = true;
      s = d.out!;
    } else break;
    description ??= describedBy(s);
  }
  return { core: s, defaultValue, hasDefault, optional, commaList, description };
}

function numberType(d: Def): string {
  let name = 'number';
  let low: string | undefined;
  let high: string | undefined;
  for (const c of d.checks ?? []) {
    const cd = c._zod.def;
    if (cd.check === 'number_format') name = 'integer';
    if (cd.check === 'greater_than') low = `${cd.inclusive ? '≥' : '>'} ${String(cd.value)}`;
    if (cd.check === 'less_than') high = `${cd.inclusive ? '≤' : '<'} ${String(cd.value)}`;
  }
  return [name, low, high].filter(Boolean).join(', ');
}

/** The type as a reader wants it: `integer, ≥ 1`, `` `a` \| `b` ``, `list of strings`. */
export function typeOf(schema: Schema): string {
  const { core, commaList } = unwrap(schema);
  const named = typeNameOf(core);
  if (named) return named;
  const d = defOf(core);
  switch (d.type) {
    case 'string':
      return d.format === 'url' ? 'URL' : 'string';
    case 'number':
      return numberType(d);
    case 'boolean':
      return 'boolean';
    case 'enum':
      return Object.values(d.entries!).map((v) => (v === '' ? '`""`' : `\`${v}\``)).join(' \\| ');
    case 'literal':
      return d.values!.map((v) => (v === '' ? '`""`' : `\`${String(v)}\``)).join(' \\| ');
    case 'union': {
      const parts = d.options!.map(typeOf);
      // A boolean the environment may give as text ("true", "no").
      return parts.every((p) => p === 'boolean') ? 'boolean' : parts.join(' or ');
    }
    case 'record':
      return `map of ${typeOf(d.valueType!)}s`;
    case 'array': {
      const element = unwrap(d.element!).core;
      const kind = defOf(element).type;
      const list = kind === 'object' ? 'list of objects' : kind === 'enum' ? `list, each ${typeOf(element)}` : `list of ${typeOf(element)}s`;
      return commaList ? `${list} (comma-separated in a variable)` : list;
    }
    case 'object':
      return 'object';
    case 'pipe':
      // z.stringbool(): text in, a boolean out.
      return typeOf(d.out!);
    default:
      throw new Error(`config reference: no rendering for zod type '${d.type}'`);
  }
}

function formatDefault(value: unknown): string {
  if (value === '') return '`""`';
  if (typeof value === 'string') return `\`${value}\``;
  return `\`${JSON.stringify(value)}\``;
}

/** Every key under `schema` (an object), depth first, sub-keys of objects and lists of objects included. */
export function referenceRows(schema: Schema = configSchema, prefix = '', parentOptional = false): ReferenceRow[] {
  const rows: ReferenceRow[] = [];
  for (const [name, child] of Object.entries(defOf(unwrap(schema).core).shape ?? {})) {
    const key = `${prefix}${name}`;
    const u = unwrap(child);
    if (u.description === undefined) throw new Error(`config key ${key} has no description: add .describe('...') in services/common/config.ts`);
    const d = defOf(u.core);
    const isList = d.type === 'array' && defOf(unwrap(d.element!).core).type === 'object';
    const isSection = d.type === 'object';
    // A map whose values are objects (mcp_servers): the value's keys, under `<name>`.
    const isMap = d.type === 'record' && defOf(unwrap(d.valueType!).core).type === 'object';
    let def: string;
    if (u.hasDefault && !isSection) def = formatDefault(u.defaultValue);
    else if (isSection && !u.optional) def = '';
    else if (u.optional) def = 'unset';
    else def = parentOptional ? 'required' : '—';
    rows.push({ key, type: typeOf(child), default: def, description: u.description });
    if (isSection) rows.push(...referenceRows(u.core, `${key}.`, u.optional));
    if (isList) rows.push(...referenceRows(d.element!, `${key}[].`, true));
    if (isMap) rows.push(...referenceRows(d.valueType!, `${key}.<name>.`, true));
  }
  return rows;
}

const cell = (text: string) => text.replace(/\|/g, '\\|').replace(/\n/g, ' ');
/** Already escaped (types render their own pipes). */
const typeCell = (text: string) => text;

/** The variables that set `key`, as the reference shows them. */
function variablesOf(key: string): string {
  return ENV_VARIABLES.filter((v) => v.key === key).map((v) => `\`${v.name}\``).join(', ');
}

function table(rows: readonly ReferenceRow[]): string[] {
  return [
    '| key | type | default | variable | description |',
    '| --- | --- | --- | --- | --- |',
    ...rows.map((r) => `| \`${r.key}\` | ${typeCell(r.type)} | ${r.default} | ${variablesOf(r.key)} | ${cell(r.description)} |`),
  ];
}

/** The generated part of docs/configuration.md, markers included. */
export function renderConfigReference(): string {
  const rows = referenceRows();
  const topLevel = (k: string) => k.split(/[.[]/)[0]!;
  const sections = new Map<string, ReferenceRow[]>();
  const loose: ReferenceRow[] = [];
  for (const r of rows) {
    const top = topLevel(r.key);
    const head = rows.find((x) => x.key === top)!;
    if (head.type === 'object' || head.type === 'list of objects') {
      const list = sections.get(top) ?? [];
      list.push(r);
      sections.set(top, list);
    } else loose.push(r);
  }
  const out = [
    REFERENCE_BEGIN,
    '## Reference',
    '',
    'Every key, with its type, its default and the environment variable that',
    'overrides it. "unset" means the key is absent unless given; "required" keys',
    'must be given once their section is.',
    '',
    '### Top-level keys',
    '',
    ...table(loose),
  ];
  for (const [name, list] of sections) {
    out.push('', `### ${name}`, '', list[0]!.description, '', ...table(list.slice(1)));
  }
  out.push(
    '',
    '### Environment variables',
    '',
    'Each overrides the key it names; an empty value is ignored, except for',
    '`TERMINAL_*`. Where two set the same key, the later in this table wins.',
    '',
    '| variable | key | value |',
    '| --- | --- | --- |',
    ...ENV_VARIABLES.map((v) => `| \`${v.name}\` | \`${v.key}\` | ${cell(v.form ?? 'as the key')} |`),
    REFERENCE_END,
  );
  return out.join('\n');
}

/** `page` with its generated part replaced by `reference`; throws when the markers are missing. */
export function spliceReference(page: string, reference: string): string {
  const begin = page.indexOf(REFERENCE_BEGIN);
  const end = page.indexOf(REFERENCE_END);
  if (begin < 0 || end < begin) throw new Error(`the page has no ${REFERENCE_BEGIN} ... ${REFERENCE_END} markers`);
  return page.slice(0, begin) + reference + page.slice(end + REFERENCE_END.length);
}
