/**
 * Waiting for a new pod to run, and what to tell the user when it does not:
 * an image that cannot be pulled fails at once (the kubelet's
 * `ErrImagePull`/`ImagePullBackOff`, not a timeout), a container that
 * cannot be made fails at once, a pod the scheduler cannot place fails
 * after `kubernetes.pending_timeout` with the scheduler's reason. Each error
 * names the pod and what to do; the caller deletes the pod.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { FailedPreconditionError, ResourceExhaustedError, UnavailableError } from '../../../common/errors.js';
import type { KubeApi } from './kube-api.js';

const IMAGE_REASONS = new Set(['ErrImagePull', 'ImagePullBackOff', 'InvalidImageName', 'ErrImageNeverPull', 'ImageInspectError']);
const CONTAINER_REASONS = new Set(['CreateContainerConfigError', 'CreateContainerError', 'RunContainerError', 'CrashLoopBackOff']);

/** Why a pod is not running yet, or the error that says it never will; undefined while it is on its way. */
export function podProblem(pod: V1Pod, image: string, waitedMs: number, pendingTimeoutMs: number): Error | 'running' | undefined {
  const name = pod.metadata?.name ?? '?';
  const where = `pod ${name} in namespace ${pod.metadata?.namespace ?? '?'}`;
  if (pod.metadata?.deletionTimestamp) return new UnavailableError(`${where} was deleted before it started; try again`);
  const phase = pod.status?.phase;
  const state = pod.status?.containerStatuses?.[0]?.state;
  if (phase === 'Running' && state?.running) return 'running';
  if (phase === 'Failed' || phase === 'Succeeded') {
    const t = state?.terminated;
    const detail = [pod.status?.reason, pod.status?.message, t?.reason, t?.message].filter(Boolean).join(': ');
    return new UnavailableError(`${where} ended before it was ready (${phase}${detail ? `, ${detail}` : ''}); check the image runs \`sleep infinity\``);
  }
  const waiting = state?.waiting;
  if (waiting?.reason && IMAGE_REASONS.has(waiting.reason)) {
    return new FailedPreconditionError(
      `${where} cannot pull its image ${JSON.stringify(image)} (${waiting.reason}: ${waiting.message ?? 'no message'}); check ` +
        'terminal.kubernetes_image and that the cluster\'s nodes can pull it (registry reachable, the namespace\'s imagePullSecrets)',
    );
  }
  if (waiting?.reason && CONTAINER_REASONS.has(waiting.reason)) {
    return new FailedPreconditionError(
      `${where} cannot start its container (${waiting.reason}: ${waiting.message ?? 'no message'}); the image must run as ` +
        'kubernetes.run_as_user (non-root) with the settings of docs/backends/kubernetes.md',
    );
  }
  const scheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled');
  if (waitedMs < pendingTimeoutMs) return undefined;
  const seconds = Math.round(pendingTimeoutMs / 1000);
  if (scheduled?.status === 'False') {
    return new ResourceExhaustedError(
      `${where} was not scheduled within ${seconds} s (${scheduled.reason ?? 'Unschedulable'}: ${scheduled.message ?? 'no reason given'}); ` +
        'check kubernetes.node_selector and kubernetes.tolerations against the nodes, the cluster\'s free capacity and the namespace\'s ResourceQuota ' +
        '(kubernetes.pending_timeout sets how long to wait)',
    );
  }
  return new UnavailableError(
    `${where} is still ${phase ?? 'Pending'} after ${seconds} s (${waiting?.reason ?? 'no container state yet'}${waiting?.message ? `: ${waiting.message}` : ''}); ` +
      'check the pod\'s events (kubectl describe pod) or raise kubernetes.pending_timeout',
  );
}

/** Polls `name` until it runs; throws the error {@link podProblem} gives. */
export async function waitForRunning(api: KubeApi, name: string, image: string, pendingTimeoutMs: number): Promise<V1Pod> {
  const started = Date.now();
  let delay = 100;
  for (;;) {
    const pod = await api.readPod(name);
    if (!pod) throw new UnavailableError(`pod ${name} in namespace ${api.namespace} was deleted before it started; try again`);
    const problem = podProblem(pod, image, Date.now() - started, pendingTimeoutMs);
    if (problem === 'running') return pod;
    if (problem) throw problem;
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(1000, delay * 1.5);
  }
}

/** What became of a pod that stopped answering, in words for the task's notice. */
export function fateOf(pod: V1Pod | undefined): { words: string; exists: boolean } {
  if (!pod) return { words: 'was deleted', exists: false };
  if (pod.metadata?.deletionTimestamp) return { words: 'was deleted', exists: true };
  const reason = pod.status?.reason;
  const message = pod.status?.message?.trim();
  if (reason === 'Evicted') return { words: `was evicted${message ? ` (${message})` : ''}`, exists: true };
  const phase = pod.status?.phase;
  if (phase === 'Failed' || phase === 'Succeeded') {
    const t = pod.status?.containerStatuses?.[0]?.state?.terminated;
    return { words: `ended (${[t?.reason, t?.exitCode !== undefined ? `exit ${t.exitCode}` : undefined].filter(Boolean).join(', ') || phase})`, exists: true };
  }
  return { words: 'stopped answering', exists: true };
}
