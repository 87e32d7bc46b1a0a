/**
 * Kubernetes stand-in (a test double): the discovery documents kubectl and
 * client libraries read before they call an API (`/version`, `/api`,
 * `/api/v1`, `/apis`, `/apis/GROUP/VERSION`), listing only what the stand-in
 * serves. Aggregated discovery is not served: clients fall back to these,
 * as they do with older servers.
 */
import type { ResourceInfo } from './resource.js';

/** The Kubernetes version whose API the stand-in imitates. */
export const SERVED_VERSION = { major: '1', minor: '32', gitVersion: 'v1.32.4+standin' };

export function versionInfo(): Record<string, string> {
  return {
    ...SERVED_VERSION,
    gitCommit: 'kubernetes-stand-in-test-double',
    gitTreeState: 'clean',
    buildDate: '2026-01-01T00:00:00Z',
    goVersion: 'go1.23.8',
    compiler: 'gc',
    platform: `linux/${process.arch === 'arm64' ? 'arm64' : 'amd64'}`,
  };
}

export interface Subresource {
  readonly parent: string;
  readonly name: string;
  readonly kind: string;
  readonly verbs: readonly string[];
  readonly group?: string;
  readonly version?: string;
}

export function apiVersions(serverAddress: string): Record<string, unknown> {
  return { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress }] };
}

/** `/apis`: one entry per group (other than core) that a served resource belongs to. */
export function apiGroupList(resources: readonly ResourceInfo[]): Record<string, unknown> {
  const groups = [...new Set(resources.map((r) => r.group).filter(Boolean))].sort();
  return {
    kind: 'APIGroupList',
    apiVersion: 'v1',
    groups: groups.map((name) => {
      const version = resources.find((r) => r.group === name)!.version;
      const gv = { groupVersion: `${name}/${version}`, version };
      return { name, versions: [gv], preferredVersion: gv };
    }),
  };
}

/** `/api/v1` or `/apis/GROUP/VERSION`, or undefined when no served resource is in it. */
export function apiResourceList(
  group: string,
  version: string,
  resources: readonly ResourceInfo[],
  subresources: readonly Subresource[],
): Record<string, unknown> | undefined {
  const here = resources.filter((r) => r.group === group && r.version === version);
  if (here.length === 0) return undefined;
  const list: Record<string, unknown>[] = [];
  for (const r of here) {
    list.push({
      name: r.name,
      singularName: r.singularName,
      namespaced: r.namespaced,
      kind: r.kind,
      verbs: r.verbs,
      ...(r.shortNames ? { shortNames: r.shortNames } : {}),
      ...(r.name === 'pods' ? { categories: ['all'] } : {}),
    });
    for (const s of subresources.filter((x) => x.parent === r.name)) {
      list.push({
        name: `${r.name}/${s.name}`,
        singularName: '',
        namespaced: r.namespaced,
        ...(s.group ? { group: s.group, version: s.version } : {}),
        kind: s.kind,
        verbs: s.verbs,
      });
    }
  }
  return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: group ? `${group}/${version}` : version, resources: list };
}
