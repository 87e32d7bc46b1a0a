/**
 * A stand-in (test double) for Daytona's control plane and sandbox toolbox,
 * backed by the local Docker engine. It is NOT Daytona: it speaks the part of
 * the wire protocol that @daytonaio/sdk 0.218 uses for the calls Berth's
 * daytona backend makes, so the backend can be tested through the real SDK
 * without the cloud.
 *
 * - REST under `/api` (as the cloud serves it): create (an image named by
 *   `buildInfo.dockerfileContent` = `FROM IMAGE`, or a snapshot), list (by
 *   labels, one page), get by id or name, start, stop, delete, snapshot,
 *   toolbox proxy URL; a snapshot's get and delete. Bearer token checked.
 * - Toolbox under `/toolbox/<sandbox id>` (the sandbox's `toolboxProxyUrl`
 *   plus its id, as the SDK builds it): PTY create-connect over a WebSocket
 *   (binary both ways, JSON control messages, exit in the close reason), PTY
 *   kill, and `process/execute` (the SDK's per-command exec, without a
 *   timeout: the bench's baseline).
 * - Anything else answers 501 in the API's NestJS error shape, so a new SDK
 *   call shows up as a failure instead of being faked.
 *
 * A sandbox is a container (`docker run` of the image with an init and
 * `sleep infinity`); `networkBlockAll` and `networkAllowList` both give it no
 * network (the stand-in cannot enforce an allow list; it errs closed).
 * A snapshot is a `docker commit` of the sandbox's container.
 * Every container and image it makes carries a label with this stand-in's
 * instance id and is removed on close.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { PassThrough, type Duplex } from 'node:stream';
import Dockerode from 'dockerode';
import { acceptWebSocket, offeredProtocols, type ServerWebSocket } from './websocket.js';

/** Label on every container this stand-in starts: value is the instance id. */
export const STANDIN_LABEL = 'berth.standin.daytona';
const PTY_EXIT_CONTROL = 'X-Daytona-Pty-Exit-Control';
const PTY_ENVS_PREFIX = 'X-Daytona-Pty-Envs~';
const MAX_BODY_BYTES = 1024 * 1024;
/** How long a deleted sandbox stays `destroying` (its name taken) before it is gone. */
const DESTROY_DELAY_MS = 500;
/**
 * Docker scans a TTY exec's stdin for its detach sequence (ctrl-p ctrl-q by
 * default) and swallows it, which would corrupt binary input that the
 * daemon passes through untouched. A long sequence of rare control bytes
 * stands in for "none" (Docker has no way to turn the scan off).
 */
const DETACH_KEYS = 'ctrl-q,ctrl-^,ctrl-_,ctrl-],ctrl-\\,ctrl-q,ctrl-^,ctrl-_,ctrl-],ctrl-\\,ctrl-q,ctrl-^';
/** `$1`: a file holding a pid; SIGKILLs that process and all its descendants (ppid walk over /proc). */
const KILL_TREE_SCRIPT = [
  'pids=$(cat "$1" 2>/dev/null) || exit 0; all=$pids',
  'while [ -n "$pids" ]; do next=""',
  '  for s in /proc/[0-9]*/stat; do read -r pid comm st ppid rest < "$s" 2>/dev/null || continue',
  '    for p in $pids; do [ "$ppid" = "$p" ] && next="$next $pid"; done',
  '  done; all="$all $next"; pids=$next',
  'done',
  'kill -KILL $all 2>/dev/null; rm -f "$1"',
].join('\n');

type SandboxState = 'started' | 'stopped' | 'snapshotting' | 'destroying' | 'destroyed' | 'build_failed' | 'error';

/** A snapshot made of a sandbox: an image committed from its container, as Daytona keeps one in its registry. */
interface SnapshotRecord {
  readonly id: string;
  readonly name: string;
  readonly sourceSandboxId: string;
  /** The committed image (`repo:tag`); set once the commit is done. */
  image: string | undefined;
  readonly cpu: number;
  readonly memory: number;
  readonly disk: number;
  readonly createdAt: string;
  updatedAt: string;
  state: 'pending' | 'active' | 'error';
  errorReason: string | undefined;
}

