/**
 * Kubernetes stand-in (a test double): PersistentVolumeClaims, each bound at
 * once to a Docker volume of its own (a dynamic provisioner with
 * WaitForFirstConsumer off). The claim carries the `kubernetes.io/pvc-protection`
 * finalizer as on a cluster: deleting a claim that a pod still uses leaves
 * it Terminating until that pod is gone. The requested size is reported as
 * the capacity but not enforced (local Docker volumes have no quota).
 */
import type Dockerode from 'dockerode';
import { invalid, type FieldError } from './errors.js';
import { validateMeta } from './pod-spec.js';
import { parseQuantity, QUANTITY_ERROR } from './quantity.js';
import type { ResourceHooks, ResourceInfo } from './resource.js';
import type { ClaimAccess } from './pods.js';
import { missingClaimReason } from './scheduler.js';
import { STANDIN_LABEL } from './pod-runtime.js';
import type { KubeObject, ObjectStore } from './store.js';

/* eslint-disable @typescript-eslint/no-explicit-any -- claim JSON */
type Claim = KubeObject & { spec: Record<string, any>; status?: Record<string, any> };

export const CLAIMS: ResourceInfo = {
  name: 'persistentvolumeclaims',
  singularName: 'persistentvolumeclaim',
  kind: 'PersistentVolumeClaim',
  group: '',
  version: 'v1',
  namespaced: true,
  verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'],
  shortNames: ['pvc'],
  model: 'V1PersistentVolumeClaim',
};

const ACCESS_MODES = ['ReadWriteOnce', 'ReadOnlyMany', 'ReadWriteMany', 'ReadWriteOncePod'];
const NOT_HONOURED = 'not supported by the Kubernetes stand-in (a test double)';
/** The storage class the stand-in's provisioner answers to (the default class). */
export const STORAGE_CLASS = 'standard';

export class ClaimController implements ResourceHooks, ClaimAccess {
  readonly info = CLAIMS;
  readonly #store: ObjectStore;
  readonly #docker: Dockerode;
  readonly #instance: string;

  constructor(store: ObjectStore, docker: Dockerode, instance: string) {
    this.#store = store;
    this.#docker = docker;
    this.#instance = instance;
  }

  /** The Docker volume behind a bound claim. */
  volumeOf(namespace: string, claim: string): string | undefined {
    const c = this.#store.get('persistentvolumeclaims', namespace, claim) as Claim | undefined;
    return c && !c.metadata.deletionTimestamp ? this.#volumeName(c) : undefined;
  }

