/**
 * Kubernetes stand-in (a test double): the verbs every served resource
 * shares: create, get, list (selectors, limit/continue), update, patch and
 * delete, with the API server's checks (names, namespaces,
 * resourceVersion conflicts, field validation, dry run) and answers.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { alreadyExists, badRequest, conflict, notFound, StatusError } from './errors.js';
import { decode, fieldValidationOf } from './field-validation.js';
import { readBody, sendJson } from './http-io.js';
import { applyPatch } from './patch.js';
import { apiVersionOf, checkPreconditions, type ResourceHooks } from './resource.js';
import { parseFieldSelector, parseLabelSelector } from './selectors.js';
import { randomSuffix, type KubeObject, type ObjectStore } from './store.js';
import { toTable, wantsTable } from './table.js';
import { serveWatch, withType } from './watch.js';

const NAMESPACES = { group: '', name: 'namespaces' };

export interface ApiRequest {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly query: URLSearchParams;
  readonly hooks: ResourceHooks;
  readonly namespace: string | undefined;
  readonly name: string;
}

export class ApiHandlers {
  readonly #store: ObjectStore;
  readonly #watches = new Set<() => void>();

  constructor(store: ObjectStore) {
    this.#store = store;
  }

  #what(hooks: ResourceHooks): string {
    const { kind, version } = hooks.info;
    return `${kind} in version "${version}" cannot be handled as a ${kind}`;
  }

  #checkNamespace(namespace: string | undefined): void {
    if (namespace !== undefined && !this.#store.get('namespaces', undefined, namespace)) throw notFound(NAMESPACES, namespace);
  }

  #decodeObject(r: ApiRequest, body: unknown): { object: KubeObject; warnings: readonly string[] } {
    const { info } = r.hooks;
    const decoded = decode(body, info.model, fieldValidationOf(r.query), this.#what(r.hooks));
    const o = decoded.value as KubeObject;
    if (o.apiVersion !== undefined && o.apiVersion !== apiVersionOf(info)) {
      throw badRequest(`the API version in the data (${o.apiVersion}) does not match the expected API version (${apiVersionOf(info)})`);
    }
    if (o.kind !== undefined && o.kind !== info.kind) throw badRequest(`${this.#what(r.hooks)}: the kind in the data (${o.kind}) does not match the expected kind`);
    o.metadata ??= { name: '' };
    if (o.metadata.namespace !== undefined && r.namespace !== undefined && o.metadata.namespace !== r.namespace) {
      throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
    }
    if (r.namespace !== undefined) o.metadata.namespace = r.namespace;
    return { object: withType(info, o), warnings: decoded.warnings };
  }

  async create(r: ApiRequest): Promise<void> {
    this.#checkNamespace(r.namespace);
    const { object: o, warnings } = this.#decodeObject(r, await readBody(r.req));
    const meta = o.metadata;
    if (!meta.name && meta.generateName) meta.name = meta.generateName + randomSuffix();
    if (meta.resourceVersion) throw new StatusError(500, 'InternalError', 'Internal error occurred: resourceVersion should not be set on objects to be created');
    for (const f of ['uid', 'creationTimestamp', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'generation', 'managedFields'] as const) delete meta[f];
    delete o.status;
    await r.hooks.admit(o);
    if (this.#store.get(r.hooks.info.name, r.namespace, meta.name)) throw alreadyExists(r.hooks.info, meta.name);
    if (r.query.get('dryRun') === 'All') {
      sendJson(r.res, 201, o, warnings);
      return;
    }
    const stored = this.#store.create(r.hooks.info.name, o);
    r.hooks.created?.(stored);
    sendJson(r.res, 201, withType(r.hooks.info, stored), warnings);
  }

  #existing(r: ApiRequest): KubeObject {
    const o = this.#store.get(r.hooks.info.name, r.namespace, r.name);
    if (!o) throw notFound(r.hooks.info, r.name);
    return o;
  }

  get(r: ApiRequest): void {
    const o = withType(r.hooks.info, this.#existing(r));
    if (wantsTable(r.req)) sendJson(r.res, 200, toTable(r.hooks.info, [o], { resourceVersion: o.metadata.resourceVersion }, r.query.get('includeObject')));
    else sendJson(r.res, 200, o);
  }

  list(r: ApiRequest): void {
    const { info } = r.hooks;
    const labels = parseLabelSelector(r.query.get('labelSelector'));
    const fields = parseFieldSelector(r.query.get('fieldSelector'), ['metadata.name', 'metadata.namespace', ...Object.keys(info.fields?.({ apiVersion: '', kind: '', metadata: { name: '' } }) ?? {})]);
    const matches = (o: KubeObject) =>
      labels(o.metadata.labels ?? {}) && fields({ 'metadata.name': o.metadata.name, 'metadata.namespace': o.metadata.namespace ?? '', ...info.fields?.(o) });
    if (r.query.get('watch') === 'true' || r.query.get('watch') === '1') {
      const timeout = r.query.get('timeoutSeconds');
      const render = wantsTable(r.req)
        ? (o: KubeObject, first: boolean) => toTable(info, [o], { resourceVersion: o.metadata.resourceVersion }, r.query.get('includeObject'), first)
        : undefined;
      const request = { info, namespace: r.namespace, matches, resourceVersion: r.query.get('resourceVersion'), timeoutSeconds: timeout ? Number(timeout) : undefined, ...(render ? { render } : {}) };
      serveWatch(this.#store, r.res, request, (stop) => {
        this.#watches.add(stop);
        r.res.once('close', () => this.#watches.delete(stop));
      });
      return;
    }
    const rv = this.#store.resourceVersion;
    let items = this.#store.list(info.name, r.namespace).filter(matches);
    const token = r.query.get('continue');
    if (token) {
      let after: string;
      try {
        after = (JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as { start: string }).start;
      } catch {
        throw badRequest('continue key is not valid: illegal base64 data');
      }
      items = items.filter((o) => `${o.metadata.namespace ?? ''}/${o.metadata.name}` > after);
    }
    const limit = Number(r.query.get('limit') ?? 0);
    const meta: Record<string, unknown> = { resourceVersion: rv };
    if (limit > 0 && items.length > limit) {
      const last = items[limit - 1]!;
      meta.continue = Buffer.from(JSON.stringify({ v: 'meta.k8s.io/v1', rv: Number(rv), start: `${last.metadata.namespace ?? ''}/${last.metadata.name}` })).toString('base64url');
      meta.remainingItemCount = items.length - limit;
      items = items.slice(0, limit);
    }
    if (wantsTable(r.req)) {
      sendJson(r.res, 200, toTable(info, items.map((o) => withType(info, o)), meta, r.query.get('includeObject')));
      return;
    }
    // List items carry no apiVersion/kind on the wire, as the real server sends them.
    const bare = items.map(({ apiVersion: _a, kind: _k, ...rest }) => rest);
    sendJson(r.res, 200, { kind: `${info.kind}List`, apiVersion: apiVersionOf(info), metadata: meta, items: bare });
  }

  /** The shared end of update and patch: identity and concurrency checks, then the resource's own. */
  #commitUpdate(r: ApiRequest, old: KubeObject, updated: KubeObject, warnings: readonly string[]): void {
    const { info } = r.hooks;
    if (updated.metadata.name !== r.name) throw badRequest(`the name of the object (${updated.metadata.name}) does not match the name on the URL (${r.name})`);
    if (updated.metadata.uid !== undefined && updated.metadata.uid !== old.metadata.uid) {
      throw conflict(info, r.name, `Precondition failed: UID in precondition: ${updated.metadata.uid}, UID in object meta: ${old.metadata.uid}`);
    }
    if (updated.metadata.resourceVersion && updated.metadata.resourceVersion !== old.metadata.resourceVersion) {
      throw conflict(info, r.name, 'the object has been modified; please apply your changes to the latest version and try again');
    }
    const meta = updated.metadata as Record<string, unknown>;
    for (const f of ['uid', 'creationTimestamp', 'deletionTimestamp', 'deletionGracePeriodSeconds', 'generation', 'namespace']) {
      if (old.metadata[f] === undefined) delete meta[f];
      else meta[f] = old.metadata[f];
    }
    const next = r.hooks.update(old, updated);
    if (r.query.get('dryRun') === 'All') {
      sendJson(r.res, 200, next, warnings);
      return;
    }
    sendJson(r.res, 200, withType(info, this.#store.update(info.name, next)), warnings);
  }

  async update(r: ApiRequest): Promise<void> {
    const old = this.#existing(r);
    const { object, warnings } = this.#decodeObject(r, await readBody(r.req));
    this.#commitUpdate(r, old, object, warnings);
  }

  async patch(r: ApiRequest): Promise<void> {
    const old = this.#existing(r);
    const body = await readBody(r.req);
    const patched = applyPatch(r.req.headers['content-type'] ?? '', old, body ?? {});
    const { object, warnings } = this.#decodeObject(r, patched);
    if (object.metadata.resourceVersion === old.metadata.resourceVersion) delete object.metadata.resourceVersion;
    this.#commitUpdate(r, old, object, warnings);
  }

  async delete(r: ApiRequest): Promise<void> {
    const old = this.#existing(r);
    const body = (await readBody(r.req)) ?? {};
    const options = decode(body, 'V1DeleteOptions', fieldValidationOf(r.query), 'DeleteOptions in version "v1" cannot be handled as a DeleteOptions').value as {
      gracePeriodSeconds?: number;
      preconditions?: { uid?: string; resourceVersion?: string };
      dryRun?: string[];
    };
    checkPreconditions(old, options.preconditions, r.hooks.info);
    const q = r.query.get('gracePeriodSeconds');
    const grace = q !== null ? Number(q) : options.gracePeriodSeconds;
    if (grace !== undefined && (!Number.isInteger(grace) || grace < 0)) throw badRequest(`invalid gracePeriodSeconds: ${q ?? grace}`);
    if (r.query.get('dryRun') === 'All' || options.dryRun?.includes('All')) {
      sendJson(r.res, 200, withType(r.hooks.info, old));
      return;
    }
    const answer = (await r.hooks.delete(old, { gracePeriodSeconds: grace })) as KubeObject;
    sendJson(r.res, 200, answer.kind === 'Status' ? answer : withType(r.hooks.info, answer));
  }

  /** Ends every open watch (the server is closing). */
  closeWatches(): void {
    for (const stop of this.#watches) stop();
    this.#watches.clear();
  }
}