interface SandboxRecord {
  readonly id: string;
  readonly name: string;
  readonly image: string;
  readonly labels: Record<string, string>;
  readonly env: Record<string, string>;
  readonly cpu: number;
  readonly memory: number;
  readonly disk: number;
  readonly networkBlockAll: boolean;
  readonly networkAllowList: string | undefined;
  /** The snapshot it was made from (its name), if any. */
  readonly snapshot: string | undefined;
  readonly autoStopInterval: number;
  readonly createdAt: string;
  updatedAt: string;
  state: SandboxState;
  errorReason: string | undefined;
  containerId: string | undefined;
}

interface PtySession {
  readonly sandboxId: string;
  readonly stream: Duplex;
  readonly pidFile: string;
  readonly clients: Set<ServerWebSocket>;
}

export interface DaytonaStandInOptions {
  /** The token the stand-in accepts (`Authorization: Bearer TOKEN`). */
  readonly apiKey: string;
  readonly port?: number;
  readonly host?: string;
  readonly docker?: Dockerode;
  /** The organization's total CPU limit over started sandboxes, as the cloud enforces it; none when unset. */
  readonly maxTotalCpu?: number;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly error: string,
    message: string,
  ) {
    super(message);
  }
}

const notImplemented = (what: string) =>
  new HttpError(501, 'Not Implemented', `the Daytona stand-in does not implement ${what}`);

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function sendError(res: ServerResponse, err: HttpError): void {
  // NestJS's HttpException body, which the SDK reads `message` from.
  sendJson(res, err.status, { statusCode: err.status, message: err.message, error: err.error });
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, 'Payload Too Large', 'request body too large');
    chunks.push(chunk);
  }
  if (size === 0) return {};
  try {
    const value: unknown = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    if (value && typeof value === 'object' && !Array.isArray(value)) return value as Record<string, unknown>;
  } catch {
    // Reported below.
  }
  throw new HttpError(400, 'Bad Request', 'request body is not a JSON object');
}

function stringRecord(value: unknown, field: string): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) throw new HttpError(400, 'Bad Request', `${field} must be an object`);
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) {
    if (typeof v !== 'string') throw new HttpError(400, 'Bad Request', `${field}.${k} must be a string`);
    out[k] = v;
  }
  return out;
}

function optionalNumber(value: unknown, field: string, fallback: number): number {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new HttpError(400, 'Bad Request', `${field} must be a non-negative number`);
  }
  return value;
}

export class DaytonaStandIn {
  readonly #options: DaytonaStandInOptions;
  readonly #docker: Dockerode;
  readonly #instance = randomBytes(6).toString('hex');
  readonly #sandboxes = new Map<string, SandboxRecord>();
  readonly #ptys = new Map<string, PtySession>();
  readonly #sockets = new Set<Socket>();
  readonly #destroying = new Set<NodeJS.Timeout>();
  readonly #snapshots = new Map<string, SnapshotRecord>();
  /** Commits and image removals under way: close() waits for them before removing what they made. */
  readonly #imageWork = new Set<Promise<unknown>>();
  /** Images of deleted snapshots that a container still used. */
  readonly #orphanImages = new Set<string>();
  #server: Server | undefined;
  #baseUrl = '';

  constructor(options: DaytonaStandInOptions) {
    this.#options = options;
    this.#docker = options.docker ?? new Dockerode();
  }

  /** The value of {@link STANDIN_LABEL} on this stand-in's containers. */
  get instance(): string {
    return this.#instance;
  }

  /** http://HOST:PORT/api: what DAYTONA_API_URL is set to. */
  get apiUrl(): string {
    return `${this.#baseUrl}/api`;
  }

