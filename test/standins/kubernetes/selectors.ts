/**
 * Kubernetes stand-in (a test double): label and field selectors as the API
 * server parses them (k8s.io/apimachinery/pkg/labels and fields), with its
 * error wording for what it cannot parse.
 */
import { badRequest } from './errors.js';

type Op = '=' | '!=' | 'in' | 'notin' | 'exists' | '!';

interface Requirement {
  readonly key: string;
  readonly op: Op;
  readonly values: readonly string[];
}

export type Matcher = (fields: Readonly<Record<string, string>>) => boolean;

const QUALIFIED_NAME = /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

/** A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters. */
export function isLabelKey(key: string): boolean {
  const slash = key.lastIndexOf('/');
  const name = slash < 0 ? key : key.slice(slash + 1);
  const prefix = slash < 0 ? undefined : key.slice(0, slash);
  if (prefix !== undefined && (prefix.length > 253 || !DNS_SUBDOMAIN.test(prefix))) return false;
  return name.length > 0 && name.length <= 63 && QUALIFIED_NAME.test(name);
}

export const isLabelValue = (value: string) => value.length <= 63 && LABEL_VALUE.test(value);

/** Splits on commas that are not inside parentheses. */
function splitTerms(text: string): string[] {
  const terms: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '(') depth++;
    else if (text[i] === ')') depth--;
    else if (text[i] === ',' && depth === 0) {
      terms.push(text.slice(start, i));
      start = i + 1;
    }
  }
  terms.push(text.slice(start));
  return terms.map((t) => t.trim());
}

function parseRequirement(term: string): Requirement {
  let m = /^!\s*(\S+)$/.exec(term);
  if (m) return { key: m[1]!, op: '!', values: [] };
  m = /^(\S+?)\s+(in|notin)\s*\(([^)]*)\)$/.exec(term);
  if (m) {
    const values = m[3]!.split(',').map((v) => v.trim());
    return { key: m[1]!, op: m[2] as Op, values };
  }
  m = /^([^=!\s]+)\s*(==|=|!=)\s*(\S*)$/.exec(term);
  if (m) return { key: m[1]!, op: m[2] === '!=' ? '!=' : '=', values: [m[3]!] };
  if (/^[^=!()\s,]+$/.test(term)) return { key: term, op: 'exists', values: [] };
  throw badRequest(`unable to parse requirement: found '${term}', expected: identifier`);
}

function matches(r: Requirement, labels: Readonly<Record<string, string>>): boolean {
  const has = Object.hasOwn(labels, r.key);
  const v = labels[r.key];
  switch (r.op) {
    case '=':
      return has && v === r.values[0];
    case '!=':
      return !has || v !== r.values[0];
    case 'in':
      return has && r.values.includes(v!);
    case 'notin':
      return !has || !r.values.includes(v!);
    case 'exists':
      return has;
    case '!':
      return !has;
  }
}

/** `labelSelector`: everything when absent or empty. Bad keys and values are 400 with the server's wording. */
export function parseLabelSelector(text: string | null): Matcher {
  if (!text || !text.trim()) return () => true;
  const reqs = splitTerms(text).map(parseRequirement);
  for (const r of reqs) {
    if (!isLabelKey(r.key)) {
      throw badRequest(`unable to parse requirement: values[0][${r.key}]: Invalid value: "${r.key}": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`);
    }
    for (const v of r.values) {
      if (!isLabelValue(v)) {
        throw badRequest(`unable to parse requirement: values[0][${r.key}]: Invalid value: "${v}": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`);
      }
    }
  }
  return (labels) => reqs.every((r) => matches(r, labels));
}

/** `fieldSelector` over the fields a resource supports (`metadata.name`, ...): `=`, `==`, `!=` only. */
export function parseFieldSelector(text: string | null, supported: readonly string[]): Matcher {
  if (!text || !text.trim()) return () => true;
  const reqs = splitTerms(text).map((term) => {
    const m = /^([^=!]+?)\s*(==|=|!=)\s*(.*)$/.exec(term);
    if (!m) throw badRequest(`invalid selector: '${text}'; can't understand '${term}'`);
    if (!supported.includes(m[1]!)) throw badRequest(`field label not supported: ${m[1]}`);
    return { key: m[1]!, neg: m[2] === '!=', value: m[3]! };
  });
  return (fields) => reqs.every((r) => (fields[r.key] === r.value) !== r.neg);
}

/** A `metav1.LabelSelector` (matchLabels, matchExpressions) as NetworkPolicies hold it; empty selects all. */
export function labelSelectorMatcher(selector: unknown): Matcher {
  const s = (selector ?? {}) as { matchLabels?: Record<string, string>; matchExpressions?: { key: string; operator: string; values?: string[] }[] };
  const reqs: Requirement[] = [
    ...Object.entries(s.matchLabels ?? {}).map(([key, value]): Requirement => ({ key, op: '=', values: [value] })),
    ...(s.matchExpressions ?? []).map((e): Requirement => {
      const op = ({ In: 'in', NotIn: 'notin', Exists: 'exists', DoesNotExist: '!' } as const)[e.operator as 'In'];
      return { key: e.key, op: op ?? 'exists', values: e.values ?? [] };
    }),
  ];
  return (labels) => reqs.every((r) => matches(r, labels));
}
