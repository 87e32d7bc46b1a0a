/**
 * `npm run standin -- kubernetes [options]`: starts the Kubernetes stand-in
 * (a test double of a Kubernetes API server, on the local Docker engine),
 * writes a kubeconfig for it and prints
 *
 *     listening on PORT
 *     kubeconfig PATH
 *     containers labelled berth.standin.kubernetes=INSTANCE
 *
 * then serves until SIGTERM or SIGINT and removes every container, volume
 * and network it made. See README.md beside this file.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createTestPki } from '../../support/test-pki.js';
import { contextName, writeKubeconfig } from './kubeconfig.js';
import { parseQuantity } from './quantity.js';
import type { User } from './rbac.js';
import type { Taint } from './scheduler.js';
import { KubernetesStandIn } from './server.js';

export const USAGE = `usage: npm run standin -- kubernetes [options]   (a test double of a Kubernetes API server)
  --port N                  listen on 127.0.0.1:N (default: any free port)
  --kubeconfig PATH         where to write the kubeconfig (default: in its temporary directory)
  --namespace NS            a namespace to have besides default and kube-* (repeatable); the kubeconfig's default namespace is the first
  --deny VERB:RESOURCE      adds a user "standin-restricted" (context kubernetes-standin-restricted) refused VERB on RESOURCE
                            by RBAC, e.g. create:pods/exec or delete:persistentvolumeclaims or *:networkpolicies (repeatable)
  --node-label KEY=VALUE    a label of its one node (repeatable)
  --node-taint KEY[=VALUE]:EFFECT   a taint of its node (repeatable)
  --node-cpu N / --node-memory QUANTITY   what the node can allocate (default: this machine's)
  --runtime-class NAME=DOCKER_RUNTIME     a RuntimeClass pods may name (e.g. gvisor=runsc; repeatable)
  --verbose                 log every request to stderr`;

export interface ParsedArgs {
  port: number;
  kubeconfig: string | undefined;
  namespaces: string[];
  deny: string[];
  nodeLabels: Record<string, string>;
  taints: Taint[];
  cpu: number | undefined;
  memoryBytes: number | undefined;
  runtimeClasses: Map<string, string>;
  verbose: boolean;
}

export function parseArgs(argv: readonly string[]): ParsedArgs {
  const a: ParsedArgs = { port: 0, kubeconfig: undefined, namespaces: [], deny: [], nodeLabels: {}, taints: [], cpu: undefined, memoryBytes: undefined, runtimeClasses: new Map(), verbose: false };
  const fail = (why: string): never => {
    throw new Error(`kubernetes stand-in: ${why}\n${USAGE}`);
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const value = () => argv[++i] ?? fail(`${arg} needs a value`);
    if (arg === '--port') a.port = Number(value());
    else if (arg === '--kubeconfig') a.kubeconfig = path.resolve(value());
    else if (arg === '--namespace') a.namespaces.push(value());
    else if (arg === '--deny') a.deny.push(/^[a-z*]+:[a-z*]+(\/[a-z]+)?$/.test(value()) ? argv[i]! : fail(`--deny takes VERB:RESOURCE, not ${argv[i]}`));
    else if (arg === '--node-label') {
      const [k, v] = value().split('=');
      a.nodeLabels[k!] = v ?? '';
    } else if (arg === '--node-taint') {
      const m = /^([^=:]+)(?:=([^:]*))?:(NoSchedule|PreferNoSchedule|NoExecute)$/.exec(value()) ?? fail(`--node-taint takes KEY[=VALUE]:EFFECT, not ${argv[i]}`);
      a.taints.push({ key: m[1]!, ...(m[2] ? { value: m[2] } : {}), effect: m[3] as Taint['effect'] });
    } else if (arg === '--node-cpu') a.cpu = Number(value());
    else if (arg === '--node-memory') a.memoryBytes = parseQuantity(value()) ?? fail(`--node-memory takes a quantity such as 8Gi`);
    else if (arg === '--runtime-class') {
      const [name, handler] = value().split('=');
      if (!name || !handler) fail('--runtime-class takes NAME=DOCKER_RUNTIME');
      a.runtimeClasses.set(name!, handler!);
    } else if (arg === '--verbose') a.verbose = true;
    else fail(`unknown argument ${arg}`);
  }
  if (!Number.isInteger(a.port) || a.port < 0 || a.port > 65535) fail('--port must be 0..65535');
  return a;
}

export async function main(argv: readonly string[]): Promise<void> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const args = parseArgs(argv);
  const stateDir = mkdtempSync(path.join(tmpdir(), 'berth-k8s-standin-'));
  const pki = createTestPki();
  const users: User[] = [{ name: 'standin-admin', token: randomBytes(24).toString('base64url'), deny: [] }];
  if (args.deny.length > 0) users.push({ name: 'standin-restricted', token: randomBytes(24).toString('base64url'), deny: args.deny });
  const server = pki.serverCert('kubernetes-standin');
  const standIn = new KubernetesStandIn({
    port: args.port,
    tls: { cert: readFileSync(server.certFile, 'utf8'), key: readFileSync(server.keyFile, 'utf8') },
    users,
    namespaces: args.namespaces,
    node: { labels: args.nodeLabels, taints: args.taints, ...(args.cpu ? { cpu: args.cpu } : {}), ...(args.memoryBytes ? { memoryBytes: args.memoryBytes } : {}) },
    runtimeClasses: args.runtimeClasses,
    stateDir,
    ...(args.verbose ? { log: (line: string) => process.stderr.write(`kubernetes stand-in: ${line}\n`) } : {}),
  });
  try {
    await standIn.listen();
    const kubeconfig = args.kubeconfig ?? path.join(stateDir, 'kubeconfig');
    writeKubeconfig(kubeconfig, `https://127.0.0.1:${standIn.port}`, readFileSync(pki.ca.certFile, 'utf8'), users, args.namespaces[0] ?? 'default');
    const contexts = users.map((u, i) => contextName(u, i)).join(', ');
    process.stdout.write(`listening on ${standIn.port}\nkubeconfig ${kubeconfig}\ncontainers labelled ${standIn.label}\ncontexts ${contexts}\n`);
    // Kept listening while it cleans up: a second signal must not end the process before its containers are gone.
    await new Promise<void>((resolve) => {
      process.on('SIGTERM', () => resolve());
      process.on('SIGINT', () => resolve());
    });
  } finally {
    pki[Symbol.dispose]();
    await standIn.close();
  }
}
