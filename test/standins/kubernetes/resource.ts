/**
 * Kubernetes stand-in (a test double): what the generic request handling
 * needs to know of each resource it serves, and the hooks through which a
 * resource adds its own validation, defaults and deletion.
 */
import { conflict } from './errors.js';
import type { KubeObject } from './store.js';

export interface ResourceInfo {
  /** Plural, as in URLs and RBAC: `pods`. */
  readonly name: string;
  readonly singularName: string;
  readonly kind: string;
  /** '' for the core group. */
  readonly group: string;
  readonly version: string;
  readonly namespaced: boolean;
  readonly verbs: readonly string[];
  readonly shortNames?: readonly string[];
  /** The client-node model its body is decoded against (`V1Pod`). */
  readonly model: string;
  /** Field selectors it supports beyond metadata.name and metadata.namespace, with their values. */
  readonly fields?: (o: KubeObject) => Readonly<Record<string, string>>;
}

export interface DeleteRequest {
  /** gracePeriodSeconds from the query or the DeleteOptions body. */
  readonly gracePeriodSeconds: number | undefined;
}

export interface ResourceHooks {
  readonly info: ResourceInfo;
  /** Validates and defaults a new object in place (throws a StatusError). */
  admit(o: KubeObject): Promise<void> | void;
  /** After the new object was stored. */
  created?(o: KubeObject): void;
  /** Checks an update of `old` to `updated` and returns what to store (status and immutable fields kept). */
  update(old: KubeObject, updated: KubeObject): KubeObject;
  /** Deletes a stored object; resolves to the response body. */
  delete(o: KubeObject, request: DeleteRequest): Promise<unknown>;
}

export const apiVersionOf = (info: ResourceInfo) => (info.group ? `${info.group}/${info.version}` : info.version);

/** The Status the server answers a deletion with when it does not return the object. */
export function deletedStatus(info: ResourceInfo, o: KubeObject): Record<string, unknown> {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Success',
    details: { name: o.metadata.name, ...(info.group ? { group: info.group } : {}), kind: info.name, uid: o.metadata.uid },
  };
}

/** Checks a delete's preconditions (uid, resourceVersion) as the API server does. */
export function checkPreconditions(o: KubeObject, preconditions: { uid?: string; resourceVersion?: string } | undefined, info: ResourceInfo): void {
  if (preconditions?.uid && preconditions.uid !== o.metadata.uid) {
    throw conflict(info, o.metadata.name, `Precondition failed: UID in precondition: ${preconditions.uid}, UID in object meta: ${o.metadata.uid}`);
  }
  if (preconditions?.resourceVersion && preconditions.resourceVersion !== o.metadata.resourceVersion) {
    throw conflict(info, o.metadata.name, `Precondition failed: ResourceVersion in precondition: ${preconditions.resourceVersion}, ResourceVersion in object meta: ${o.metadata.resourceVersion}`);
  }
}
