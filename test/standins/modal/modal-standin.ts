/**
 * A stand-in for Modal's control plane: a TEST DOUBLE, not Modal.
 *
 * It speaks Modal's gRPC API (`modal.client.ModalClient` and the task
 * command router `modal.task_command_router.TaskCommandRouter`, both on one
 * port) with the message codecs of the installed `modal` SDK itself (see
 * sdk-definitions.ts), for the calls Berth's modal backend makes, and runs
 * each sandbox as a container of the local Docker engine. Every other
 * method answers UNIMPLEMENTED, so a new SDK call is noticed, not faked.
 *
 * What it does, as the SDK 0.11.1 drives it (V2 sandboxes, the default):
 * - auth: `x-modal-token-id` / `x-modal-token-secret` on every control-plane
 *   call, `AuthTokenGet` hands out a JWT that later calls carry in
 *   `x-modal-auth-token`;
 * - `AppGetOrCreate`, `EnvironmentGetOrCreate`, `ImageGetOrCreate` (a bare
 *   `FROM tag` of an image present in the local engine), `ImageFromId`;
 * - `SandboxCreateV2` (cpu, memory, timeout, name, tags, env, entrypoint,
 *   network blocked or open), `SandboxGetFromName[V2]`, `SandboxGetTaskIdV2`,
 *   `SandboxWaitV2`, `SandboxTerminateV2`, `SandboxGetCommandRouterAccess`
 *   (a URL on this same port with the `https:` scheme, which the SDK dials
 *   in plaintext because the server URL is a loopback address, and a JWT
 *   for the task);
 * - router: `TaskExecStart` (docker exec), `TaskExecStdinWrite` (offsets,
 *   retries deduplicated, EOF is a half-close), `TaskExecStdioRead` (a
 *   stream from an offset), `TaskExecWait`, `TaskExecPoll`,
 *   `TaskSnapshotFilesystem` (docker commit; the image is usable by
 *   `ImageFromId` and `SandboxCreateV2`).
 *
 * What it does not do: pull images, enforce a CIDR allowlist (refused with
 * UNIMPLEMENTED rather than run open), GPUs, volumes, tunnels, secrets by id.
 * Its containers (and the images its snapshots made) are removed on close.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { PassThrough } from 'node:stream';
import Docker from 'dockerode';
import { createServer, ServerError, Status, type CallContext, type Server, type ServerMiddleware } from 'nice-grpc';
import { modalDefinitions, type ServiceDefinition } from './sdk-definitions.js';

export const STANDIN_LABEL = 'berth.standin';
const OWNER_LABEL = 'berth.standin.owner';

/** GenericResult.GenericStatus values, as Modal's proto numbers them. */
const GENERIC_STATUS = { SUCCESS: 1, FAILURE: 2, TERMINATED: 3, TIMEOUT: 4 } as const;
/** NetworkAccess.NetworkAccessType. */
const NETWORK = { OPEN: 1, BLOCKED: 2, ALLOWLIST: 3 } as const;

/** Output kept per stream of an exec for readers resuming from an offset. */
const MAX_RETAINED_OUTPUT = 64 * 1024 * 1024;
/** Output not yet read by anyone before the exec's output is paused. */
const MAX_UNREAD_OUTPUT = 8 * 1024 * 1024;
/** Largest data field of one TaskExecStdioRead message. */
const MAX_READ_CHUNK = 1024 * 1024;

export interface ModalStandinOptions {
  /** 0 (default): any free port. */
  readonly port?: number;
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** The credentials it accepts; defaults `ak-standin` / `as-standin`. */
  readonly tokenId?: string;
  readonly tokenSecret?: string;
  readonly docker?: Docker;
  /** One line per call and per event (stderr in the CLI). */
  readonly log?: (line: string) => void;
  /** Running sandboxes allowed at once (a workspace quota); a create beyond it gets RESOURCE_EXHAUSTED. */
  readonly maxSandboxes?: number;
}

interface GenericResult {
  readonly status: number;
  readonly exception: string;
  readonly exitcode: number;
}

interface FdBuffer {
  chunks: Buffer[];
  /** Offset of chunks[0]. */
  start: number;
  end: number;
  closed: boolean;
  /** Furthest offset any reader has reached (for pausing the producer). */
  readTo: number;
  readonly waiters: Set<() => void>;
}

interface ExecState {
  readonly id: string;
  readonly stream: Duplex;
  readonly out: [FdBuffer, FdBuffer];
  stdinOffset: number;
  stdinClosed: boolean;
  /** Serialises stdin writes. */
  stdinChain: Promise<void>;
  exit: { code?: number; signal?: number } | undefined;
  readonly exited: Promise<{ code?: number; signal?: number }>;
}

