/**
 * Kubernetes stand-in (a test double): `?watch=true` on a collection. A
 * stream of `{"type":"ADDED|MODIFIED|DELETED|ERROR","object":...}` lines:
 * without a resourceVersion (or "0") it starts with an ADDED for each
 * current object, with one it replays the changes after it, and one older
 * than the history gets an ERROR event with a 410 Expired Status. An object
 * that stops matching the selectors is sent as DELETED, one that starts
 * matching as ADDED, as the watch cache does. `timeoutSeconds` ends it.
 */
import type { ServerResponse } from 'node:http';
import { StatusError } from './errors.js';
import { apiVersionOf, type ResourceInfo } from './resource.js';
import type { KubeObject, ObjectStore, StoreEvent } from './store.js';

export interface WatchRequest {
  readonly info: ResourceInfo;
  readonly namespace: string | undefined;
  readonly matches: (o: KubeObject) => boolean;
  readonly resourceVersion: string | null;
  readonly timeoutSeconds: number | undefined;
  /** How an object is sent (a Table row for kubectl); `first` is true for the first event only. */
  readonly render?: (o: KubeObject, first: boolean) => unknown;
}

export function withType(info: ResourceInfo, o: KubeObject): KubeObject {
  const { apiVersion: _a, kind: _k, ...rest } = o;
  return { apiVersion: apiVersionOf(info), kind: info.kind, ...rest } as KubeObject;
}

export function serveWatch(store: ObjectStore, res: ServerResponse, w: WatchRequest, onClose: (stop: () => void) => void): void {
  res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-cache, private', 'transfer-encoding': 'chunked' });
  // A client waits for the headers before it reads events: send them now, not with the first change.
  res.flushHeaders();
  let first = true;
  const write = (type: string, object: KubeObject | Record<string, unknown>) => {
    if (res.writableEnded) return;
    const shown = type !== 'ERROR' && w.render ? w.render(object as KubeObject, first) : object;
    first = false;
    res.write(`${JSON.stringify({ type, object: shown })}\n`);
  };
  const inScope = (o: KubeObject) => w.namespace === undefined || o.metadata.namespace === w.namespace;
  const since = w.resourceVersion && w.resourceVersion !== '0' ? Number(w.resourceVersion) : undefined;
  let unsubscribe: () => void = () => undefined;
  const listener = (e: StoreEvent) => {
    if (e.resource !== w.info.name || !inScope(e.object)) return;
    const now = w.matches(e.object);
    if (e.type === 'MODIFIED') {
      const before = e.previous ? w.matches(e.previous) : now;
      if (now && before) write('MODIFIED', withType(w.info, e.object));
      else if (now) write('ADDED', withType(w.info, e.object));
      else if (before) write('DELETED', withType(w.info, e.object));
      return;
    }
    if (now) write(e.type, withType(w.info, e.object));
  };
  try {
    if (since === undefined) {
      for (const o of store.list(w.info.name, w.namespace)) if (w.matches(o)) write('ADDED', withType(w.info, o));
      unsubscribe = store.watch(Number(store.resourceVersion), listener);
    } else {
      if (!Number.isInteger(since)) throw new StatusError(400, 'BadRequest', `invalid resource version: "${w.resourceVersion}"`);
      unsubscribe = store.watch(since, listener);
    }
  } catch (err) {
    if (!(err instanceof StatusError)) throw err;
    write('ERROR', err.toStatus());
    res.end();
    return;
  }
  const timer = w.timeoutSeconds !== undefined ? setTimeout(() => stop(), w.timeoutSeconds * 1000) : undefined;
  const stop = () => {
    clearTimeout(timer);
    unsubscribe();
    if (!res.writableEnded) res.end();
  };
  res.once('close', stop);
  onClose(stop);
}
