/**
 * A stand-in Kubernetes API server: a TEST DOUBLE, not Kubernetes. It serves,
 * over HTTPS with bearer tokens, the part of the Kubernetes API a
 * pod-per-task backend uses (namespaces, pods with exec, eviction and watch,
 * PersistentVolumeClaims, NetworkPolicies, discovery), with the API
 * server's JSON shapes, Status errors and validation, and runs each pod as a
 * container of the local Docker engine. Anything else is 404. Clients reach
 * it through an ordinary kubeconfig (see kubeconfig.ts); README.md beside
 * this file lists what it serves and how it differs from a cluster.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import Dockerode from 'dockerode';
import { ApiHandlers, type ApiRequest } from './api-handlers.js';
import { ClaimController } from './claims.js';
import { apiGroupList, apiResourceList, apiVersions, versionInfo, type Subresource } from './discovery.js';
import { badRequest, methodNotAllowed, notFound, pathNotFound, StatusError } from './errors.js';
import { execOptionsOf, ExecServer, selectProtocol } from './exec.js';
import { loadSchemas } from './field-validation.js';
import { openApiV3 } from './openapi.js';
import { readBody, sendError, sendJson } from './http-io.js';
import { NamespaceHooks } from './namespaces.js';
import { NetworkPolicyController } from './network-policies.js';
import { PodRuntime, STANDIN_LABEL } from './pod-runtime.js';
import { PodController, PODS } from './pods.js';
import { Authorizer, type User } from './rbac.js';
import type { ResourceHooks } from './resource.js';
import { makeNode, type NodeOptions } from './scheduler.js';
import { ObjectStore } from './store.js';

export interface KubernetesStandInOptions {
  readonly port?: number;
  readonly host?: string;
  /** PEM server certificate and key (the kubeconfig trusts their CA). */
  readonly tls: { readonly cert: string; readonly key: string };
  readonly users: readonly User[];
  /** Namespaces to have besides the built-in ones. */
  readonly namespaces?: readonly string[];
  readonly node?: NodeOptions;
  /** RuntimeClass name -> Docker runtime (`gvisor` -> `runsc`). */
  readonly runtimeClasses?: ReadonlyMap<string, string>;
  /** A directory of its own (service-account token files); removed on close. */
  readonly stateDir: string;
  readonly docker?: Dockerode;
  readonly log?: (line: string) => void;
}

const SUBRESOURCES: readonly Subresource[] = [
  { parent: 'pods', name: 'exec', kind: 'PodExecOptions', verbs: ['create', 'get'] },
  { parent: 'pods', name: 'eviction', kind: 'Eviction', verbs: ['create'], group: 'policy', version: 'v1' },
];

const VERB_BY_METHOD: Readonly<Record<string, string>> = { POST: 'create', PUT: 'update', PATCH: 'patch', DELETE: 'delete' };

interface Route {
  readonly hooks: ResourceHooks;
  readonly namespace: string | undefined;
  readonly name: string;
  readonly subresource: string | undefined;
}

export class KubernetesStandIn {
  readonly instance = randomBytes(5).toString('hex');
  readonly #o: KubernetesStandInOptions;
  readonly #docker: Dockerode;
  readonly #store = new ObjectStore();
  readonly #auth: Authorizer;
  readonly #api: ApiHandlers;
  readonly #exec: ExecServer;
  readonly #network: string;
  readonly #pods: PodController;
  readonly #claims: ClaimController;
  readonly #policies: NetworkPolicyController;
  readonly #resources: readonly ResourceHooks[];
  readonly #sockets = new Set<Socket>();
  readonly #log: (line: string) => void;
  #server: Server | undefined;