interface SandboxState {
  readonly id: string;
  readonly taskId: string;
  readonly appId: string;
  readonly name: string;
  readonly containerId: string;
  readonly tags: Record<string, string>;
  result: GenericResult | undefined;
  readonly finished: Promise<GenericResult>;
  finish(result: GenericResult): void;
  readonly execs: Map<string, ExecState>;
  timer: NodeJS.Timeout | undefined;
}

interface ImageState {
  readonly dockerRef: string;
  readonly owned: boolean;
}

const id = (prefix: string) => `${prefix}-${randomBytes(11).toString('hex')}`;
const b64url = (data: Buffer | string) => Buffer.from(data).toString('base64url');

function fail(code: Status, message: string): never {
  throw new ServerError(code, message);
}

function newFdBuffer(): FdBuffer {
  return { chunks: [], start: 0, end: 0, closed: false, readTo: 0, waiters: new Set() };
}

function wake(buf: FdBuffer): void {
  for (const w of [...buf.waiters]) w();
}

function pushOutput(buf: FdBuffer, data: Buffer): void {
  if (data.length === 0) return;
  buf.chunks.push(data);
  buf.end += data.length;
  let retained = buf.end - buf.start;
  while (retained > MAX_RETAINED_OUTPUT && buf.chunks.length > 1) {
    const dropped = buf.chunks.shift()!;
    buf.start += dropped.length;
    retained -= dropped.length;
  }
  wake(buf);
}

/** Bytes of `buf` from `offset`, at most `max`. */
function sliceFrom(buf: FdBuffer, offset: number, max: number): Buffer {
  const parts: Buffer[] = [];
  let pos = buf.start;
  let taken = 0;
  for (const chunk of buf.chunks) {
    const chunkEnd = pos + chunk.length;
    if (chunkEnd > offset && taken < max) {
      const from = Math.max(0, offset - pos);
      const part = chunk.subarray(from, Math.min(chunk.length, from + (max - taken)));
      parts.push(part);
      taken += part.length;
    }
    pos = chunkEnd;
  }
  return Buffer.concat(parts);
}

function waitForChange(buf: FdBuffer, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      buf.waiters.delete(done);
      signal.removeEventListener('abort', done);
      resolve();
    };
    buf.waiters.add(done);
    signal.addEventListener('abort', done, { once: true });
  });
}

/** The running stand-in. */
export class ModalStandin {
  readonly #options: ModalStandinOptions;
  readonly #docker: Docker;
  readonly #server: Server;
  readonly #secret = randomBytes(32);
  readonly #owner = randomBytes(6).toString('hex');
  readonly #apps = new Map<string, string>();
  readonly #images = new Map<string, ImageState>();
  readonly #sandboxes = new Map<string, SandboxState>();
  readonly #tasks = new Map<string, SandboxState>();
  #port = 0;
  #closing: Promise<void> | undefined;

  private constructor(options: ModalStandinOptions) {
    this.#options = options;
    this.#docker = options.docker ?? new Docker();
    this.#server = createServer({ 'grpc.max_receive_message_length': 100 * 1024 * 1024 }).use(this.#authMiddleware());
    const defs = modalDefinitions();
    this.#server.add(defs.controlPlane as never, this.#implement(defs.controlPlane, this.#controlPlane()) as never);
    this.#server.add(defs.commandRouter as never, this.#implement(defs.commandRouter, this.#router()) as never);
  }

  static async start(options: ModalStandinOptions = {}): Promise<ModalStandin> {
    const standin = new ModalStandin(options);
    const host = options.host ?? '127.0.0.1';
    standin.#port = await standin.#server.listen(`${host}:${options.port ?? 0}`);
    return standin;
  }

  get port(): number {
    return this.#port;
  }