  get port(): number {
    return (this.#server?.address() as AddressInfo).port;
  }

  /** Sandboxes the stand-in knows (tests look at states and labels). */
  sandboxes(): readonly Readonly<SandboxRecord>[] {
    return [...this.#sandboxes.values()];
  }

  async listen(): Promise<void> {
    const server = createServer((req, res) => void this.#handle(req, res));
    server.on('upgrade', (req: IncomingMessage, socket: Socket) => void this.#upgrade(req, socket));
    server.on('connection', (socket: Socket) => {
      this.#sockets.add(socket);
      socket.once('close', () => this.#sockets.delete(socket));
    });
    const host = this.#options.host ?? '127.0.0.1';
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.#options.port ?? 0, host, () => resolve());
    });
    this.#server = server;
    this.#baseUrl = `http://${host}:${(server.address() as AddressInfo).port}`;
  }

  /**
   * Closes every PTY WebSocket (code 1001, going away) and leaves the
   * sessions running, as a proxy that drops idle connections does.
   */
  dropPtyClients(): void {
    for (const pty of this.#ptys.values()) {
      for (const client of pty.clients) client.close(1001, 'going away');
    }
  }

  /** Snapshots the stand-in holds (tests look at their images). */
  snapshots(): readonly Readonly<SnapshotRecord>[] {
    return [...this.#snapshots.values()];
  }

  /** Stops serving and removes every container and image this stand-in made. */
  async close(): Promise<void> {
    for (const timer of this.#destroying) clearTimeout(timer);
    this.#destroying.clear();
    for (const pty of this.#ptys.values()) pty.stream.destroy();
    this.#ptys.clear();
    const server = this.#server;
    if (server) {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const socket of this.#sockets) socket.destroy();
      });
    }
    const containers = await this.#docker.listContainers({
      all: true,
      filters: { label: [`${STANDIN_LABEL}=${this.#instance}`] },
    });
    await Promise.all(
      containers.map((c) => this.#docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)),
    );
    await Promise.all([...this.#imageWork]);
    // Snapshot images: committed from containers that carry the label, so they carry it too.
    const images = await this.#docker.listImages({ all: true, filters: { label: [`${STANDIN_LABEL}=${this.#instance}`] } });
    await Promise.all(images.map((i) => this.#docker.getImage(i.Id).remove({ force: true }).catch(() => undefined)));
  }

  #track<T>(work: Promise<T>): Promise<T> {
    this.#imageWork.add(work);
    void work.finally(() => this.#imageWork.delete(work)).catch(() => undefined);
    return work;
  }

  #authorized(req: IncomingMessage): boolean {
    return req.headers.authorization === `Bearer ${this.#options.apiKey}`;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      if (!this.#authorized(req)) throw new HttpError(401, 'Unauthorized', 'Invalid credentials');
      const url = new URL(req.url ?? '/', 'http://stand-in');
      const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
      const method = req.method ?? 'GET';
      if (parts[0] === 'api' && parts[1] === 'sandbox') {
        await this.#api(method, parts.slice(2), req, res);
        return;
      }
      if (parts[0] === 'api' && parts[1] === 'snapshots') {
        this.#snapshotApi(method, parts.slice(2), res);
        return;
      }
      if (parts[0] === 'toolbox' && parts.length >= 2) {
        await this.#toolbox(method, parts[1]!, parts.slice(2), req, res);
        return;
      }
      throw notImplemented(`${method} ${url.pathname}`);
    } catch (err) {
      if (err instanceof HttpError) sendError(res, err);
      else sendError(res, new HttpError(500, 'Internal Server Error', err instanceof Error ? err.message : String(err)));
    }
  }

  #find(idOrName: string): SandboxRecord {
    const byId = this.#sandboxes.get(idOrName);
    if (byId) return byId;
    for (const s of this.#sandboxes.values()) if (s.name === idOrName) return s;
    throw new HttpError(404, 'Not Found', `Sandbox with ID or name ${idOrName} not found`);
  }

  async #api(method: string, rest: string[], req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (rest.length === 0 && method === 'GET') {
      sendJson(res, 200, this.#list(new URL(req.url ?? '/', 'http://stand-in').searchParams));
      return;
    }
    if (rest.length === 0 && method === 'POST') {
      sendJson(res, 200, this.#dto(await this.#create(await readJson(req))));
      return;
    }
    if (rest.length === 1 && method === 'GET') {
      sendJson(res, 200, this.#dto(this.#find(rest[0]!)));
      return;
    }
    if (rest.length === 1 && method === 'DELETE') {
      const s = this.#find(rest[0]!);
      if (s.state !== 'destroying') {
        // As in the cloud, deletion completes after the answer: the name stays taken until then.
        s.state = 'destroying';
        s.updatedAt = new Date().toISOString();
        const timer = setTimeout(() => {
          this.#destroying.delete(timer);
          void this.#removeContainer(s).then(() => {
            s.state = 'destroyed';
            this.#sandboxes.delete(s.id);
          });
        }, DESTROY_DELAY_MS);
        this.#destroying.add(timer);
      }
      sendJson(res, 200, this.#dto(s));
      return;
    }
    if (rest.length === 2 && method === 'POST' && rest[1] === 'start') {
      const s = this.#find(rest[0]!);
      if (s.state === 'destroying') throw new HttpError(400, 'Bad Request', `Sandbox ${s.id} is being destroyed`);
      if (!s.containerId) throw new HttpError(400, 'Bad Request', `Sandbox ${s.id} cannot be started (state ${s.state})`);
      if (s.state !== 'started') {
        await this.#docker.getContainer(s.containerId).start();
        s.state = 'started';
        s.updatedAt = new Date().toISOString();
      }
      sendJson(res, 200, this.#dto(s));
      return;
    }
    if (rest.length === 2 && method === 'POST' && rest[1] === 'stop') {
      const s = this.#find(rest[0]!);
      if (s.containerId && s.state === 'started') {
        await this.#docker.getContainer(s.containerId).stop({ t: 2 }).catch((err: { statusCode?: number }) => {
          if (err.statusCode !== 304) throw err;
        });
      }
      s.state = 'stopped';
      s.updatedAt = new Date().toISOString();
      sendJson(res, 200, this.#dto(s));
      return;
    }
    if (rest.length === 2 && method === 'POST' && rest[1] === 'snapshot') {
      const s = this.#find(rest[0]!);
      sendJson(res, 200, this.#dto(this.#snapshot(s, await readJson(req))));
      return;
    }
    if (rest.length === 2 && method === 'GET' && rest[1] === 'toolbox-proxy-url') {
      this.#find(rest[0]!);
      sendJson(res, 200, { url: `${this.#baseUrl}/toolbox` });
      return;
    }
    throw notImplemented(`${method} /api/sandbox/${rest.join('/')}`);
  }

  /** One page (no cursor support: a page holds everything up to `limit`), filtered by `labels` (JSON). */
  #list(query: URLSearchParams): Record<string, unknown> {
    for (const name of query.keys()) {
      if (name !== 'limit' && name !== 'labels') throw notImplemented(`listing sandboxes by ${name}`);
    }
    let labels: Record<string, string> = {};
    try {
      labels = stringRecord(JSON.parse(query.get('labels') ?? '{}'), 'labels');
    } catch (err) {
      if (err instanceof HttpError) throw err;
      throw new HttpError(400, 'Bad Request', 'labels must be a JSON object');
    }
    const limit = Math.min(Math.max(Number(query.get('limit') ?? 100) || 100, 1), 200);
    const items = [...this.#sandboxes.values()]
      .filter((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v))
      .slice(0, limit)
      .map((s) => this.#dto(s));
    return { items, nextCursor: null };
  }

  async #create(body: Record<string, unknown>): Promise<SandboxRecord> {
    for (const field of ['volumes', 'gpu', 'gpuType', 'secrets', 'linkedSandbox', 'domainAllowList', 'outboundProxyUrl']) {
      const v = body[field];
      if (v !== undefined && v !== null && v !== 0 && !(Array.isArray(v) && v.length === 0)) throw notImplemented(`sandbox field ${field}`);
    }
    const fromSnapshot = typeof body.snapshot === 'string' && body.snapshot !== '' ? this.#findSnapshot(body.snapshot) : undefined;
    let image: string;
    if (fromSnapshot) {
      if (body.buildInfo !== undefined && body.buildInfo !== null) throw new HttpError(400, 'Bad Request', 'a sandbox is made from a snapshot or from an image, not both');
      if (fromSnapshot.state !== 'active' || !fromSnapshot.image) {
        throw new HttpError(400, 'Bad Request', `Snapshot ${fromSnapshot.name} is ${fromSnapshot.state}`);
      }
      image = fromSnapshot.image;
    } else {
      const buildInfo = body.buildInfo as { dockerfileContent?: unknown } | undefined;
      const dockerfile = typeof buildInfo?.dockerfileContent === 'string' ? buildInfo.dockerfileContent : '';
      const from = /^FROM (\S+)\n?$/.exec(dockerfile);
      if (!from) throw notImplemented('a build other than `FROM IMAGE`');
      image = from[1]!;
    }
    const name = typeof body.name === 'string' && body.name !== '' ? body.name : randomUUID();
    for (const s of this.#sandboxes.values()) {
      if (s.name === name) throw new HttpError(409, 'Conflict', `Sandbox with name ${name} already exists`);
    }
    // As in Daytona, a sandbox made from a snapshot gets the snapshot's resources.
    const cpu = fromSnapshot?.cpu ?? optionalNumber(body.cpu, 'cpu', 1);
    const max = this.#options.maxTotalCpu;
    if (max !== undefined) {
      const used = [...this.#sandboxes.values()].filter((x) => x.state === 'started').reduce((n, x) => n + x.cpu, 0);
      // The cloud's wording and status (a BadRequestError of the API).
      if (used + cpu > max) throw new HttpError(400, 'Bad Request', `Total CPU limit exceeded. Maximum allowed: ${max}.`);
    }
    const now = new Date().toISOString();
    const allow = typeof body.networkAllowList === 'string' && body.networkAllowList !== '' ? body.networkAllowList : undefined;
    const record: SandboxRecord = {
      id: randomUUID(),
      name,
      image,
      labels: stringRecord(body.labels, 'labels'),
      env: stringRecord(body.env, 'env'),
      cpu,
      memory: fromSnapshot?.memory ?? optionalNumber(body.memory, 'memory', 1),
      disk: fromSnapshot?.disk ?? optionalNumber(body.disk, 'disk', 3),
      networkBlockAll: body.networkBlockAll === true,
      networkAllowList: allow,
      snapshot: fromSnapshot?.name,
      autoStopInterval: optionalNumber(body.autoStopInterval, 'autoStopInterval', 15),
      createdAt: now,
      updatedAt: now,
      state: 'started',
      errorReason: undefined,
      containerId: undefined,
    };
    this.#sandboxes.set(record.id, record);
    const found = await this.#docker.getImage(image).inspect().then(
      () => true,
      () => false,
    );
    if (!found) {
      // As the cloud does: the sandbox exists, its build failed.
      record.state = 'build_failed';
      record.errorReason = `image ${image} not found`;
      return record;
    }
    const container = await this.#docker.createContainer({
      name: `daytona-standin-${this.#instance}-${record.id.slice(0, 8)}`,
      Image: image,
      Entrypoint: ['sleep'],
      Cmd: ['infinity'],
      Env: Object.entries(record.env).map(([k, v]) => `${k}=${v}`),
      Labels: { [STANDIN_LABEL]: this.#instance },
      HostConfig: {
        Init: true,
        NanoCpus: Math.round(record.cpu * 1e9),
        Memory: Math.round(record.memory * 1024 ** 3),
        NetworkMode: record.networkBlockAll || allow ? 'none' : 'bridge',
      },
    });
    record.containerId = container.id;
    await container.start();
    return record;
  }

  #findSnapshot(idOrName: string): SnapshotRecord {
    const byId = this.#snapshots.get(idOrName);
    if (byId) return byId;
    for (const snap of this.#snapshots.values()) if (snap.name === idOrName) return snap;
    throw new HttpError(404, 'Not Found', `Snapshot ${idOrName} not found`);
  }

  /**
   * `POST /sandbox/{id}/snapshot`: as in Daytona, the sandbox is
   * `snapshotting` while its filesystem is captured (here: `docker commit`
   * of its container) and returns to its state after; the snapshot is
   * `pending` until then, `active` once it can make sandboxes.
   */
  #snapshot(s: SandboxRecord, body: Record<string, unknown>): SandboxRecord {
    if (body.includeMemory !== undefined && body.includeMemory !== null && body.includeMemory !== false) throw notImplemented('snapshots with memory');
    const name = body.name;
    if (typeof name !== 'string' || !/^[A-Za-z0-9._:/-]{1,255}$/.test(name)) throw new HttpError(400, 'Bad Request', 'name must be a snapshot name');
    for (const other of this.#snapshots.values()) {
      if (other.name === name) throw new HttpError(409, 'Conflict', `Snapshot with name ${name} already exists`);
    }
    if ((s.state !== 'started' && s.state !== 'stopped') || !s.containerId) {
      throw new HttpError(400, 'Bad Request', `Sandbox ${s.id} cannot be snapshotted (state ${s.state})`);
    }
    const now = new Date().toISOString();
    const snap: SnapshotRecord = {
      id: randomUUID(),
      name,
      sourceSandboxId: s.id,
      image: undefined,
      cpu: s.cpu,
      memory: s.memory,
      disk: s.disk,
      createdAt: now,
      updatedAt: now,
      state: 'pending',
      errorReason: undefined,
    };
    this.#snapshots.set(snap.id, snap);
    const previous = s.state;
    s.state = 'snapshotting';
    s.updatedAt = now;
    const container = this.#docker.getContainer(s.containerId);
    const repo = `daytona-standin-${this.#instance}`;
    void this.#track(
      (async () => {
        try {
          // The container's labels (this stand-in's) go with the image, so close() finds it.
          await container.commit({ repo, tag: snap.id, pause: true });
          snap.image = `${repo}:${snap.id}`;
          snap.state = 'active';
        } catch (err) {
          snap.state = 'error';
          snap.errorReason = err instanceof Error ? err.message : String(err);
        }
        snap.updatedAt = new Date().toISOString();
        if (s.state === 'snapshotting') s.state = previous;
        s.updatedAt = snap.updatedAt;
        if (!this.#snapshots.has(snap.id) && snap.image) await this.#removeImage(snap.image);
      })(),
    );
    return s;
  }

  /** `GET /snapshots/{idOrName}` and `DELETE /snapshots/{id}`; nothing else of the snapshot API. */
  #snapshotApi(method: string, rest: string[], res: ServerResponse): void {
    if (rest.length === 1 && method === 'GET') {
      sendJson(res, 200, this.#snapshotDto(this.#findSnapshot(rest[0]!)));
      return;
    }
    if (rest.length === 1 && method === 'DELETE') {
      const snap = this.#snapshots.get(rest[0]!);
      if (!snap) throw new HttpError(404, 'Not Found', `Snapshot ${rest[0]} not found`);
      this.#snapshots.delete(snap.id);
      // Sandboxes made from it keep their containers; the image goes when the last of them does (or at close).
      if (snap.image) void this.#track(this.#removeImage(snap.image));
      res.writeHead(200, { 'content-length': 0 });
      res.end();
      return;
    }
    throw notImplemented(`${method} /api/snapshots/${rest.join('/')}`);
  }

  /** Removes a deleted snapshot's image; one a container still uses is tried again when a container goes (and at close()). */
  async #removeImage(image: string): Promise<void> {
    try {
      await this.#docker.getImage(image).remove();
      this.#orphanImages.delete(image);
    } catch {
      this.#orphanImages.add(image);
    }
  }

  #snapshotDto(snap: SnapshotRecord): Record<string, unknown> {
    return {
      id: snap.id,
      organizationId: 'stand-in',
      general: false,
      name: snap.name,
      state: snap.state,
      size: null,
      entrypoint: null,
      cpu: snap.cpu,
      gpu: 0,
      mem: snap.memory,
      disk: snap.disk,
      errorReason: snap.errorReason ?? null,
      createdAt: snap.createdAt,
      updatedAt: snap.updatedAt,
      lastUsedAt: null,
      sourceSandboxId: snap.sourceSandboxId,
      regionIds: [],
    };
  }

  async #removeContainer(s: SandboxRecord): Promise<void> {
    for (const [id, pty] of this.#ptys) {
      if (pty.sandboxId === s.id) {
        pty.stream.destroy();
        this.#ptys.delete(id);
      }
    }
    if (s.containerId) await this.#docker.getContainer(s.containerId).remove({ force: true }).catch(() => undefined);
    for (const image of this.#orphanImages) await this.#track(this.#removeImage(image));
  }

  #dto(s: SandboxRecord): Record<string, unknown> {
    return {
      id: s.id,
      name: s.name,
      organizationId: 'stand-in',
      user: 'stand-in',
      target: 'stand-in',
      env: s.env,
      labels: s.labels,
      public: false,
      networkBlockAll: s.networkBlockAll,
      ...(s.networkAllowList ? { networkAllowList: s.networkAllowList } : {}),
      cpu: s.cpu,
      gpu: 0,
      memory: s.memory,
      disk: s.disk,
      state: s.state,
      desiredState: s.state === 'stopped' ? 'stopped' : s.state === 'destroyed' ? 'destroyed' : 'started',
      ...(s.snapshot ? { snapshot: s.snapshot } : {}),
      ...(s.errorReason ? { errorReason: s.errorReason } : {}),
      autoStopInterval: s.autoStopInterval,
      autoArchiveInterval: 10080,
      autoDeleteInterval: -1,
      volumes: [],
      createdAt: s.createdAt,
      updatedAt: s.updatedAt,
      toolboxProxyUrl: `${this.#baseUrl}/toolbox`,
    };
  }

  async #toolbox(method: string, sandboxId: string, rest: string[], req: IncomingMessage, res: ServerResponse): Promise<void> {
    const s = this.#find(sandboxId);
    if (method === 'POST' && rest.length === 2 && rest[0] === 'process' && rest[1] === 'execute') {
      sendJson(res, 200, await this.#execute(s, await readJson(req)));
      return;
    }
    if (method === 'DELETE' && rest.length === 3 && rest[0] === 'process' && rest[1] === 'pty') {
      const pty = this.#ptys.get(`${s.id}/${rest[2]}`);
      if (!pty) throw new HttpError(404, 'Not Found', 'PTY session not found');
      await this.#killPty(s, `${s.id}/${rest[2]}`, pty);
      sendJson(res, 200, { message: 'PTY session killed' });
      return;
    }
    throw notImplemented(`${method} toolbox /${rest.join('/')}`);
  }

  /** `process/execute`: the command through `sh -c`, stdout and stderr together as `result`. */
  async #execute(s: SandboxRecord, body: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (typeof body.command !== 'string') throw new HttpError(400, 'Bad Request', 'command must be a string');
    if (body.timeout !== undefined && body.timeout !== null && body.timeout !== 0) throw notImplemented('process/execute with a timeout');
    if (s.state !== 'started' || !s.containerId) throw new HttpError(409, 'Conflict', `Sandbox ${s.id} is not started`);
    const envs = stringRecord(body.envs, 'envs');
    const exec = await this.#docker.getContainer(s.containerId).exec({
      Cmd: ['sh', '-c', body.command],
      AttachStdout: true,
      AttachStderr: true,
      Env: Object.entries(envs).map(([k, v]) => `${k}=${v}`),
      ...(typeof body.cwd === 'string' && body.cwd !== '' ? { WorkingDir: body.cwd } : {}),
    });
    const stream = await exec.start({});
    const chunks: Buffer[] = [];
    const sink = new PassThrough();
    sink.on('data', (c: Buffer) => chunks.push(c));
    this.#docker.modem.demuxStream(stream, sink, sink);
    await new Promise<void>((resolve) => stream.once('end', resolve).once('close', resolve).once('error', () => resolve()));
    const info = await exec.inspect();
    return { exitCode: info.ExitCode ?? -1, result: Buffer.concat(chunks).toString('utf8') };
  }

  async #killPty(s: SandboxRecord, key: string, pty: PtySession): Promise<void> {
    this.#ptys.delete(key);
    if (s.containerId && s.state === 'started') {
      // The shell's own process group first (the agent it exec'd is in it), then the stream.
      const exec = await this.#docker.getContainer(s.containerId).exec({
        // As the daemon does: the shell and every descendant (they may have left its session).
        Cmd: ['sh', '-c', KILL_TREE_SCRIPT, 'kill-tree', pty.pidFile],
        AttachStdout: true,
        AttachStderr: true,
      });
      const stream = await exec.start({});
      stream.resume();
      await new Promise<void>((resolve) => stream.once('end', resolve).once('close', resolve).once('error', () => resolve()));
    }
    pty.stream.destroy();
  }

  async #upgrade(req: IncomingMessage, socket: Socket): Promise<void> {
    // Node's server lets go of an upgraded socket: a reset must not crash the stand-in.
    socket.on('error', () => socket.destroy());
    const reject = (status: number, text: string) => {
      socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    };
    if (!this.#authorized(req)) return reject(401, 'Unauthorized');
    const url = new URL(req.url ?? '/', 'http://stand-in');
    const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    if (parts[0] !== 'toolbox' || parts.length !== 5 || parts[2] !== 'process' || parts[3] !== 'pty' || parts[4] !== 'create-connect') {
      return reject(501, 'Not Implemented');
    }
    let s: SandboxRecord;
    try {
      s = this.#find(parts[1]!);
    } catch {
      return reject(404, 'Not Found');
    }
    const sessionId = url.searchParams.get('id') ?? '';
    const key = `${s.id}/${sessionId}`;
    if (!/^[A-Za-z0-9_.-]{1,128}$/.test(sessionId)) return reject(400, 'Bad Request');
    if (this.#ptys.has(key)) return reject(409, 'Conflict');
    if (s.state !== 'started' || !s.containerId) return reject(409, 'Conflict');
    const offered = offeredProtocols(req);
    let envs: Record<string, string> = {};
    const envToken = offered.find((p) => p.startsWith(PTY_ENVS_PREFIX));
    if (envToken) {
      try {
        envs = stringRecord(JSON.parse(Buffer.from(envToken.slice(PTY_ENVS_PREFIX.length), 'base64url').toString('utf8')), 'envs');
      } catch {
        return reject(400, 'Bad Request');
      }
    }
    const cols = Number(url.searchParams.get('cols') ?? 80);
    const rows = Number(url.searchParams.get('rows') ?? 24);
    const cwd = url.searchParams.get('cwd') ?? undefined;
    const pidFile = `/tmp/.daytona-standin-pty-${sessionId}`;
    const container = this.#docker.getContainer(s.containerId);
    let stream: Duplex;
    let exec: Dockerode.Exec;
    try {
      exec = await container.exec({
        // The daemon runs the user's shell as an interactive login shell on a PTY.
        Cmd: [
          'sh',
          '-c',
          `echo $$ > ${pidFile}; if command -v bash >/dev/null 2>&1; then exec bash -i -l; else exec sh -i -l; fi`,
        ],
        AttachStdin: true,
        AttachStdout: true,
        AttachStderr: true,
        Tty: true,
        DetachKeys: DETACH_KEYS,
        Env: ['TERM=xterm-256color', ...Object.entries(envs).map(([k, v]) => `${k}=${v}`)],
        ...(cwd ? { WorkingDir: cwd } : {}),
      });
      stream = (await exec.start({ hijack: true, stdin: true, Tty: true })) as Duplex;
      await exec.resize({ h: rows, w: cols }).catch(() => undefined);
    } catch {
      return reject(500, 'Internal Server Error');
    }
    const ws = acceptWebSocket(req, socket, offered.includes(PTY_EXIT_CONTROL) ? PTY_EXIT_CONTROL : undefined);
    if (!ws) {
      stream.destroy();
      return;
    }
    const pty: PtySession = { sandboxId: s.id, stream, pidFile, clients: new Set([ws]) };
    this.#ptys.set(key, pty);
    ws.sendText(JSON.stringify({ type: 'control', status: 'connected' }));
    stream.on('data', (chunk: Buffer) => {
      for (const client of pty.clients) client.sendBinary(chunk);
    });
    ws.on('message', (data) => {
      if (!stream.destroyed) stream.write(data);
    });
    // A client that goes away leaves the session running, as the daemon does.
    ws.on('close', () => pty.clients.delete(ws));
    let ended = false;
    const onEnd = async () => {
      if (ended) return;
      ended = true;
      if (this.#ptys.get(key) === pty) this.#ptys.delete(key);
      const info = await exec.inspect().catch(() => undefined);
      const exitCode = info?.ExitCode ?? 137;
      for (const client of pty.clients) {
        client.sendText(JSON.stringify({ type: 'control', status: 'exited', exitCode }));
        client.close(exitCode === 0 ? 1000 : 1011, JSON.stringify({ exitCode }));
      }
    };
    stream.once('end', () => void onEnd());
    stream.once('close', () => void onEnd());
    stream.on('error', () => void onEnd());
  }
}
