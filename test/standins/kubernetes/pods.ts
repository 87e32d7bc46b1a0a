/**
 * Kubernetes stand-in (a test double): the `pods` resource and the life of
 * a pod, as the API server, the scheduler and the kubelet together move it:
 * Pending (unschedulable with the scheduler's reason, or waiting on its
 * image with ErrImagePull / ImagePullBackOff, or ContainerCreating), Running
 * (ready), Succeeded or Failed (terminated with exit code and reason), and a
 * graceful deletion (deletionTimestamp, SIGTERM, SIGKILL after the grace
 * period, then gone). Evictions (the eviction subresource and a
 * node-pressure eviction hook) and containers killed out of band show up as
 * they do on a cluster.
 */
import type Dockerode from 'dockerode';
import { forbidden, invalid, type FieldError } from './errors.js';
import { defaultPod, qosClassOf, validateMeta, validatePodSpec } from './pod-spec.js';
import { ContainerConfigError, type PodRuntime } from './pod-runtime.js';
import type { DeleteRequest, ResourceHooks, ResourceInfo } from './resource.js';
import { NODE_NAME, unschedulableReason, type StandInNode } from './scheduler.js';
import { randomSuffix, type KubeObject, type ObjectStore } from './store.js';

/* eslint-disable @typescript-eslint/no-explicit-any -- pod JSON */
type Pod = KubeObject & { spec: Record<string, any>; status: Record<string, any> };

export const PODS: ResourceInfo = {
  name: 'pods',
  singularName: 'pod',
  kind: 'Pod',
  group: '',
  version: 'v1',
  namespaced: true,
  verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'],
  shortNames: ['po'],
  model: 'V1Pod',
  fields: (o) => {
    const p = o as Pod;
    return {
      'spec.nodeName': p.spec?.nodeName ?? '',
      'spec.restartPolicy': p.spec?.restartPolicy ?? '',
      'spec.schedulerName': p.spec?.schedulerName ?? '',
      'spec.serviceAccountName': p.spec?.serviceAccountName ?? '',
      'status.phase': p.status?.phase ?? '',
      'status.podIP': p.status?.podIP ?? '',
    };
  },
};

/** How often a pending pod is tried again (scheduling, image, claim). */
const RETRY_MS = 1000;
/** How long ErrImagePull shows before the kubelet backs off (ImagePullBackOff). */
const PULL_BACKOFF_MS = 1500;

export interface ClaimAccess {
  /** Undefined when usable; otherwise the scheduler's reason. */
  unusable(namespace: string, claim: string): string | undefined;
  /** A pod that used claims is gone: claims waiting to be deleted may go now. */
  podGone(): void;
}

export interface PodNetwork {
  fullyIsolated(pod: KubeObject): boolean;
  started(containerId: string, isolated: boolean): void;
}

export interface PodControllerOptions {
  readonly store: ObjectStore;
  readonly runtime: PodRuntime;
  readonly docker: Dockerode;
  readonly node: StandInNode;
  readonly network: string;
  readonly runtimeClasses: ReadonlyMap<string, string>;
  readonly claims: () => ClaimAccess;
  readonly policies: () => PodNetwork;
  readonly log: (line: string) => void;
}

interface Running {
  containerId?: string;
  stopping?: boolean;
  timer?: NodeJS.Timeout;
}

const now = () => new Date().toISOString().replace(/\.\d+Z$/, 'Z');
const condition = (type: string, status: boolean, extra: Record<string, unknown> = {}) => ({
  type,
  status: status ? 'True' : 'False',
  lastProbeTime: null,
  lastTransitionTime: now(),
  ...extra,
});
/** The full image reference the container runtime reports. */
const normalized = (image: string) => {
  const withTag = /:[^/]+$/.test(image) || image.includes('@') ? image : `${image}:latest`;
  const first = withTag.split('/')[0]!;
  if (withTag.includes('/') && (first.includes('.') || first.includes(':') || first === 'localhost')) return withTag;
  return `docker.io/${withTag.includes('/') ? '' : 'library/'}${withTag}`;
};

export class PodController implements ResourceHooks {
  readonly info = PODS;
  readonly #o: PodControllerOptions;
  readonly #running = new Map<string, Running>();