  /** What a client puts in MODAL_SERVER_URL. */
  get serverUrl(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  /** Docker ids of the sandboxes' containers that still run (tests look at them). */
  runningContainers(): string[] {
    return [...this.#sandboxes.values()].filter((s) => !s.result).map((s) => s.containerId);
  }

  #log(line: string): void {
    this.#options.log?.(line);
  }

  // --- auth -------------------------------------------------------------

  #jwt(claims: Record<string, unknown>, ttlSeconds: number): string {
    const now = Math.floor(Date.now() / 1000);
    const head = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
    const body = b64url(JSON.stringify({ ...claims, iat: now, exp: now + ttlSeconds }));
    const sig = b64url(createHmac('sha256', this.#secret).update(`${head}.${body}`).digest());
    return `${head}.${body}.${sig}`;
  }

  /** The claims of a JWT this stand-in signed and that has not expired; undefined otherwise. */
  #verify(token: string): Record<string, unknown> | undefined {
    const [head, body, sig] = token.split('.');
    if (!head || !body || !sig) return undefined;
    const expected = createHmac('sha256', this.#secret).update(`${head}.${body}`).digest();
    const given = Buffer.from(sig, 'base64url');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
    const claims = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as Record<string, unknown>;
    if (typeof claims.exp !== 'number' || claims.exp < Date.now() / 1000) return undefined;
    return claims;
  }

  #authMiddleware(): ServerMiddleware {
    const tokenId = this.#options.tokenId ?? 'ak-standin';
    const tokenSecret = this.#options.tokenSecret ?? 'as-standin';
    const log = (line: string) => this.#log(line);
    const verify = (token: string) => this.#verify(token);
    return async function* auth(call, context) {
      const path = call.method.path;
      log(`call ${path}`);
      if (path.startsWith('/modal.task_command_router.')) {
        const header = context.metadata.get('authorization') ?? '';
        const claims = header.startsWith('Bearer ') ? verify(header.slice(7)) : undefined;
        if (!claims) fail(Status.UNAUTHENTICATED, 'invalid or expired command router token');
        (context as CallContext & { routerTask?: unknown }).routerTask = claims.task_id;
      } else {
        if (context.metadata.get('x-modal-token-id') !== tokenId || context.metadata.get('x-modal-token-secret') !== tokenSecret) {
          fail(Status.UNAUTHENTICATED, 'Token ID or secret is invalid (Modal stand-in)');
        }
        if (!path.endsWith('/AuthTokenGet')) {
          const token = context.metadata.get('x-modal-auth-token');
          if (!token || !verify(token)) fail(Status.UNAUTHENTICATED, 'missing or invalid x-modal-auth-token');
        }
      }
      return yield* call.next(call.request, context);
    };
  }

  // --- wiring -----------------------------------------------------------

  /**
   * One implementation per method of `def`: the given handler, its response
   * completed with the SDK's own `fromPartial`; UNIMPLEMENTED for the rest.
   */
  #implement(def: ServiceDefinition, handlers: Record<string, Handler>): Record<string, unknown> {
    const impl: Record<string, unknown> = {};
    for (const [key, method] of Object.entries(def.methods)) {
      const handler = handlers[key];
      const unimplemented = `${def.fullName}/${method.name} is not implemented by the Modal stand-in`;
      if (method.responseStream) {
        impl[key] = async function* (request: unknown, context: CallContext) {
          if (!handler) fail(Status.UNIMPLEMENTED, unimplemented);
          for await (const item of handler(request as never, context) as AsyncIterable<unknown>) {
            yield method.responseType.fromPartial(item);
          }
        };
      } else {
        impl[key] = async (request: unknown, context: CallContext) => {
          if (!handler) fail(Status.UNIMPLEMENTED, unimplemented);
          return method.responseType.fromPartial(await (handler(request as never, context) as Promise<unknown>));
        };
      }
    }
    for (const key of Object.keys(handlers)) {
      if (!def.methods[key]) throw new Error(`the SDK's ${def.fullName} has no method ${key}`);
    }
    return impl;
  }

  // --- control plane ----------------------------------------------------