  #volumeName(c: Claim): string {
    return `k8s-standin-${this.#instance}-pvc-${c.metadata.uid}`;
  }

  unusable(namespace: string, claim: string): string | undefined {
    const c = this.#store.get('persistentvolumeclaims', namespace, claim);
    if (!c) return missingClaimReason(claim);
    if (c.metadata.deletionTimestamp) return `0/1 nodes are available: persistentvolumeclaim "${claim}" is being deleted. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.`;
    return undefined;
  }

  admit(o: KubeObject): void {
    const c = o as Claim;
    const errors: FieldError[] = [];
    validateMeta(c.metadata, errors);
    const spec = (c.spec ??= {});
    const modes = (spec.accessModes ?? []) as string[];
    if (modes.length === 0) errors.push({ field: 'spec.accessModes', type: 'FieldValueRequired', detail: 'at least 1 access mode is required' });
    for (const m of modes) if (!ACCESS_MODES.includes(m)) errors.push({ field: 'spec.accessModes', type: 'FieldValueNotSupported', value: m, detail: `supported values: ${ACCESS_MODES.map((x) => `"${x}"`).join(', ')}` });
    const storage = spec.resources?.requests?.storage;
    if (storage === undefined) errors.push({ field: 'spec.resources[storage]', type: 'FieldValueRequired', detail: '' });
    else if (parseQuantity(storage) === undefined) errors.push({ field: 'spec.resources.requests[storage]', type: 'FieldValueInvalid', value: storage, detail: QUANTITY_ERROR });
    for (const f of ['dataSource', 'dataSourceRef', 'selector', 'volumeName', 'volumeAttributesClassName']) {
      if (spec[f] !== undefined) errors.push({ field: `spec.${f}`, type: 'FieldValueForbidden', detail: NOT_HONOURED });
    }
    if (spec.volumeMode !== undefined && spec.volumeMode !== 'Filesystem') errors.push({ field: 'spec.volumeMode', type: 'FieldValueForbidden', detail: `${NOT_HONOURED}: block volumes` });
    if (spec.storageClassName !== undefined && spec.storageClassName !== STORAGE_CLASS) {
      errors.push({ field: 'spec.storageClassName', type: 'FieldValueForbidden', detail: `${NOT_HONOURED}: its only storage class is "${STORAGE_CLASS}"` });
    }
    if (errors.length > 0) throw invalid('PersistentVolumeClaim', '', c.metadata.name, errors);
    spec.volumeMode = 'Filesystem';
    spec.storageClassName = STORAGE_CLASS;
    c.metadata.finalizers = ['kubernetes.io/pvc-protection'];
    c.status = { phase: 'Pending' };
  }

  created(o: KubeObject): void {
    const c = o as Claim;
    void this.#docker
      .createVolume({ Name: this.#volumeName(c), Labels: { [STANDIN_LABEL]: this.#instance, 'berth.standin.kubernetes.claim': `${c.metadata.namespace}/${c.metadata.name}` } })
      .then(() => {
        const current = this.#store.get('persistentvolumeclaims', c.metadata.namespace, c.metadata.name) as Claim | undefined;
        if (!current || current.metadata.uid !== c.metadata.uid) return;
        current.spec.volumeName = `pvc-${c.metadata.uid}`;
        current.metadata.annotations = {
          ...current.metadata.annotations,
          'pv.kubernetes.io/bind-completed': 'yes',
          'pv.kubernetes.io/bound-by-controller': 'yes',
          'volume.beta.kubernetes.io/storage-provisioner': 'standin.berth/docker-volume',
          'volume.kubernetes.io/storage-provisioner': 'standin.berth/docker-volume',
        };
        current.status = { phase: 'Bound', accessModes: current.spec.accessModes, capacity: { storage: current.spec.resources.requests.storage } };
        this.#store.update('persistentvolumeclaims', current);
      });
  }

  update(old: KubeObject, updated: KubeObject): KubeObject {
    const o = old as Claim;
    const u = updated as Claim;
    if (JSON.stringify(o.spec) !== JSON.stringify(u.spec)) {
      throw invalid('PersistentVolumeClaim', '', o.metadata.name, [
        { field: 'spec', type: 'FieldValueForbidden', detail: 'spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims' },
      ]);
    }
    return { ...u, status: o.status };
  }

  #inUse(c: Claim): boolean {
    return this.#store.list('pods', c.metadata.namespace).some((p) =>
      ((p as any).spec?.volumes ?? []).some((v: any) => v.persistentVolumeClaim?.claimName === c.metadata.name),
    );
  }

  async delete(o: KubeObject): Promise<unknown> {
    const c = o as Claim;
    if (this.#inUse(c)) {
      // pvc-protection: Terminating until no pod uses it.
      if (!c.metadata.deletionTimestamp) {
        c.metadata.deletionTimestamp = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
        c.metadata.deletionGracePeriodSeconds = 0;
        return this.#store.update('persistentvolumeclaims', c);
      }
      return c;
    }
    const gone = this.#store.remove('persistentvolumeclaims', c.metadata.namespace, c.metadata.name)!;
    await this.#docker.getVolume(this.#volumeName(c)).remove().catch(() => undefined);
    return gone;
  }

  podGone(): void {
    for (const c of this.#store.list('persistentvolumeclaims') as Claim[]) {
      if (c.metadata.deletionTimestamp && !this.#inUse(c)) void this.delete(c);
    }
  }
}