  constructor(options: PodControllerOptions) {
    this.#o = options;
  }

  admit(o: KubeObject): void {
    const pod = o as Pod;
    const errors: FieldError[] = [];
    validateMeta(pod.metadata, errors);
    if ((pod.metadata.finalizers ?? []).length > 0) errors.push({ field: 'metadata.finalizers', type: 'FieldValueForbidden', detail: 'not supported by the Kubernetes stand-in (a test double)' });
    pod.spec ??= {};
    validatePodSpec(pod.spec, errors);
    if (errors.length > 0) throw invalid('Pod', '', pod.metadata.name, errors);
    const rc = pod.spec.runtimeClassName;
    if (rc !== undefined && !this.#o.runtimeClasses.has(rc)) throw forbidden(PODS, pod.metadata.name, `pod rejected: RuntimeClass "${rc}" not found`);
    defaultPod(pod.spec, `kube-api-access-${randomSuffix()}`);
    pod.status = { phase: 'Pending', qosClass: qosClassOf(pod.spec) };
  }

  created(o: KubeObject): void {
    this.#running.set(o.metadata.uid!, {});
    this.#later(o as Pod, 0, () => this.#schedule(o.metadata.namespace!, o.metadata.name, o.metadata.uid!));
  }

  update(old: KubeObject, updated: KubeObject): KubeObject {
    const o = old as Pod;
    const u = updated as Pod;
    if (JSON.stringify(o.spec) !== JSON.stringify(u.spec)) {
      throw invalid('Pod', '', o.metadata.name, [
        {
          field: 'spec',
          type: 'FieldValueForbidden',
          detail: 'pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)',
        },
      ]);
    }
    return { ...u, status: o.status };
  }

  /** The pod as stored, or undefined when it is gone or another pod took its name. */
  #current(namespace: string, name: string, uid: string): Pod | undefined {
    const p = this.#o.store.get('pods', namespace, name) as Pod | undefined;
    return p && p.metadata.uid === uid ? p : undefined;
  }

  #mutate(namespace: string, name: string, uid: string, change: (p: Pod) => void): Pod | undefined {
    const p = this.#current(namespace, name, uid);
    if (!p) return undefined;
    const before = JSON.stringify(p);
    change(p);
    return JSON.stringify(p) === before ? p : (this.#o.store.update('pods', p) as Pod);
  }

  #later(pod: Pod, ms: number, step: () => Promise<void> | void): void {
    const r = this.#running.get(pod.metadata.uid!);
    if (!r || r.stopping) return;
    clearTimeout(r.timer);
    r.timer = setTimeout(() => {
      Promise.resolve()
        .then(step)
        .catch((err: unknown) => this.#o.log(`pod ${pod.metadata.namespace}/${pod.metadata.name}: ${(err as Error).message}`));
    }, ms);
  }

