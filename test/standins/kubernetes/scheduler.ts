/**
 * Kubernetes stand-in (a test double): the one node it has and the
 * scheduler's verdict on a pod, with the scheduler's own message when the
 * pod does not fit (`0/1 nodes are available: 1 Insufficient cpu. ...`).
 * It checks what a pod-per-task backend sets: nodeSelector, tolerations
 * against the node's taints, and cpu, memory, ephemeral-storage and pod
 * count requests against what the node has left.
 */
import { availableParallelism, totalmem } from 'node:os';
import { parseQuantity } from './quantity.js';

export interface Taint {
  readonly key: string;
  readonly value?: string;
  readonly effect: 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute';
}

export interface StandInNode {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly taints: readonly Taint[];
  /** Allocatable, in cores, bytes, bytes and pods. */
  readonly allocatable: { readonly cpu: number; readonly memory: number; readonly 'ephemeral-storage': number; readonly pods: number };
}

export interface NodeOptions {
  readonly labels?: Readonly<Record<string, string>>;
  readonly taints?: readonly Taint[];
  readonly cpu?: number;
  readonly memoryBytes?: number;
}

export const NODE_NAME = 'standin-node';

export function makeNode(options: NodeOptions = {}): StandInNode {
  return {
    name: NODE_NAME,
    labels: {
      'kubernetes.io/hostname': NODE_NAME,
      'kubernetes.io/os': 'linux',
      'kubernetes.io/arch': process.arch === 'arm64' ? 'arm64' : 'amd64',
      ...options.labels,
    },
    taints: options.taints ?? [],
    allocatable: {
      cpu: options.cpu ?? availableParallelism(),
      memory: options.memoryBytes ?? totalmem(),
      'ephemeral-storage': 100 * 2 ** 30,
      pods: 110,
    },
  };
}

type Resources = Record<'cpu' | 'memory' | 'ephemeral-storage', number>;

interface PodLike {
  readonly spec: {
    readonly nodeSelector?: Readonly<Record<string, string>>;
    readonly tolerations?: readonly { key?: string; operator?: string; value?: string; effect?: string }[];
    readonly containers: readonly { resources?: { requests?: Readonly<Record<string, string>> } }[];
  };
}

/** The sum of a pod's container requests. */
export function requestsOf(pod: PodLike): Resources {
  const total: Resources = { cpu: 0, memory: 0, 'ephemeral-storage': 0 };
  for (const c of pod.spec.containers) {
    for (const k of Object.keys(total) as (keyof Resources)[]) total[k] += parseQuantity(c.resources?.requests?.[k]) ?? 0;
  }
  return total;
}

function tolerates(pod: PodLike, taint: Taint): boolean {
  return (pod.spec.tolerations ?? []).some((t) => {
    if (t.effect && t.effect !== taint.effect) return false;
    if (t.operator === 'Exists') return !t.key || t.key === taint.key;
    return t.key === taint.key && (t.value ?? '') === (taint.value ?? '');
  });
}

const PREEMPTION_NOT_HELPFUL = ' preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.';
const NO_VICTIMS = ' preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.';

/**
 * Undefined when `pod` fits on `node` beside `running` (the pods bound to it
 * that still hold resources); otherwise the scheduler's message.
 */
export function unschedulableReason(node: StandInNode, pod: PodLike, running: readonly PodLike[]): string | undefined {
  for (const [k, v] of Object.entries(pod.spec.nodeSelector ?? {})) {
    if (node.labels[k] !== v) return `0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.${PREEMPTION_NOT_HELPFUL}`;
  }
  const untolerated = node.taints.find((t) => t.effect !== 'PreferNoSchedule' && !tolerates(pod, t));
  if (untolerated) {
    const shown = untolerated.value ? `{${untolerated.key}: ${untolerated.value}}` : `{${untolerated.key}: }`;
    return `0/1 nodes are available: 1 node(s) had untolerated taint ${shown}.${PREEMPTION_NOT_HELPFUL}`;
  }
  if (running.length + 1 > node.allocatable.pods) return `0/1 nodes are available: 1 Too many pods.${NO_VICTIMS}`;
  const want = requestsOf(pod);
  const used = running.map(requestsOf).reduce<Resources>(
    (a, b) => ({ cpu: a.cpu + b.cpu, memory: a.memory + b.memory, 'ephemeral-storage': a['ephemeral-storage'] + b['ephemeral-storage'] }),
    { cpu: 0, memory: 0, 'ephemeral-storage': 0 },
  );
  const short = (['cpu', 'memory', 'ephemeral-storage'] as const).filter((k) => want[k] > 0 && used[k] + want[k] > node.allocatable[k] + 1e-9);
  if (short.length > 0) return `0/1 nodes are available: ${short.map((k) => `1 Insufficient ${k}`).join(', ')}.${NO_VICTIMS}`;
  return undefined;
}

/** The scheduler's message for a pod whose claim does not exist. */
export const missingClaimReason = (claim: string) =>
  `0/1 nodes are available: persistentvolumeclaim "${claim}" not found.${PREEMPTION_NOT_HELPFUL}`;