  #controlPlane(): Record<string, Handler> {
    return {
      authTokenGet: async () => ({ token: this.#jwt({ sub: 'standin' }, 20 * 60) }),
      appGetOrCreate: async (req: { appName: string; objectCreationType: number }) => {
        let appId = this.#apps.get(req.appName);
        if (!appId) {
          if (req.objectCreationType !== 1) fail(Status.NOT_FOUND, `App '${req.appName}' not found`);
          appId = id('ap');
          this.#apps.set(req.appName, appId);
        }
        return { appId };
      },
      environmentGetOrCreate: async () => ({
        environmentId: 'en-standin',
        metadata: { name: 'main', settings: { imageBuilderVersion: '2024.10', webhookSuffix: '' } },
      }),
      imageGetOrCreate: async (req: ImageGetOrCreateRequest) => this.#imageGetOrCreate(req),
      imageFromId: async (req: { imageId: string }) => {
        if (!this.#images.has(req.imageId)) fail(Status.NOT_FOUND, `Could not find image with ID ${req.imageId}`);
        return { imageId: req.imageId };
      },
      sandboxCreateV2: async (req: SandboxCreateRequest) => this.#sandboxCreate(req),
      sandboxGetFromNameV2: async (req: { sandboxName: string; appName: string }) => this.#byName(req),
      sandboxGetFromName: async (req: { sandboxName: string; appName: string }) => this.#byName(req),
      sandboxGetTaskIdV2: async (req: { sandboxId: string }) => {
        const sb = this.#sandbox(req.sandboxId);
        return sb.result ? { taskResult: sb.result } : { taskId: sb.taskId };
      },
      sandboxGetCommandRouterAccess: async (req: { sandboxId?: string; taskId?: string }) => {
        const sb = req.sandboxId ? this.#sandbox(req.sandboxId) : this.#task(req.taskId ?? '');
        if (sb.result) fail(Status.NOT_FOUND, `Sandbox ${sb.id} has finished`);
        return {
          url: `https://127.0.0.1:${this.#port}`,
          jwt: this.#jwt({ task_id: sb.taskId, sandbox_id: sb.id }, 3600),
          workerIpv4Address: '127.0.0.1',
        };
      },
      sandboxWaitV2: async (req: { sandboxId: string; timeout: number }, context: CallContext) => {
        const sb = this.#sandbox(req.sandboxId);
        if (!sb.result && req.timeout > 0) {
          await raceTimeout(sb.finished, req.timeout * 1000, context.signal);
        }
        return { result: sb.result, metadata: { appId: sb.appId } };
      },
      sandboxTerminateV2: async (req: { sandboxId: string }) => {
        const sb = this.#sandbox(req.sandboxId);
        await this.#finish(sb, { status: GENERIC_STATUS.TERMINATED, exception: 'terminated', exitcode: 137 });
        return {};
      },
    };
  }

  async #imageGetOrCreate(req: ImageGetOrCreateRequest) {
    const commands = req.image?.dockerfileCommands ?? [];
    const from = commands.length === 1 ? /^FROM\s+(\S+)$/.exec(commands[0]!.trim()) : null;
    if (!from || from[1] === 'base' || (req.image?.baseImages?.length ?? 0) > 0) {
      fail(Status.UNIMPLEMENTED, 'the Modal stand-in builds only a bare `FROM <registry tag>` image');
    }
    const tag = from[1]!;
    const imageId = `im-${createHmac('sha256', 'image').update(tag).digest('hex').slice(0, 22)}`;
    try {
      await this.#docker.getImage(tag).inspect();
    } catch {
      return {
        imageId,
        result: {
          status: GENERIC_STATUS.FAILURE,
          exception: `the image ${tag} was not found (the Modal stand-in runs only images present in the local Docker engine)`,
        },
      };
    }
    this.#images.set(imageId, { dockerRef: tag, owned: false });
    return { imageId, result: { status: GENERIC_STATUS.SUCCESS } };
  }

  #byName(req: { sandboxName: string; appName: string }) {
    const appId = this.#apps.get(req.appName);
    const sb = [...this.#sandboxes.values()].find((s) => !s.result && s.appId === appId && s.name === req.sandboxName);
    if (!sb) fail(Status.NOT_FOUND, `Sandbox with name '${req.sandboxName}' not found in App '${req.appName}'`);
    return { sandboxId: sb.id };
  }

  #sandbox(sandboxId: string): SandboxState {
    return this.#sandboxes.get(sandboxId) ?? fail(Status.NOT_FOUND, `Sandbox ${sandboxId} not found`);
  }

