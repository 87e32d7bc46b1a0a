/**
 * Kubernetes stand-in (a test double): the object store behind every
 * resource, in the manner of etcd under the API server: one
 * resourceVersion counter across all objects, uid and creationTimestamp set
 * on create, a bounded history of changes so a watch can start from a
 * resourceVersion, and 410 Expired for one older than the history holds.
 */
import { randomInt, randomUUID } from 'node:crypto';
import { gone } from './errors.js';

const SUFFIX_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';

/** Five characters as the API server appends them to a generateName (and the token volume's name). */
export const randomSuffix = () => Array.from({ length: 5 }, () => SUFFIX_ALPHABET[randomInt(SUFFIX_ALPHABET.length)]).join('');

export interface ObjectMeta {
  name: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  deletionGracePeriodSeconds?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  generateName?: string;
  [field: string]: unknown;
}

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  [field: string]: unknown;
}

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface StoreEvent {
  readonly rv: number;
  readonly resource: string;
  readonly type: WatchEventType;
  readonly object: KubeObject;
  /** The object before a MODIFIED change (a watch with a selector turns a change out of it into DELETED). */
  readonly previous?: KubeObject;
}

type Listener = (event: StoreEvent) => void;

/** Changes kept for watches that resume from a resourceVersion. */
const HISTORY = 4096;

/** Resources whose objects carry metadata.generation (pods and claims do not, in the API version served). */
const GENERATION = new Set(['networkpolicies']);

const keyOf = (namespace: string | undefined, name: string) => `${namespace ?? ''}/${name}`;

export class ObjectStore {
  #rv = 1;
  readonly #objects = new Map<string, Map<string, KubeObject>>();
  readonly #history: StoreEvent[] = [];
  readonly #listeners = new Set<Listener>();

  get resourceVersion(): string {
    return String(this.#rv);
  }

  #table(resource: string): Map<string, KubeObject> {
    let t = this.#objects.get(resource);
    if (!t) this.#objects.set(resource, (t = new Map()));
    return t;
  }

  get(resource: string, namespace: string | undefined, name: string): KubeObject | undefined {
    const o = this.#table(resource).get(keyOf(namespace, name));
    return o ? structuredClone(o) : undefined;
  }

  /** Every object of `resource` (in `namespace` when given), sorted by namespace and name as etcd's keys are. */
  list(resource: string, namespace?: string): KubeObject[] {
    return [...this.#table(resource).values()]
      .filter((o) => namespace === undefined || o.metadata.namespace === namespace)
      .sort((a, b) => keyOf(a.metadata.namespace, a.metadata.name).localeCompare(keyOf(b.metadata.namespace, b.metadata.name)))
      .map((o) => structuredClone(o));
  }

  /** Stores a new object (the caller has checked that the name is free), setting uid, resourceVersion and creationTimestamp. */
  create(resource: string, object: KubeObject): KubeObject {
    const o = structuredClone(object);
    o.metadata.uid = randomUUID();
    o.metadata.creationTimestamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    if (GENERATION.has(resource)) o.metadata.generation = 1;
    this.#commit(resource, 'ADDED', o);
    return structuredClone(o);
  }

  /** Replaces a stored object; `generation` moves when the spec changed. */
  update(resource: string, object: KubeObject): KubeObject {
    const o = structuredClone(object);
    const old = this.#table(resource).get(keyOf(o.metadata.namespace, o.metadata.name));
    if (old && GENERATION.has(resource) && JSON.stringify(old.spec) !== JSON.stringify(o.spec)) {
      o.metadata.generation = (old.metadata.generation ?? 0) + 1;
    }
    this.#commit(resource, 'MODIFIED', o);
    return structuredClone(o);
  }

  remove(resource: string, namespace: string | undefined, name: string): KubeObject | undefined {
    const o = this.#table(resource).get(keyOf(namespace, name));
    if (!o) return undefined;
    this.#commit(resource, 'DELETED', structuredClone(o));
    return structuredClone(o);
  }

  #commit(resource: string, type: WatchEventType, o: KubeObject): void {
    this.#rv += 1;
    o.metadata.resourceVersion = String(this.#rv);
    const key = keyOf(o.metadata.namespace, o.metadata.name);
    const previous = type === 'MODIFIED' ? this.#table(resource).get(key) : undefined;
    if (type === 'DELETED') this.#table(resource).delete(key);
    else this.#table(resource).set(key, o);
    const event: StoreEvent = { rv: this.#rv, resource, type, object: structuredClone(o), ...(previous ? { previous } : {}) };
    this.#history.push(event);
    if (this.#history.length > HISTORY) this.#history.shift();
    for (const listener of this.#listeners) listener(event);
  }

  /**
   * Calls `listener` for every change after resourceVersion `since` (past
   * ones first, from the history), then for each new one. Throws 410 Expired
   * when `since` is older than the history. Returns the unsubscribe function.
   */
  watch(since: number, listener: Listener): () => void {
    const oldest = this.#history[0]?.rv ?? this.#rv + 1;
    if (since < this.#rv && since + 1 < oldest) {
      throw gone(`too old resource version: ${since} (${oldest - 1})`);
    }
    for (const e of this.#history) if (e.rv > since) listener(e);
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}