  constructor(options: KubernetesStandInOptions) {
    this.#o = options;
    this.#docker = options.docker ?? new Dockerode();
    this.#log = options.log ?? (() => undefined);
    this.#auth = new Authorizer(options.users);
    this.#api = new ApiHandlers(this.#store);
    this.#exec = new ExecServer(this.#docker);
    this.#network = `k8s-standin-${this.instance}`;
    const runtimeClasses = options.runtimeClasses ?? new Map<string, string>();
    this.#claims = new ClaimController(this.#store, this.#docker, this.instance);
    const runtime = new PodRuntime({
      docker: this.#docker,
      instance: this.instance,
      network: this.#network,
      runtimeClasses,
      stateDir: options.stateDir,
      claimVolume: (ns, claim) => this.#claims.volumeOf(ns, claim),
    });
    this.#pods = new PodController({
      store: this.#store,
      runtime,
      docker: this.#docker,
      node: makeNode(options.node),
      network: this.#network,
      runtimeClasses,
      claims: () => this.#claims,
      policies: () => this.#policies,
      log: this.#log,
    });
    this.#policies = new NetworkPolicyController(this.#store, this.#docker, this.#network, (uid) => this.#pods.containerOf(uid));
    this.#resources = [new NamespaceHooks(), this.#pods, this.#claims, this.#policies];
    NamespaceHooks.seed(this.#store, options.namespaces ?? []);
    // Labels of a running pod can change (a warm pool claimed by relabelling): policies apply anew.
    this.#store.watch(Number(this.#store.resourceVersion), (e) => {
      if (e.resource === 'pods' && e.type === 'MODIFIED' && JSON.stringify(e.previous?.metadata.labels) !== JSON.stringify(e.object.metadata.labels)) {
        void this.#policies.enforce();
      }
    });
  }

  get port(): number {
    return (this.#server!.address() as AddressInfo).port;
  }

  /** The label every container, volume and network of this stand-in carries: `key=value`. */
  get label(): string {
    return `${STANDIN_LABEL}=${this.instance}`;
  }

  async listen(): Promise<void> {
    await loadSchemas();
    await this.#docker.createNetwork({ Name: this.#network, Driver: 'bridge', Labels: { [STANDIN_LABEL]: this.instance } });
    const server = createServer({ cert: this.#o.tls.cert, key: this.#o.tls.key }, (req, res) => void this.#handle(req, res));
    server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => void this.#upgrade(req, socket, head));
    server.on('connection', (s: Socket) => {
      this.#sockets.add(s);
      s.once('close', () => this.#sockets.delete(s));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.#o.port ?? 0, this.#o.host ?? '127.0.0.1', () => resolve());
    });
    this.#server = server;
  }

  /** Stops serving and removes every container, volume and network this stand-in made. */
  async close(): Promise<void> {
    await this.#pods.stopAll();
    this.#api.closeWatches();
    this.#exec.close();
    const server = this.#server;
    if (server) {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of this.#sockets) s.destroy();
      });
    }
    const filters = { label: [this.label] };
    const containers = await this.#docker.listContainers({ all: true, filters });
    await Promise.all(containers.map((c) => this.#docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
    const { Volumes: volumes } = await this.#docker.listVolumes({ filters });
    await Promise.all((volumes ?? []).map((v) => this.#docker.getVolume(v.Name).remove().catch(() => undefined)));
    await this.#docker.getNetwork(this.#network).remove().catch(() => undefined);
    rmSync(this.#o.stateDir, { recursive: true, force: true });
  }

  /** A node-pressure eviction of a pod, as a kubelet does it (a test hook, not part of the Kubernetes API). */
  evict(namespace: string, name: string, resource = 'memory'): Promise<unknown> {
    return this.#pods.evictForNodePressure(namespace, name, resource);
  }

  #route(url: URL): Route | 'discovery' | undefined {
    const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    let group: string;
    let version: string;
    let rest: string[];
    if (parts[0] === 'api' && parts[1] === 'v1') [group, version, rest] = ['', 'v1', parts.slice(2)];
    else if (parts[0] === 'apis' && parts.length >= 3) [group, version, rest] = [parts[1]!, parts[2]!, parts.slice(3)];
    else return undefined;
    if (rest.length === 0) return 'discovery';
    const find = (name: string) => this.#resources.find((h) => h.info.name === name && h.info.group === group && h.info.version === version);
    // /namespaces/NS is the Namespace itself; /namespaces/NS/RESOURCE... is a namespaced resource.
    if (rest[0] === 'namespaces' && rest.length >= 3) {
      const hooks = find(rest[2]!);
      if (!hooks || !hooks.info.namespaced || rest.length > 5) return undefined;
      return { hooks, namespace: rest[1]!, name: rest[3] ?? '', subresource: rest[4] };
    }
    const hooks = find(rest[0]!);
    if (!hooks || rest.length > 2 || (hooks.info.namespaced && rest.length > 1)) return undefined;
    return { hooks, namespace: undefined, name: rest[1] ?? '', subresource: undefined };
  }

  #discovery(url: URL, res: ServerResponse): boolean {
    const path = url.pathname.replace(/\/+$/, '') || '/';
    const infos = this.#resources.map((h) => h.info);
    let body: unknown;
    if (path === '/version') body = versionInfo();
    else if (path === '/api') body = apiVersions(`127.0.0.1:${this.port}`);
    else if (path === '/apis') body = apiGroupList(infos);
    else if (path === '/api/v1') body = apiResourceList('', 'v1', infos, SUBRESOURCES);
    else if (path.startsWith('/openapi/v3')) body = openApiV3(path, infos);
    else {
      const m = /^\/apis\/([^/]+)\/([^/]+)$/.exec(path);
      if (m) body = apiResourceList(m[1]!, m[2]!, infos, SUBRESOURCES);
    }
    if (body === undefined) return false;
    sendJson(res, 200, body);
    return true;
  }

  #authorize(user: User, verb: string, route: Route, subresource?: string): void {
    const denied = this.#auth.check(user, {
      verb,
      group: route.hooks.info.group,
      resource: route.hooks.info.name,
      ...(subresource ? { subresource } : {}),
      ...(route.namespace !== undefined ? { namespace: route.namespace } : {}),
      name: route.name,
    });
    if (denied) throw denied;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? 'GET';
    const url = new URL(req.url ?? '/', 'https://stand-in');
    this.#log(`${method} ${url.pathname}${url.search}`);
    try {
      if (['/healthz', '/livez', '/readyz'].includes(url.pathname)) {
        res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
        return;
      }
      const user = this.#auth.authenticate(req);
      if (method === 'GET' && this.#discovery(url, res)) return;
      if (url.pathname.startsWith('/stand-in/')) {
        await this.#testHook(url, method, res);
        return;
      }
      const route = this.#route(url);
      if (route === 'discovery' || (route === undefined && /^\/apis?(\/|$)/.test(url.pathname))) throw pathNotFound();
      if (route === undefined) {
        res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('404 page not found\n');
        return;
      }
      if (route.subresource !== undefined) {
        await this.#subresource(req, res, url, method, user, route);
        return;
      }
      const r: ApiRequest = { req, res, query: url.searchParams, hooks: route.hooks, namespace: route.namespace, name: route.name };
      const watch = url.searchParams.get('watch') === 'true' || url.searchParams.get('watch') === '1';
      const verb = method === 'GET' ? (route.name ? 'get' : watch ? 'watch' : 'list') : VERB_BY_METHOD[method];
      if (!verb || !route.hooks.info.verbs.includes(verb) || (route.name === '' && verb !== 'create' && verb !== 'list' && verb !== 'watch') || (route.name !== '' && verb === 'create')) {
        throw methodNotAllowed(method);
      }
      this.#authorize(user, verb, route);
      if (verb === 'get') this.#api.get(r);
      else if (verb === 'list' || verb === 'watch') this.#api.list(r);
      else if (verb === 'create') await this.#api.create(r);
      else if (verb === 'update') await this.#api.update(r);
      else if (verb === 'patch') await this.#api.patch(r);
      else await this.#api.delete(r);
    } catch (err) {
      sendError(res, err);
    }
  }

  async #subresource(req: IncomingMessage, res: ServerResponse, url: URL, method: string, user: User, route: Route): Promise<void> {
    if (route.hooks.info !== PODS || !route.name) throw pathNotFound();
    if (route.subresource === 'exec') {
      this.#authorize(user, method === 'GET' ? 'get' : 'create', route, 'exec');
      throw badRequest('Upgrade request required');
    }
    if (route.subresource === 'eviction') {
      if (method !== 'POST') throw methodNotAllowed(method);
      this.#authorize(user, 'create', route, 'eviction');
      const body = ((await readBody(req)) ?? {}) as { deleteOptions?: { gracePeriodSeconds?: number } };
      const pod = this.#store.get('pods', route.namespace, route.name);
      if (!pod) throw notFound(PODS, route.name);
      await this.#pods.delete(pod, { gracePeriodSeconds: body.deleteOptions?.gracePeriodSeconds });
      sendJson(res, 201, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', code: 201 });
      return;
    }
    throw pathNotFound();
  }

  /** `POST /stand-in/v1/namespaces/NS/pods/NAME/node-pressure-eviction?resource=memory`: a test hook, outside the Kubernetes API. */
  async #testHook(url: URL, method: string, res: ServerResponse): Promise<void> {
    const m = /^\/stand-in\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/node-pressure-eviction$/.exec(url.pathname);
    if (!m || method !== 'POST') throw pathNotFound();
    const pod = await this.evict(decodeURIComponent(m[1]!), decodeURIComponent(m[2]!), url.searchParams.get('resource') ?? 'memory');
    if (!pod) throw notFound(PODS, decodeURIComponent(m[2]!));
    sendJson(res, 200, pod);
  }

  async #upgrade(req: IncomingMessage, socket: Socket, head: Buffer): Promise<void> {
    socket.on('error', () => socket.destroy());
    const url = new URL(req.url ?? '/', 'https://stand-in');
    const method = req.method ?? 'GET';
    this.#log(`${method} ${url.pathname}${url.search} (upgrade)`);
    try {
      const user = this.#auth.authenticate(req);
      const route = this.#route(url);
      if (!route || route === 'discovery' || route.hooks.info !== PODS || route.subresource !== 'exec' || !route.name) throw pathNotFound();
      // Since Kubernetes 1.31 a WebSocket exec (a GET) needs `create` on pods/exec as well as `get`.
      if (method === 'GET') this.#authorize(user, 'get', route, 'exec');
      this.#authorize(user, 'create', route, 'exec');
      const pod = this.#store.get('pods', route.namespace, route.name) as { spec: { containers: { name: string }[] }; status: { phase: string }; metadata: { uid: string } } | undefined;
      if (!pod) throw notFound(PODS, route.name);
      const options = execOptionsOf(url.searchParams, pod.spec.containers[0]!.name);
      if (!pod.spec.containers.some((c) => c.name === options.container)) throw badRequest(`container ${options.container} is not valid for pod ${route.name}`);
      if (pod.status.phase === 'Succeeded' || pod.status.phase === 'Failed') {
        throw badRequest(`cannot exec into a container in a completed pod; current phase is ${pod.status.phase}`);
      }
      const containerId = this.#pods.containerOf(pod.metadata.uid);
      if (!containerId || pod.status.phase !== 'Running') throw badRequest(`unable to upgrade connection: container not found ("${options.container}")`);
      const protocol = selectProtocol(req);
      await this.#exec.serve(req, socket, head, containerId, options, protocol);
    } catch (err) {
      const e = err instanceof StatusError ? err : new StatusError(500, 'InternalError', `Internal error occurred: ${(err as Error).message}`);
      const text = JSON.stringify(e.toStatus());
      socket.end(`HTTP/1.1 ${e.code} ${e.reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`);
    }
  }
}
