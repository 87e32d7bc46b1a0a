/**
 * The kubernetes backend's way to the API server: the official
 * `@kubernetes/client-node` (loaded here only, when the backend starts),
 * configured as kubectl is — `KUBECONFIG` or `~/.kube/config` and its current
 * context (or `kubernetes.context`), else the pod's ServiceAccount in a
 * cluster. Every call's failure becomes a domain error naming the verb, the
 * resource and the object (kube-errors.ts).
 */
import type * as K8s from '@kubernetes/client-node';
import { FailedPreconditionError } from '../../../common/errors.js';
import { kubeError, isNotFound } from './kube-errors.js';

export type Sdk = typeof K8s;

export interface KubeApiOptions {
  /** `kubernetes.context`: empty for the current one. */
  readonly context?: string;
  /** `kubernetes.namespace`: empty for the context's. */
  readonly namespace?: string;
}

/** The calls the backend makes, in one namespace. */
export class KubeApi {
  readonly sdk: Sdk;
  readonly kc: K8s.KubeConfig;
  readonly core: K8s.CoreV1Api;
  readonly networking: K8s.NetworkingV1Api;
  readonly namespace: string;
  /** The API server's URL (for messages). */
  readonly server: string;
  /** Where the credentials came from (for messages and `berth doctor`). */
  readonly source: string;

  private constructor(sdk: Sdk, kc: K8s.KubeConfig, namespace: string, source: string) {
    this.sdk = sdk;
    this.kc = kc;
    this.core = kc.makeApiClient(sdk.CoreV1Api);
    this.networking = kc.makeApiClient(sdk.NetworkingV1Api);
    this.namespace = namespace;
    this.server = kc.getCurrentCluster()?.server ?? '';
    this.source = source;
  }

  static async load(options: KubeApiOptions): Promise<KubeApi> {
    const sdk = await import('@kubernetes/client-node');
    const kc = new sdk.KubeConfig();
    try {
      kc.loadFromDefault();
    } catch (err) {
      throw new FailedPreconditionError(`the kubeconfig could not be read: ${(err as Error).message}; fix it or point KUBECONFIG at a valid one`);
    }
    if (options.context) {
      if (!kc.getContextObject(options.context)) {
        throw new FailedPreconditionError(
          `kubernetes.context: the kubeconfig has no context ${JSON.stringify(options.context)} (it has ${kc.getContexts().map((c) => c.name).join(', ') || 'none'})`,
        );
      }
      kc.setCurrentContext(options.context);
    }
    const cluster = kc.getCurrentCluster();
    if (!cluster || (cluster.name === 'cluster' && cluster.server === 'http://localhost:8080' && !process.env.KUBECONFIG)) {
      throw new FailedPreconditionError(
        'the kubernetes backend found no cluster: set KUBECONFIG (or ~/.kube/config) with a current context, or run the executor in a pod with a ServiceAccount',
      );
    }
    const context = kc.getContextObject(kc.getCurrentContext());
    const namespace = options.namespace || context?.namespace?.trim() || 'default';
    const source = kc.getCurrentContext() === 'inClusterContext' ? 'the pod\'s ServiceAccount' : `kubeconfig context ${kc.getCurrentContext()}`;
    return new KubeApi(sdk, kc, namespace, source);
  }

  /** Runs `fn`, turning its failure into a domain error about `verb` `resource` `name`. */
  async call<T>(verb: string, resource: string, name: string | undefined, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw kubeError(err, { verb, resource, ...(name ? { name } : {}), namespace: this.namespace, server: this.server });
    }
  }

  createPod(body: K8s.V1Pod): Promise<K8s.V1Pod> {
    return this.call('create', 'pods', body.metadata?.name, () => this.core.createNamespacedPod({ namespace: this.namespace, body }));
  }

  /** The pod, or undefined when it does not exist. */
  async readPod(name: string): Promise<K8s.V1Pod | undefined> {
    try {
      return await this.core.readNamespacedPod({ name, namespace: this.namespace });
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw kubeError(err, { verb: 'get', resource: 'pods', name, namespace: this.namespace, server: this.server });
    }
  }

  async listPods(labelSelector: string): Promise<K8s.V1Pod[]> {
    const list = await this.call('list', 'pods', undefined, () => this.core.listNamespacedPod({ namespace: this.namespace, labelSelector }));
    return list.items;
  }

  /** Deletes the pod (gone already is fine). */
  async deletePod(name: string, gracePeriodSeconds = 1): Promise<void> {
    try {
      await this.core.deleteNamespacedPod({ name, namespace: this.namespace, gracePeriodSeconds });
    } catch (err) {
      if (!isNotFound(err)) throw kubeError(err, { verb: 'delete', resource: 'pods', name, namespace: this.namespace, server: this.server });
    }
  }

  /** A JSON patch (RFC 6902) of the pod. */
  patchPod(name: string, patch: readonly object[]): Promise<K8s.V1Pod> {
    return this.call('patch', 'pods', name, () =>
      this.core.patchNamespacedPod(
        { name, namespace: this.namespace, body: patch },
        this.sdk.setHeaderOptions('Content-Type', this.sdk.PatchStrategy.JsonPatch),
      ),
    );
  }

  /** The claim, or undefined when it does not exist. */
  async readClaim(name: string): Promise<K8s.V1PersistentVolumeClaim | undefined> {
    try {
      return await this.core.readNamespacedPersistentVolumeClaim({ name, namespace: this.namespace });
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw kubeError(err, { verb: 'get', resource: 'persistentvolumeclaims', name, namespace: this.namespace, server: this.server });
    }
  }

  createClaim(body: K8s.V1PersistentVolumeClaim): Promise<K8s.V1PersistentVolumeClaim> {
    return this.call('create', 'persistentvolumeclaims', body.metadata?.name, () =>
      this.core.createNamespacedPersistentVolumeClaim({ namespace: this.namespace, body }),
    );
  }

  async listClaims(labelSelector: string): Promise<K8s.V1PersistentVolumeClaim[]> {
    const list = await this.call('list', 'persistentvolumeclaims', undefined, () =>
      this.core.listNamespacedPersistentVolumeClaim({ namespace: this.namespace, labelSelector }),
    );
    return list.items;
  }

  async deleteClaim(name: string): Promise<void> {
    try {
      await this.core.deleteNamespacedPersistentVolumeClaim({ name, namespace: this.namespace });
    } catch (err) {
      if (!isNotFound(err)) throw kubeError(err, { verb: 'delete', resource: 'persistentvolumeclaims', name, namespace: this.namespace, server: this.server });
    }
  }
}