  #setCondition(p: Pod, type: string, status: boolean, extra: Record<string, unknown> = {}): void {
    const conditions = (p.status.conditions ??= []) as Record<string, unknown>[];
    const at = conditions.findIndex((c) => c.type === type);
    const old = conditions[at];
    const next = condition(type, status, extra);
    if (old && old.status === next.status) next.lastTransitionTime = old.lastTransitionTime as string;
    if (old && JSON.stringify({ ...old, lastTransitionTime: 0 }) === JSON.stringify({ ...next, lastTransitionTime: 0 })) return;
    if (at >= 0) conditions[at] = next;
    else conditions.push(next);
  }

  /** The pods bound to the node that still hold resources. */
  #boundPods(except: string): Pod[] {
    return (this.#o.store.list('pods') as Pod[]).filter(
      (p) => p.metadata.uid !== except && p.spec.nodeName && !['Succeeded', 'Failed'].includes(p.status?.phase),
    );
  }

  async #schedule(namespace: string, name: string, uid: string): Promise<void> {
    const pod = this.#current(namespace, name, uid);
    if (!pod || pod.metadata.deletionTimestamp) return;
    const claims = ((pod.spec.volumes ?? []) as any[]).filter((v) => v.persistentVolumeClaim).map((v) => v.persistentVolumeClaim.claimName as string);
    const claimReason = claims.map((c) => this.#o.claims().unusable(namespace, c)).find((r) => r !== undefined);
    const reason = claimReason ?? unschedulableReason(this.#o.node, pod as any, this.#boundPods(uid) as any[]);
    if (reason) {
      this.#mutate(namespace, name, uid, (p) => this.#setCondition(p, 'PodScheduled', false, { reason: 'Unschedulable', message: reason }));
      this.#later(pod, RETRY_MS, () => this.#schedule(namespace, name, uid));
      return;
    }
    const bound = this.#mutate(namespace, name, uid, (p) => {
      p.spec.nodeName = NODE_NAME;
      this.#setCondition(p, 'PodScheduled', true);
      p.status.startTime = now();
      p.status.hostIP = '127.0.0.1';
      p.status.hostIPs = [{ ip: '127.0.0.1' }];
      this.#setCondition(p, 'PodReadyToStartContainers', false);
      this.#setCondition(p, 'Initialized', true);
      this.#setCondition(p, 'Ready', false, { reason: 'ContainersNotReady', message: `containers with unready status: [${p.spec.containers[0].name}]` });
      this.#setCondition(p, 'ContainersReady', false, { reason: 'ContainersNotReady', message: `containers with unready status: [${p.spec.containers[0].name}]` });
      p.status.containerStatuses = [this.#containerStatus(p, { waiting: { reason: 'ContainerCreating' } })];
    });
    if (bound) await this.#pull(bound, false);
  }

  #containerStatus(p: Pod, state: Record<string, unknown>, extra: Record<string, unknown> = {}): Record<string, unknown> {
    const c = p.spec.containers[0];
    const old = (p.status.containerStatuses?.[0] ?? {}) as Record<string, unknown>;
    return {
      name: c.name,
      state,
      lastState: old.lastState ?? {},
      ready: false,
      restartCount: old.restartCount ?? 0,
      image: c.image,
      imageID: old.imageID ?? '',
      started: false,
      ...(old.containerID ? { containerID: old.containerID } : {}),
      ...extra,
    };
  }

  async #pull(pod: Pod, failedBefore: boolean): Promise<void> {
    const { namespace, name, uid } = pod.metadata as { namespace: string; name: string; uid: string };
    const image = pod.spec.containers[0].image as string;
    const info = await this.#o.runtime.image(image);
    if (!info) {
      // The stand-in has no registry: an image the local engine lacks fails to pull, as a missing one does.
      const ref = normalized(image);
      const message = `Failed to pull image "${image}": rpc error: code = NotFound desc = failed to pull and unpack image "${ref}": failed to resolve reference "${ref}": ${ref}: not found`;
      this.#mutate(namespace, name, uid, (p) => {
        p.status.containerStatuses = [this.#containerStatus(p, { waiting: { reason: 'ErrImagePull', message } })];
      });
      this.#later(pod, PULL_BACKOFF_MS, () => {
        this.#mutate(namespace, name, uid, (p) => {
          p.status.containerStatuses = [this.#containerStatus(p, { waiting: { reason: 'ImagePullBackOff', message: `Back-off pulling image "${image}"` } })];
        });
        this.#later(pod, RETRY_MS * 3, () => this.#pull(pod, true));
      });
      return;
    }
    void failedBefore;
    await this.#start(pod, info);
  }

  async #start(pod: Pod, image: { user: string }): Promise<void> {
    const { namespace, name, uid } = pod.metadata as { namespace: string; name: string; uid: string };
    const r = this.#running.get(uid);
    if (!r || r.stopping) return;
    const current = this.#current(namespace, name, uid);
    if (!current || current.metadata.deletionTimestamp) return;
    try {
      const isolated = this.#o.policies().fullyIsolated(current);
      const { labels, annotations } = current.metadata as { labels?: Record<string, string>; annotations?: Record<string, string> };
      r.containerId = await this.#o.runtime.start({ namespace, name, uid, ...(labels ? { labels } : {}), ...(annotations ? { annotations } : {}) }, current.spec, image, isolated);
      this.#o.policies().started(r.containerId, isolated);
    } catch (err) {
      const reason = err instanceof ContainerConfigError ? 'CreateContainerConfigError' : 'CreateContainerError';
      this.#mutate(namespace, name, uid, (p) => {
        p.status.containerStatuses = [this.#containerStatus(p, { waiting: { reason, message: (err as Error).message } })];
      });
      this.#later(pod, RETRY_MS * 3, () => this.#pull(pod, false));
      return;
    }
    if (r.stopping) return;
    const container = this.#o.docker.getContainer(r.containerId);
    const info = await container.inspect();
    const ip = info.NetworkSettings.Networks?.[this.#o.network]?.IPAddress ?? '';
    this.#mutate(namespace, name, uid, (p) => {
      p.status.phase = 'Running';
      if (ip) {
        p.status.podIP = ip;
        p.status.podIPs = [{ ip }];
      }
      this.#setCondition(p, 'PodReadyToStartContainers', true);
      this.#setCondition(p, 'Ready', true);
      this.#setCondition(p, 'ContainersReady', true);
      p.status.containerStatuses = [
        this.#containerStatus(p, { running: { startedAt: info.State.StartedAt.replace(/\.\d+Z$/, 'Z') } }, {
          ready: true,
          started: true,
          imageID: info.Image,
          containerID: `docker://${info.Id}`,
        }),
      ];
    });
    void this.#watchExit(pod, r.containerId);
  }

  async #watchExit(pod: Pod, containerId: string): Promise<void> {
    const { namespace, name, uid } = pod.metadata as { namespace: string; name: string; uid: string };
    const container = this.#o.docker.getContainer(containerId);
    await container.wait().catch(() => undefined);
    const r = this.#running.get(uid);
    const info = await container.inspect().catch(() => undefined);
    if (!r || r.stopping || r.containerId !== containerId) return;
    const exitCode = info?.State.ExitCode ?? 137;
    const terminated = {
      exitCode,
      reason: info?.State.OOMKilled ? 'OOMKilled' : exitCode === 0 ? 'Completed' : 'Error',
      startedAt: (info?.State.StartedAt ?? now()).replace(/\.\d+Z$/, 'Z'),
      finishedAt: (info?.State.FinishedAt ?? now()).replace(/\.\d+Z$/, 'Z'),
      containerID: `docker://${containerId}`,
    };
    const current = this.#current(namespace, name, uid);
    if (!current) return;
    const policy = current.spec.restartPolicy as string;
    const restart = policy === 'Always' || (policy === 'OnFailure' && exitCode !== 0);
    const notReady = { reason: 'PodCompleted' };
    if (!restart) {
      this.#mutate(namespace, name, uid, (p) => {
        p.status.phase = exitCode === 0 ? 'Succeeded' : 'Failed';
        this.#setCondition(p, 'PodReadyToStartContainers', false);
        this.#setCondition(p, 'Ready', false, notReady);
        this.#setCondition(p, 'ContainersReady', false, notReady);
        p.status.containerStatuses = [this.#containerStatus(p, { terminated }, { containerID: `docker://${containerId}` })];
      });
      await this.#o.runtime.stop({ namespace, name, uid }, current.spec, undefined, 0);
      return;
    }
    // The kubelet restarts it after a back-off that doubles from 10 s (CrashLoopBackOff).
    const restarts = ((current.status.containerStatuses?.[0]?.restartCount as number) ?? 0) + 1;
    const backoffS = Math.min(300, 10 * 2 ** (restarts - 1));
    const c = current.spec.containers[0];
    this.#mutate(namespace, name, uid, (p) => {
      this.#setCondition(p, 'Ready', false, { reason: 'ContainersNotReady', message: `containers with unready status: [${c.name}]` });
      this.#setCondition(p, 'ContainersReady', false, { reason: 'ContainersNotReady', message: `containers with unready status: [${c.name}]` });
      p.status.containerStatuses = [
        this.#containerStatus(
          p,
          { waiting: { reason: 'CrashLoopBackOff', message: `back-off ${backoffS}s restarting failed container=${c.name} pod=${name}_${namespace}(${uid})` } },
          { lastState: { terminated }, restartCount: restarts },
        ),
      ];
    });
    await container.remove({ force: true }).catch(() => undefined);
    this.#later(current, backoffS * 1000, () => this.#pull(current, false));
  }

  /** Graceful deletion: deletionTimestamp now, the container stopped within the grace period, then the object gone. */
  async delete(o: KubeObject, request: DeleteRequest): Promise<unknown> {
    const pod = o as Pod;
    const { namespace, name, uid } = pod.metadata as { namespace: string; name: string; uid: string };
    const unbound = !pod.spec.nodeName || ['Succeeded', 'Failed'].includes(pod.status?.phase);
    const grace = unbound ? 0 : Math.max(0, request.gracePeriodSeconds ?? pod.spec.terminationGracePeriodSeconds ?? 30);
    const r = this.#running.get(uid) ?? {};
    this.#running.set(uid, r);
    if (r.stopping && grace > 0) return pod;
    r.stopping = true;
    clearTimeout(r.timer);
    const finish = async () => {
      const container = r.containerId ? this.#o.docker.getContainer(r.containerId) : undefined;
      await container?.stop({ t: grace }).catch(() => undefined);
      const info = await container?.inspect().catch(() => undefined);
      if (info && grace > 0) {
        // As the kubelet reports it before the object goes: the container terminated, the pod not ready.
        const code = info.State.ExitCode ?? 137;
        const terminated = { exitCode: code, reason: code === 0 ? 'Completed' : 'Error', startedAt: info.State.StartedAt.replace(/\.\d+Z$/, 'Z'), finishedAt: info.State.FinishedAt.replace(/\.\d+Z$/, 'Z'), containerID: `docker://${info.Id}` };
        this.#mutate(namespace, name, uid, (p) => {
          this.#setCondition(p, 'Ready', false, { reason: 'PodCompleted' });
          this.#setCondition(p, 'ContainersReady', false, { reason: 'PodCompleted' });
          p.status.containerStatuses = [this.#containerStatus(p, { terminated })];
        });
      }
      await this.#o.runtime.stop({ namespace, name, uid }, pod.spec, r.containerId, 0);
      this.#running.delete(uid);
      if (this.#current(namespace, name, uid)) this.#o.store.remove('pods', namespace, name);
      this.#o.claims().podGone();
    };
    if (grace === 0) {
      const gone = this.#o.store.remove('pods', namespace, name);
      void finish();
      return gone;
    }
    const marked = this.#mutate(namespace, name, uid, (p) => {
      p.metadata.deletionTimestamp = new Date(Date.now() + grace * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
      p.metadata.deletionGracePeriodSeconds = grace;
    });
    void finish();
    return marked;
  }

  /** A kubelet's node-pressure eviction: the container killed, the pod Failed with reason Evicted (it stays until deleted). */
  async evictForNodePressure(namespace: string, name: string, resource: string): Promise<Pod | undefined> {
    const pod = this.#o.store.get('pods', namespace, name) as Pod | undefined;
    if (!pod) return undefined;
    const uid = pod.metadata.uid!;
    const r = this.#running.get(uid);
    if (r) {
      r.stopping = true;
      clearTimeout(r.timer);
      await this.#o.runtime.stop({ namespace, name, uid }, pod.spec, r.containerId, 0);
    }
    const message = `The node was low on resource: ${resource}. `;
    return this.#mutate(namespace, name, uid, (p) => {
      p.status.phase = 'Failed';
      p.status.reason = 'Evicted';
      p.status.message = message;
      this.#setCondition(p, 'DisruptionTarget', true, { reason: 'TerminationByKubelet', message });
      this.#setCondition(p, 'Ready', false, { reason: 'PodFailed' });
      this.#setCondition(p, 'ContainersReady', false, { reason: 'PodFailed' });
      const old = p.status.containerStatuses?.[0]?.state?.running;
      p.status.containerStatuses = [
        this.#containerStatus(p, { terminated: { exitCode: 137, reason: 'ContainerStatusUnknown', message: 'The container could not be located when the pod was terminated', startedAt: old?.startedAt ?? null, finishedAt: null } }),
      ];
    });
  }

  /** The pods' containers still to be removed when the stand-in stops. */
  async stopAll(): Promise<void> {
    for (const r of this.#running.values()) {
      r.stopping = true;
      clearTimeout(r.timer);
    }
  }

  /** The container running a pod, for exec. */
  containerOf(uid: string): string | undefined {
    return this.#running.get(uid)?.containerId;
  }
}
