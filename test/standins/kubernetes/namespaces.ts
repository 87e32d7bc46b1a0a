/**
 * Kubernetes stand-in (a test double): namespaces, read-only. The stand-in
 * has `default`, `kube-system`, `kube-public`, `kube-node-lease` and those
 * named when it starts; they cannot be created or deleted through the API.
 */
import { methodNotAllowed } from './errors.js';
import type { ResourceHooks, ResourceInfo } from './resource.js';
import type { KubeObject, ObjectStore } from './store.js';

export const NAMESPACES: ResourceInfo = {
  name: 'namespaces',
  singularName: 'namespace',
  kind: 'Namespace',
  group: '',
  version: 'v1',
  namespaced: false,
  verbs: ['get', 'list', 'watch'],
  shortNames: ['ns'],
  model: 'V1Namespace',
  fields: (o) => ({ 'status.phase': ((o as { status?: { phase?: string } }).status?.phase) ?? '' }),
};

export const BUILTIN_NAMESPACES = ['default', 'kube-system', 'kube-public', 'kube-node-lease'];

export class NamespaceHooks implements ResourceHooks {
  readonly info = NAMESPACES;

  static seed(store: ObjectStore, names: readonly string[]): void {
    for (const name of new Set([...BUILTIN_NAMESPACES, ...names])) {
      store.create('namespaces', {
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: { name, labels: { 'kubernetes.io/metadata.name': name } },
        spec: { finalizers: ['kubernetes'] },
        status: { phase: 'Active' },
      });
    }
  }

  admit(): void {
    throw methodNotAllowed('POST');
  }

  update(): KubeObject {
    throw methodNotAllowed('PUT');
  }

  delete(): Promise<unknown> {
    throw methodNotAllowed('DELETE');
  }
}