  #task(taskId: string): SandboxState {
    return this.#tasks.get(taskId) ?? fail(Status.NOT_FOUND, `Task ${taskId} not found`);
  }

  async #sandboxCreate(req: SandboxCreateRequest) {
    const d = req.definition ?? fail(Status.INVALID_ARGUMENT, 'definition is required');
    const image = this.#images.get(d.imageId) ?? fail(Status.NOT_FOUND, `Could not find image with ID ${d.imageId}`);
    const unsupported = [
      d.volumeMounts?.length ? 'volumes' : '',
      d.cloudBucketMounts?.length ? 'cloud bucket mounts' : '',
      d.secretIds?.length ? 'secrets by id' : '',
      d.openPorts?.ports?.length ? 'tunnels' : '',
      d.resources?.gpuConfig?.count ? 'GPUs' : '',
      d.networkAccess?.networkAccessType === NETWORK.ALLOWLIST ? 'an outbound allowlist' : '',
    ].filter(Boolean);
    if (unsupported.length > 0) fail(Status.UNIMPLEMENTED, `the Modal stand-in does not support ${unsupported.join(', ')}`);
    if (!req.appId || ![...this.#apps.values()].includes(req.appId)) fail(Status.NOT_FOUND, `App ${req.appId} not found`);
    const name = d.name ?? '';
    if (name && [...this.#sandboxes.values()].some((s) => !s.result && s.appId === req.appId && s.name === name)) {
      fail(Status.ALREADY_EXISTS, `A running Sandbox named '${name}' already exists in this App`);
    }
    const limit = this.#options.maxSandboxes;
    if (limit !== undefined && [...this.#sandboxes.values()].filter((sb) => !sb.result).length >= limit) {
      fail(Status.RESOURCE_EXHAUSTED, `the workspace's limit of ${limit} running sandboxes is reached (Modal stand-in)`);
    }
    const env: string[] = [];
    for (const source of req.secretSources ?? []) {
      if (source.secretId) fail(Status.UNIMPLEMENTED, 'the Modal stand-in does not support secrets by id');
      for (const [k, v] of Object.entries(source.env?.contents ?? {})) env.push(`${k}=${v}`);
    }
    const sandboxId = id('sb-v2');
    const taskId = id('ta');
    const tags: Record<string, string> = {};
    for (const t of req.tags ?? []) tags[t.tagName] = t.tagValue;
    const milliCpu = d.resources?.milliCpuMax || d.resources?.milliCpu || 0;
    const memoryMb = d.resources?.memoryMbMax || d.resources?.memoryMb || 0;
    const container = await this.#docker.createContainer({
      Image: image.dockerRef,
      Entrypoint: [],
      Cmd: d.entrypointArgs?.length ? d.entrypointArgs : ['sleep', 'infinity'],
      ...(d.workdir ? { WorkingDir: d.workdir } : {}),
      Env: env,
      Labels: {
        [STANDIN_LABEL]: 'modal',
        [OWNER_LABEL]: this.#owner,
        // Tests running beside each other tell their stand-ins' containers apart by port.
        'berth.standin.port': String(this.#port),
        'berth.standin.sandbox': sandboxId,
        'berth.standin.name': name,
      },
      HostConfig: {
        Init: true,
        ...(milliCpu > 0 ? { NanoCpus: milliCpu * 1_000_000 } : {}),
        ...(memoryMb > 0 ? { Memory: memoryMb * 1024 * 1024 } : {}),
        NetworkMode: d.networkAccess?.networkAccessType === NETWORK.BLOCKED ? 'none' : 'bridge',
      },
    });
    let resolveFinished!: (r: GenericResult) => void;
    const sb: SandboxState = {
      id: sandboxId,
      taskId,
      appId: req.appId,
      name,
      containerId: container.id,
      tags,
      result: undefined,
      finished: new Promise<GenericResult>((r) => (resolveFinished = r)),
      finish: (r) => resolveFinished(r),
      execs: new Map(),
      timer: undefined,
    };
    this.#sandboxes.set(sandboxId, sb);
    this.#tasks.set(taskId, sb);
    try {
      await container.start();
    } catch (err) {
      await this.#finish(sb, { status: GENERIC_STATUS.FAILURE, exception: `container start failed: ${String(err)}`, exitcode: 1 });
      fail(Status.INTERNAL, `the sandbox could not start: ${String(err)}`);
    }
    const timeoutSecs = d.timeoutSecs || 300;
    sb.timer = setTimeout(() => {
      this.#log(`sandbox ${sandboxId} timed out after ${timeoutSecs} s`);
      void this.#finish(sb, { status: GENERIC_STATUS.TIMEOUT, exception: 'Sandbox timed out', exitcode: 124 });
    }, timeoutSecs * 1000);
    sb.timer.unref();
    // The entrypoint ending ends the sandbox.
    void container.wait().then(
      (r: { StatusCode?: number }) => {
        if (!sb.result) {
          const code = r.StatusCode ?? 0;
          void this.#finish(sb, { status: code === 0 ? GENERIC_STATUS.SUCCESS : GENERIC_STATUS.FAILURE, exception: '', exitcode: code });
        }
      },
      () => undefined,
    );
    this.#log(`sandbox ${sandboxId} (${name || 'unnamed'}) is container ${container.id.slice(0, 12)} of ${image.dockerRef}`);
    return {
      sandboxId,
      taskId,
      tunnels: [],
      commandRouterAccess: { url: `https://127.0.0.1:${this.#port}`, jwt: this.#jwt({ task_id: taskId, sandbox_id: sandboxId }, 3600) },
    };
  }

  /** Ends a sandbox: its result is set once, its container removed. */
  async #finish(sb: SandboxState, result: GenericResult): Promise<void> {
    if (!sb.result) {
      sb.result = result;
      sb.finish(result);
      clearTimeout(sb.timer);
    }
    await this.#docker
      .getContainer(sb.containerId)
      .remove({ force: true })
      .catch(() => undefined);
    for (const exec of sb.execs.values()) {
      exec.stream.destroy();
    }
  }

  // --- command router ---------------------------------------------------

  #routerTask(taskId: string, context: CallContext): SandboxState {
    if ((context as CallContext & { routerTask?: unknown }).routerTask !== taskId) {
      fail(Status.PERMISSION_DENIED, 'the command router token is for another task');
    }
    const sb = this.#task(taskId);
    if (sb.result) fail(Status.NOT_FOUND, `Task ${taskId} has finished`);
    return sb;
  }

  #exec(sb: SandboxState, execId: string): ExecState {
    return sb.execs.get(execId) ?? fail(Status.NOT_FOUND, `exec ${execId} not found`);
  }

  #router(): Record<string, Handler> {
    return {
      taskExecStart: async (req: TaskExecStartRequest, context: CallContext) => {
        const sb = this.#routerTask(req.taskId, context);
        if (sb.execs.has(req.execId)) return {};
        if (req.timeoutSecs) fail(Status.UNIMPLEMENTED, 'the Modal stand-in does not support exec timeouts');
        if (req.containerId) fail(Status.UNIMPLEMENTED, 'the Modal stand-in has no sidecar containers');
        await this.#startExec(sb, req);
        return {};
      },
      taskExecStdinWrite: async (req: { taskId: string; execId: string; offset: number; data: Uint8Array; eof: boolean }, context: CallContext) => {
        const exec = this.#exec(this.#routerTask(req.taskId, context), req.execId);
        const run = exec.stdinChain.then(() => this.#writeStdin(exec, req.offset, Buffer.from(req.data), req.eof));
        exec.stdinChain = run.catch(() => undefined);
        await run;
        return {};
      },
      taskExecStdioRead: (req: { taskId: string; execId: string; offset: number; fileDescriptor: number }, context: CallContext) =>
        this.#readStdio(req, context),
      taskExecWait: async (req: { taskId: string; execId: string }, context: CallContext) => {
        const exec = this.#exec(this.#task(req.taskId), req.execId);
        this.#routerTaskClaim(req.taskId, context);
        const exit = await raceTimeout(exec.exited, 55_000, context.signal);
        if (!exit) fail(Status.DEADLINE_EXCEEDED, 'still running');
        return exit;
      },
      taskExecPoll: async (req: { taskId: string; execId: string }, context: CallContext) => {
        this.#routerTaskClaim(req.taskId, context);
        return this.#exec(this.#task(req.taskId), req.execId).exit ?? {};
      },
      taskSnapshotFilesystem: async (req: { taskId: string; snapshotId: string; containerId: string }, context: CallContext) => {
        const sb = this.#routerTask(req.taskId, context);
        if (req.containerId) fail(Status.UNIMPLEMENTED, 'the Modal stand-in has no sidecar containers');
        const imageId = id('im');
        const repo = `berth-modal-standin-snapshot`;
        await this.#docker.getContainer(sb.containerId).commit({ repo, tag: imageId, pause: true });
        this.#images.set(imageId, { dockerRef: `${repo}:${imageId}`, owned: true });
        this.#log(`snapshot of ${sb.id} is image ${imageId}`);
        return { imageId };
      },
    };
  }

  /** Wait and poll may outlive the sandbox; only the token's task is checked. */
  #routerTaskClaim(taskId: string, context: CallContext): void {
    if ((context as CallContext & { routerTask?: unknown }).routerTask !== taskId) {
      fail(Status.PERMISSION_DENIED, 'the command router token is for another task');
    }
  }

  async #startExec(sb: SandboxState, req: TaskExecStartRequest): Promise<void> {
    const env: string[] = Object.entries(req.env ?? {}).map(([k, v]) => `${k}=${v}`);
    for (const source of req.secretSources ?? []) {
      if (source.secretId) fail(Status.UNIMPLEMENTED, 'the Modal stand-in does not support secrets by id');
      for (const [k, v] of Object.entries(source.env?.contents ?? {})) env.push(`${k}=${v}`);
    }
    const tty = req.ptyInfo?.enabled === true;
    const container = this.#docker.getContainer(sb.containerId);
    const dockerExec = await container.exec({
      Cmd: req.commandArgs,
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      Tty: tty,
      Env: env,
      ...(req.workdir ? { WorkingDir: req.workdir } : {}),
    });
    const stream = (await dockerExec.start({ hijack: true, stdin: true, Tty: tty })) as Duplex;
    const out: [FdBuffer, FdBuffer] = [newFdBuffer(), newFdBuffer()];
    const wantOut = req.stdoutConfig === 1;
    const wantErr = req.stderrConfig === 1;
    const stdoutSink = new PassThrough();
    const stderrSink = new PassThrough();
    stdoutSink.on('data', (chunk: Buffer) => wantOut && pushOutput(out[0], chunk));
    stderrSink.on('data', (chunk: Buffer) => wantErr && pushOutput(out[1], chunk));
    if (tty) stream.pipe(stdoutSink);
    else this.#docker.modem.demuxStream(stream, stdoutSink, stderrSink);
    let resolveExit!: (e: { code?: number; signal?: number }) => void;
    const exec: ExecState = {
      id: req.execId,
      stream,
      out,
      stdinOffset: 0,
      stdinClosed: false,
      stdinChain: Promise.resolve(),
      exit: undefined,
      exited: new Promise((r) => (resolveExit = r)),
    };
    // Pause the exec's output while nobody reads it.
    const pauseCheck = () => {
      const unread = Math.max(out[0].end - out[0].readTo, out[1].end - out[1].readTo);
      if (unread > MAX_UNREAD_OUTPUT) stream.pause();
      else stream.resume();
    };
    out[0].waiters.add(pauseCheck);
    out[1].waiters.add(pauseCheck);
    let ended = false;
    const onEnd = async () => {
      if (ended) return;
      ended = true;
      const info = await dockerExec.inspect().catch(() => undefined);
      const code = typeof info?.ExitCode === 'number' ? info.ExitCode : 137;
      exec.exit = { code };
      for (const buf of out) {
        buf.closed = true;
        buf.waiters.delete(pauseCheck);
        wake(buf);
      }
      resolveExit(exec.exit);
      this.#log(`exec ${req.execId} exited with ${code}`);
    };
    stream.on('end', () => void onEnd());
    stream.on('close', () => void onEnd());
    stream.on('error', () => void onEnd());
    sb.execs.set(req.execId, exec);
  }

  async #writeStdin(exec: ExecState, offset: number, data: Buffer, eof: boolean): Promise<void> {
    if (offset > exec.stdinOffset) {
      fail(Status.OUT_OF_RANGE, `stdin offset ${offset} is past the ${exec.stdinOffset} bytes written`);
    }
    const fresh = data.subarray(Math.min(data.length, exec.stdinOffset - offset));
    if (fresh.length > 0) {
      if (exec.stdinClosed) fail(Status.FAILED_PRECONDITION, 'stdin is closed');
      if (exec.exit) fail(Status.FAILED_PRECONDITION, 'the process has exited');
      await new Promise<void>((resolve, reject) => exec.stream.write(fresh, (err) => (err ? reject(err) : resolve()))).catch((err: unknown) =>
        fail(Status.FAILED_PRECONDITION, `cannot write to stdin: ${String(err)}`),
      );
      exec.stdinOffset += fresh.length;
    }
    if (eof && !exec.stdinClosed) {
      exec.stdinClosed = true;
      exec.stream.end();
    }
  }

  async *#readStdio(
    req: { taskId: string; execId: string; offset: number; fileDescriptor: number },
    context: CallContext,
  ): AsyncGenerator<{ data: Uint8Array }> {
    this.#routerTaskClaim(req.taskId, context);
    const exec = this.#exec(this.#task(req.taskId), req.execId);
    const buf = req.fileDescriptor === 0 ? exec.out[0] : req.fileDescriptor === 1 ? exec.out[1] : fail(Status.INVALID_ARGUMENT, 'bad file descriptor');
    let offset = req.offset;
    for (;;) {
      if (offset < buf.start) fail(Status.OUT_OF_RANGE, `output before offset ${buf.start} is no longer kept`);
      if (offset < buf.end) {
        const data = sliceFrom(buf, offset, MAX_READ_CHUNK);
        offset += data.length;
        if (offset > buf.readTo) {
          buf.readTo = offset;
          wake(buf);
        }
        yield { data };
        continue;
      }
      if (buf.closed || context.signal.aborted) return;
      await waitForChange(buf, context.signal);
    }
  }

  /** Stops serving, removes every container it started and the images its snapshots made. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#server.forceShutdown();
      await Promise.all(
        [...this.#sandboxes.values()].map((sb) =>
          this.#finish(sb, sb.result ?? { status: GENERIC_STATUS.TERMINATED, exception: 'stand-in closed', exitcode: 137 }),
        ),
      );
      // Anything of ours that a crash between create and bookkeeping left behind.
      const left = await this.#docker
        .listContainers({ all: true, filters: { label: [`${OWNER_LABEL}=${this.#owner}`] } })
        .catch(() => []);
      await Promise.all(left.map((c) => this.#docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
      await Promise.all(
        [...this.#images.values()]
          .filter((i) => i.owned)
          .map((i) => this.#docker.getImage(i.dockerRef).remove({ force: true }).catch(() => undefined)),
      );
      this.#log('closed: containers and snapshot images removed');
    })();
    return this.#closing;
  }
}

type Handler = (request: never, context: CallContext) => Promise<unknown> | AsyncIterable<unknown>;

interface StringMap {
  readonly contents?: Record<string, string>;
}
interface SecretSource {
  readonly secretId?: string;
  readonly env?: StringMap;
}
interface ImageGetOrCreateRequest {
  readonly appId: string;
  readonly image?: { readonly dockerfileCommands?: string[]; readonly baseImages?: unknown[] };
}
interface SandboxCreateRequest {
  readonly appId: string;
  readonly tags?: { tagName: string; tagValue: string }[];
  readonly secretSources?: SecretSource[];
  readonly definition?: {
    readonly imageId: string;
    readonly entrypointArgs?: string[];
    readonly timeoutSecs?: number;
    readonly workdir?: string;
    readonly name?: string;
    readonly networkAccess?: { readonly networkAccessType: number; readonly allowedCidrs?: string[] };
    readonly resources?: {
      readonly milliCpu?: number;
      readonly milliCpuMax?: number;
      readonly memoryMb?: number;
      readonly memoryMbMax?: number;
      readonly gpuConfig?: { readonly count?: number };
    };
    readonly volumeMounts?: unknown[];
    readonly cloudBucketMounts?: unknown[];
    readonly secretIds?: string[];
    readonly openPorts?: { readonly ports?: unknown[] };
  };
}
interface TaskExecStartRequest {
  readonly taskId: string;
  readonly execId: string;
  readonly commandArgs: string[];
  readonly stdoutConfig: number;
  readonly stderrConfig: number;
  readonly timeoutSecs?: number;
  readonly workdir?: string;
  readonly ptyInfo?: { readonly enabled?: boolean };
  readonly containerId?: string;
  readonly env?: Record<string, string>;
  readonly secretSources?: SecretSource[];
}

/** `promise`'s value, or undefined once `ms` passed or `signal` aborted; leaves no timer behind. */
function raceTimeout<T>(promise: Promise<T>, ms: number, signal: AbortSignal): Promise<T | undefined> {
  return new Promise<T | undefined>((resolve, reject) => {
    const done = (value: T | undefined) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      resolve(value);
    };
    const onAbort = () => done(undefined);
    const timer = setTimeout(onAbort, ms);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(done, (err: unknown) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      reject(err as Error);
    });
  });
}

