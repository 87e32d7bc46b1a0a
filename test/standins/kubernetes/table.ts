/**
 * Kubernetes stand-in (a test double): the server-side printing kubectl
 * asks for (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`): the
 * columns and cell text of the API server's printers for the kinds it
 * serves, so `kubectl get` shows what it shows against a cluster (READY,
 * STATUS, RESTARTS, ...).
 */
import type { IncomingMessage } from 'node:http';
import type { ResourceInfo } from './resource.js';
import type { KubeObject } from './store.js';

/* eslint-disable @typescript-eslint/no-explicit-any -- object JSON */
interface Column {
  readonly name: string;
  readonly type: string;
  readonly format?: string;
  readonly priority?: number;
}

export const wantsTable = (req: IncomingMessage) => /;\s*as=Table/.test(req.headers.accept ?? '');

/** duration.HumanDuration, as kubectl's AGE column shows it. */
export function humanDuration(ms: number): string {
  const s = Math.floor(ms / 1000);
  if (s < -1) return '<invalid>';
  if (s < 0) return '0s';
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 10) return s % 60 === 0 ? `${m}m` : `${m}m${s % 60}s`;
  if (m < 180) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 8) return m % 60 === 0 ? `${h}h` : `${h}h${m % 60}m`;
  if (h < 48) return `${h}h`;
  if (h < 192) return h % 24 === 0 ? `${h / 24}d` : `${Math.floor(h / 24)}d${h % 24}h`;
  if (h < 24 * 365 * 2) return `${Math.floor(h / 24)}d`;
  return `${Math.floor(h / 24 / 365)}y`;
}

const age = (o: KubeObject) => humanDuration(Date.now() - Date.parse(o.metadata.creationTimestamp ?? ''));
const name: Column = { name: 'Name', type: 'string', format: 'name' };
const ageColumn: Column = { name: 'Age', type: 'string' };

function podCells(o: KubeObject): unknown[] {
  const p = o as any;
  let reason: string = p.status?.reason || p.status?.phase || 'Pending';
  let restarts = 0;
  let ready = 0;
  let hasRunning = false;
  let lastRestart: number | undefined;
  const statuses = (p.status?.containerStatuses ?? []) as any[];
  for (const c of [...statuses].reverse()) {
    restarts += c.restartCount ?? 0;
    if (c.lastState?.terminated?.finishedAt) lastRestart = Date.parse(c.lastState.terminated.finishedAt);
    if (c.state?.waiting?.reason) reason = c.state.waiting.reason;
    else if (c.state?.terminated?.reason) reason = c.state.terminated.reason;
    else if (c.state?.terminated) reason = c.state.terminated.signal ? `Signal:${c.state.terminated.signal}` : `ExitCode:${c.state.terminated.exitCode}`;
    else if (c.ready && c.state?.running) {
      hasRunning = true;
      ready++;
    }
  }
  if (reason === 'Completed' && hasRunning) reason = (p.status?.conditions ?? []).some((c: any) => c.type === 'Ready' && c.status === 'True') ? 'Running' : 'NotReady';
  if (p.metadata.deletionTimestamp && !['Succeeded', 'Failed'].includes(p.status?.phase)) reason = 'Terminating';
  const restartText = restarts !== 0 && lastRestart ? `${restarts} (${humanDuration(Date.now() - lastRestart)} ago)` : String(restarts);
  return [p.metadata.name, `${ready}/${p.spec?.containers?.length ?? 0}`, reason, restartText, age(o), p.status?.podIP || '<none>', p.spec?.nodeName || '<none>', '<none>', '<none>'];
}

function selectorText(selector: any): string {
  const parts = [
    ...Object.entries(selector?.matchLabels ?? {}).map(([k, v]) => `${k}=${String(v)}`),
    ...((selector?.matchExpressions ?? []) as any[]).map((e) => `${e.key} ${String(e.operator).toLowerCase()} (${(e.values ?? []).join(',')})`),
  ];
  return parts.length ? parts.join(',') : '<none>';
}

const PRINTERS: Readonly<Record<string, { columns: Column[]; cells: (o: KubeObject) => unknown[] }>> = {
  pods: {
    columns: [
      name,
      { name: 'Ready', type: 'string' },
      { name: 'Status', type: 'string' },
      { name: 'Restarts', type: 'string' },
      ageColumn,
      { name: 'IP', type: 'string', priority: 1 },
      { name: 'Node', type: 'string', priority: 1 },
      { name: 'Nominated Node', type: 'string', priority: 1 },
      { name: 'Readiness Gates', type: 'string', priority: 1 },
    ],
    cells: podCells,
  },
  persistentvolumeclaims: {
    columns: [
      name,
      { name: 'Status', type: 'string' },
      { name: 'Volume', type: 'string' },
      { name: 'Capacity', type: 'string' },
      { name: 'Access Modes', type: 'string' },
      { name: 'StorageClass', type: 'string' },
      { name: 'VolumeAttributesClass', type: 'string' },
      ageColumn,
      { name: 'VolumeMode', type: 'string', priority: 1 },
    ],
    cells: (o) => {
      const c = o as any;
      const modes = ((c.status?.accessModes ?? []) as string[]).map((m) => ({ ReadWriteOnce: 'RWO', ReadOnlyMany: 'ROX', ReadWriteMany: 'RWX', ReadWriteOncePod: 'RWOP' })[m] ?? m).join(',');
      const phase = c.metadata.deletionTimestamp ? 'Terminating' : c.status?.phase ?? 'Pending';
      return [c.metadata.name, phase, c.spec?.volumeName ?? '', c.status?.capacity?.storage ?? '', modes, c.spec?.storageClassName ?? '<unset>', '<unset>', age(o), c.spec?.volumeMode ?? 'Filesystem'];
    },
  },
  networkpolicies: {
    columns: [name, { name: 'Pod-Selector', type: 'string' }, ageColumn],
    cells: (o) => [o.metadata.name, selectorText((o as any).spec?.podSelector), age(o)],
  },
  namespaces: {
    columns: [name, { name: 'Status', type: 'string' }, ageColumn],
    cells: (o) => [o.metadata.name, (o as any).status?.phase ?? 'Active', age(o)],
  },
};

/** A meta.k8s.io/v1 Table of `objects`; `includeObject`: None, Metadata (default) or Object. */
export function toTable(info: ResourceInfo, objects: readonly KubeObject[], meta: Record<string, unknown>, includeObject: string | null, withColumns = true): Record<string, unknown> {
  const printer = PRINTERS[info.name] ?? { columns: [name, ageColumn], cells: (o: KubeObject) => [o.metadata.name, age(o)] };
  const rowObject = (o: KubeObject) => {
    if (includeObject === 'None') return undefined;
    if (includeObject === 'Object') return o;
    return { kind: 'PartialObjectMetadata', apiVersion: 'meta.k8s.io/v1', metadata: o.metadata };
  };
  return {
    kind: 'Table',
    apiVersion: 'meta.k8s.io/v1',
    metadata: meta,
    ...(withColumns ? { columnDefinitions: printer.columns.map((c) => ({ description: '', priority: 0, format: '', ...c })) } : {}),
    rows: objects.map((o) => ({ cells: printer.cells(o), object: rowObject(o) })),
  };
}
