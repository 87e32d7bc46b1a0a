/**
 * Kubernetes stand-in (a test double): the PATCH types the API server takes
 * for the objects it serves: JSON merge patch (RFC 7386), JSON patch (RFC
 * 6902, client-node's default) and strategic merge patch (what `kubectl
 * apply`, `label` and `annotate` send), the latter with the merge keys of
 * the fields of Pods, PVCs and NetworkPolicies that have one. Server-side
 * apply (`application/apply-patch+yaml`) is not served: 415.
 */
import { badRequest, StatusError, unsupportedMediaType } from './errors.js';

type Json = unknown;
type JsonObject = Record<string, Json>;

const isObject = (v: Json): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

/** RFC 7386: objects merge, null deletes, anything else replaces. */
export function mergePatch(target: Json, patch: Json): Json {
  if (!isObject(patch)) return structuredClone(patch);
  const out: JsonObject = isObject(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

/**
 * Lists that merge by a key under strategic merge patch (the
 * `patchMergeKey` of the Go types); every other list is replaced whole.
 * Paths leave out list indexes.
 */
const MERGE_KEYS: Readonly<Record<string, string>> = {
  'metadata.ownerReferences': 'uid',
  'spec.containers': 'name',
  'spec.initContainers': 'name',
  'spec.ephemeralContainers': 'name',
  'spec.volumes': 'name',
  'spec.imagePullSecrets': 'name',
  'spec.hostAliases': 'ip',
  'spec.containers.env': 'name',
  'spec.containers.ports': 'containerPort',
  'spec.containers.volumeMounts': 'mountPath',
  'spec.containers.volumeDevices': 'devicePath',
  'spec.initContainers.env': 'name',
  'spec.initContainers.volumeMounts': 'mountPath',
  'status.conditions': 'type',
};
/** Lists of scalars that strategic merge patch merges (patchStrategy merge) instead of replacing. */
const MERGED_SCALAR_LISTS = new Set(['metadata.finalizers']);

function strategicList(path: string, target: Json, patch: Json[]): Json[] {
  const key = MERGE_KEYS[path];
  const base = Array.isArray(target) ? [...target] : [];
  if (MERGED_SCALAR_LISTS.has(path)) return [...base, ...patch.filter((v) => !base.includes(v))];
  if (!key) {
    if (patch.some((e) => isObject(e) && '$patch' in e)) throw badRequest(`the stand-in does not implement $patch directives in ${path}`);
    return structuredClone(patch);
  }
  for (const element of patch) {
    if (!isObject(element)) throw badRequest(`${path}: a list merged by "${key}" holds objects`);
    const { $patch: directive, ...fields } = element;
    const at = base.findIndex((e) => isObject(e) && e[key] === element[key]);
    if (directive === 'delete') {
      if (at >= 0) base.splice(at, 1);
    } else if (directive === 'replace') {
      if (at >= 0) base[at] = fields;
      else base.push(fields);
    } else if (directive !== undefined) {
      throw badRequest(`unknown patch type: ${String(directive)} in ${path}`);
    } else if (at >= 0) {
      base[at] = strategicMerge(base[at], fields, path);
    } else {
      base.push(strategicMerge(undefined, fields, path));
    }
  }
  return base;
}

/** Strategic merge patch: a merge patch whose keyed lists merge element by element. */
export function strategicMerge(target: Json, patch: Json, path = ''): Json {
  if (!isObject(patch)) return structuredClone(patch);
  if (patch.$patch === 'replace') {
    const { $patch: _, ...rest } = patch;
    return rest;
  }
  const out: JsonObject = isObject(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (k.startsWith('$setElementOrder/')) continue; // order only: lists keep the order of the stored object
    if (k.startsWith('$')) throw badRequest(`the stand-in does not implement the strategic merge directive ${k}`);
    const at = path ? `${path}.${k}` : k;
    if (v === null) delete out[k];
    else if (Array.isArray(v)) out[k] = strategicList(at, out[k], v);
    else if (isObject(v)) out[k] = strategicMerge(out[k], v, at);
    else out[k] = v;
  }
  return out;
}

/** RFC 6901 pointer to its tokens. */
function pointer(path: unknown): string[] {
  if (typeof path !== 'string' || (path !== '' && !path.startsWith('/'))) throw badRequest(`invalid JSON pointer: ${String(path)}`);
  return path === '' ? [] : path.slice(1).split('/').map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function parentOf(doc: Json, tokens: string[], op: string): { parent: JsonObject | Json[]; last: string } {
  let node = doc;
  for (const t of tokens.slice(0, -1)) {
    if (Array.isArray(node)) node = node[Number(t)];
    else if (isObject(node)) node = node[t];
    else node = undefined;
    if (node === undefined) throw badRequest(`jsonpatch ${op} operation does not apply: doc is missing path: "/${tokens.join('/')}"`);
  }
  if (!Array.isArray(node) && !isObject(node)) throw badRequest(`jsonpatch ${op} operation does not apply: doc is missing path: "/${tokens.join('/')}"`);
  return { parent: node, last: tokens[tokens.length - 1] ?? '' };
}

/** RFC 6902: add, remove, replace, move, copy, test, as the server's json-patch library applies them. */
export function jsonPatch(doc: Json, ops: Json): Json {
  if (!Array.isArray(ops)) throw badRequest('json: cannot unmarshal object into Go value of type jsonpatch.Patch');
  let out = structuredClone(doc);
  const read = (tokens: string[], op: string): Json => {
    if (tokens.length === 0) return out;
    const { parent, last } = parentOf(out, tokens, op);
    const v = Array.isArray(parent) ? parent[Number(last)] : parent[last];
    if (v === undefined) throw badRequest(`jsonpatch ${op} operation does not apply: doc is missing path: "/${tokens.join('/')}"`);
    return v;
  };
  const put = (tokens: string[], value: Json, op: string, replace: boolean) => {
    if (tokens.length === 0) {
      out = structuredClone(value);
      return;
    }
    const { parent, last } = parentOf(out, tokens, op);
    if (Array.isArray(parent)) {
      const i = last === '-' ? parent.length : Number(last);
      if (!Number.isInteger(i) || i < 0 || i > parent.length) throw badRequest(`jsonpatch ${op} operation does not apply: index out of bounds`);
      parent.splice(i, replace ? 1 : 0, structuredClone(value));
    } else {
      if (replace && !(last in parent)) throw badRequest(`jsonpatch replace operation does not apply: doc is missing key: /${tokens.join('/')}`);
      parent[last] = structuredClone(value);
    }
  };
  const remove = (tokens: string[], op: string) => {
    const { parent, last } = parentOf(out, tokens, op);
    if (Array.isArray(parent)) parent.splice(Number(last), 1);
    else {
      if (!(last in parent)) throw badRequest(`jsonpatch ${op} operation does not apply: doc is missing path: "/${tokens.join('/')}"`);
      delete parent[last];
    }
  };
  for (const op of ops) {
    if (!isObject(op)) throw badRequest('json patch operations are objects');
    const path = pointer(op.path);
    switch (op.op) {
      case 'add':
        put(path, op.value, 'add', false);
        break;
      case 'replace':
        put(path, op.value, 'replace', true);
        break;
      case 'remove':
        remove(path, 'remove');
        break;
      case 'move':
      case 'copy': {
        const from = pointer(op.from);
        const v = read(from, String(op.op));
        if (op.op === 'move') remove(from, 'move');
        put(path, v, String(op.op), false);
        break;
      }
      case 'test':
        if (JSON.stringify(read(path, 'test')) !== JSON.stringify(op.value)) throw new StatusError(422, 'Invalid', 'the server rejected our request due to an error in our request');
        break;
      default:
        throw badRequest(`Unexpected kind: ${String(op.op)}`);
    }
  }
  return out;
}

/** Applies a PATCH body by its Content-Type. */
export function applyPatch(contentType: string, target: Json, body: Json): Json {
  const type = contentType.split(';')[0]!.trim();
  if (type === 'application/merge-patch+json') return mergePatch(target, body);
  if (type === 'application/strategic-merge-patch+json') return strategicMerge(target, body);
  if (type === 'application/json-patch+json') return jsonPatch(target, body);
  throw unsupportedMediaType(type);
}