/** `npm run standin -- modal --port N [--host H]`: prints `listening on PORT`, runs until SIGTERM or SIGINT. */
export async function main(argv: readonly string[]): Promise<void> {
  let port = 0;
  let host = '127.0.0.1';
  let verbose = false;
  let maxSandboxes: number | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--port') port = Number(argv[++i]);
    else if (arg === '--host') host = argv[++i] ?? host;
    else if (arg === '--verbose') verbose = true;
    else if (arg === '--max-sandboxes') maxSandboxes = Number(argv[++i]);
    else throw new Error(`modal stand-in: unknown argument ${arg}; usage: modal [--port N] [--host H] [--max-sandboxes N] [--verbose]`);
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error('modal stand-in: --port must be 0..65535');
  if (maxSandboxes !== undefined && !(Number.isInteger(maxSandboxes) && maxSandboxes >= 0)) {
    throw new Error('modal stand-in: --max-sandboxes must be a whole number');
  }
  const standin = await ModalStandin.start({
    port,
    host,
    ...(process.env.MODAL_TOKEN_ID ? { tokenId: process.env.MODAL_TOKEN_ID } : {}),
    ...(process.env.MODAL_TOKEN_SECRET ? { tokenSecret: process.env.MODAL_TOKEN_SECRET } : {}),
    ...(verbose ? { log: (line: string) => process.stderr.write(`modal stand-in: ${line}\n`) } : {}),
    ...(maxSandboxes !== undefined ? { maxSandboxes } : {}),
  });
  process.stdout.write(`listening on ${standin.port}\n`);
  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  await standin.close();
}
