/**
 * Kubernetes stand-in (a test double): the kubeconfig through which kubectl
 * and client libraries reach it, the same kind of file a cluster hands out:
 * an https server, the CA that signed its certificate, and a bearer token
 * per user. Nothing else points a client at the stand-in.
 */
import { writeFileSync } from 'node:fs';
import { stringify } from 'yaml';
import type { User } from './rbac.js';

export const CLUSTER_NAME = 'kubernetes-standin';

/** The context of each user: the first is the current one. */
export const contextName = (user: User, index: number) => (index === 0 ? CLUSTER_NAME : `${CLUSTER_NAME}-${user.name.replace(/^standin-/, '')}`);

export function writeKubeconfig(file: string, serverUrl: string, caPem: string, users: readonly User[], namespace: string): void {
  const config = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: CLUSTER_NAME, cluster: { server: serverUrl, 'certificate-authority-data': Buffer.from(caPem).toString('base64') } }],
    users: users.map((u) => ({ name: u.name, user: { token: u.token } })),
    contexts: users.map((u, i) => ({ name: contextName(u, i), context: { cluster: CLUSTER_NAME, user: u.name, namespace } })),
    'current-context': CLUSTER_NAME,
    preferences: {},
  };
  writeFileSync(file, stringify(config), { mode: 0o600 });
}
