/**
 * Kubernetes stand-in (a test double): `pods/exec` over a WebSocket, with the
 * channel protocols of the kubelet and API server: `v5.channel.k8s.io`
 * (adds the close frame `[255, channel]`, which half-closes stdin),
 * `v4.channel.k8s.io` (the status channel carries a v1.Status JSON) and
 * `channel.k8s.io` / none (the status channel carries the error text only).
 * The server takes the first protocol in the client's list that it knows,
 * as the real one does. Channels: 0 stdin, 1 stdout, 2 stderr, 3 status,
 * 4 resize (`{"Width":W,"Height":H}`). The command runs as a `docker exec`
 * in the pod's container; closing the socket does not stop it (as on a
 * cluster). The base64 protocols (browsers) are not served.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { Writable } from 'node:stream';
import type Dockerode from 'dockerode';
import { WebSocketServer, type WebSocket } from 'ws';
import { badRequest, StatusError } from './errors.js';

const STDIN = 0;
const STDOUT = 1;
const STDERR = 2;
const STATUS = 3;
const RESIZE = 4;
const CLOSE = 255;

/** Known subprotocols, preferred by the client's order. `''`: none offered (the v1 channel protocol). */
export const EXEC_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io', 'channel.k8s.io'] as const;
/** Output held for a slow client before the command's output is paused. */
const MAX_BUFFERED_BYTES = 1024 * 1024;

export interface ExecOptions {
  readonly command: readonly string[];
  readonly container: string;
  readonly stdin: boolean;
  readonly stdout: boolean;
  readonly stderr: boolean;
  readonly tty: boolean;
}

const truthy = (v: string | null) => v === 'true' || v === '1' || v === 'True';

/** Reads PodExecOptions from the query, with the API server's errors for what is missing. */
export function execOptionsOf(query: URLSearchParams, defaultContainer: string): ExecOptions {
  const o: ExecOptions = {
    command: query.getAll('command'),
    container: query.get('container') || defaultContainer,
    stdin: truthy(query.get('stdin')),
    stdout: truthy(query.get('stdout')),
    stderr: truthy(query.get('stderr')),
    tty: truthy(query.get('tty')),
  };
  if (!o.stdin && !o.stdout && !o.stderr) throw badRequest('you must specify at least 1 of stdin, stdout, stderr');
  if (o.command.length === 0) throw badRequest('you must specify at least one command for the container');
  return o;
}

/** The protocol the server selects, or a 400 naming what it supports. */
export function selectProtocol(req: IncomingMessage): string {
  const header = req.headers['sec-websocket-protocol'];
  const offered = typeof header === 'string' ? header.split(',').map((p) => p.trim()).filter(Boolean) : [];
  if (offered.length === 0) return '';
  const chosen = offered.find((p) => (EXEC_PROTOCOLS as readonly string[]).includes(p));
  if (!chosen) throw badRequest(`requested protocol(s) are not supported: [${offered.join(' ')}]; supports [${EXEC_PROTOCOLS.join(' ')}]`);
  return chosen;
}

/** What the status channel says at the end, by protocol. */
function statusMessage(protocol: string, command: readonly string[], exitCode: number): Buffer | undefined {
  if (protocol === 'v5.channel.k8s.io' || protocol === 'v4.channel.k8s.io') {
    const status =
      exitCode === 0
        ? { metadata: {}, status: 'Success' }
        : {
            metadata: {},
            status: 'Failure',
            message: `command terminated with non-zero exit code: error executing command [${command.join(' ')}], exit code ${exitCode}`,
            reason: 'NonZeroExitCode',
            details: { causes: [{ reason: 'ExitCode', message: String(exitCode) }] },
          };
    return Buffer.from(JSON.stringify(status));
  }
  return exitCode === 0 ? undefined : Buffer.from(`command terminated with non-zero exit code: error executing command [${command.join(' ')}], exit code ${exitCode}`);
}

const frame = (channel: number, data: Buffer) => Buffer.concat([Buffer.from([channel]), data]);

/** Waits for a docker exec to be recorded as finished and returns its exit code. */
async function exitCodeOf(exec: Dockerode.Exec): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const info = await exec.inspect().catch(() => undefined);
    if (!info) return 1;
    if (!info.Running) return info.ExitCode ?? 1;
    await new Promise((r) => setTimeout(r, 50));
  }
  return 1;
}

export class ExecServer {
  /** The protocol selected for each upgrade request ('' for none). */
  readonly #selected = new WeakMap<IncomingMessage, string>();
  readonly #wss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    maxPayload: 16 * 1024 * 1024,
    handleProtocols: (_offered, req) => this.#selected.get(req) || false,
  });
  readonly #docker: Dockerode;
  readonly #sockets = new Set<WebSocket>();

  constructor(docker: Dockerode) {
    this.#docker = docker;
  }

  /**
   * Starts the command in `containerId` and upgrades the request; errors
   * before the upgrade are thrown (answered as HTTP). A TTY's size applies
   * once the client's first resize message comes, after the command started
   * (as with the container runtime's exec on a cluster), so a command that
   * reads the size at once may see 0x0.
   */
  async serve(req: IncomingMessage, socket: Duplex, head: Buffer, containerId: string, o: ExecOptions, protocol: string): Promise<void> {
    let exec: Dockerode.Exec;
    let stream: Duplex;
    try {
      exec = await this.#docker.getContainer(containerId).exec({
        Cmd: [...o.command],
        AttachStdin: o.stdin,
        AttachStdout: o.stdout,
        AttachStderr: o.stderr,
        Tty: o.tty,
      });
      stream = (await exec.start({ hijack: true, stdin: o.stdin, Tty: o.tty })) as Duplex;
    } catch (err) {
      throw new StatusError(500, 'InternalError', `Internal error occurred: error executing command in container: ${(err as Error).message}`);
    }
    this.#selected.set(req, protocol);
    const ws = await new Promise<WebSocket>((resolve) => this.#wss.handleUpgrade(req, socket, head, resolve));
    this.#sockets.add(ws);
    this.#pipe(ws, exec, stream, o, protocol);
  }

  #pipe(ws: WebSocket, exec: Dockerode.Exec, stream: Duplex, o: ExecOptions, protocol: string): void {
    const send = (channel: number, data: Buffer) => {
      if (ws.readyState !== ws.OPEN) return;
      ws.send(frame(channel, data), () => {
        if (stream.isPaused() && ws.bufferedAmount < MAX_BUFFERED_BYTES) stream.resume();
      });
      if (ws.bufferedAmount >= MAX_BUFFERED_BYTES) stream.pause();
    };
    // As the kubelet does: an empty message on the lowest writable channel tells the client the stream is up.
    send(o.stdout ? STDOUT : o.stderr ? STDERR : STATUS, Buffer.alloc(0));
    const channelWriter = (channel: number) =>
      new Writable({
        write(chunk: Buffer, _enc, done) {
          send(channel, chunk);
          done();
        },
      });
    if (o.tty) stream.on('data', (chunk: Buffer) => send(STDOUT, chunk));
    else this.#docker.modem.demuxStream(stream, channelWriter(STDOUT), channelWriter(STDERR));
    let finished = false;
    const finish = async () => {
      if (finished) return;
      finished = true;
      const code = await exitCodeOf(exec);
      const status = statusMessage(protocol, o.command, code);
      if (status) send(STATUS, status);
      if (ws.readyState === ws.OPEN) ws.close(1000);
    };
    stream.once('end', () => void finish());
    stream.once('close', () => void finish());
    stream.on('error', () => void finish());
    const onMessage = (data: Buffer) => {
      if (data.length === 0) return;
      const channel = data[0]!;
      const payload = data.subarray(1);
      if (channel === STDIN && o.stdin && !stream.writableEnded) stream.write(payload);
      else if (channel === RESIZE && o.tty) {
        try {
          const size = JSON.parse(payload.toString('utf8')) as { Width?: number; Height?: number };
          if (size.Width && size.Height) void exec.resize({ w: size.Width, h: size.Height }).catch(() => undefined);
        } catch {
          // A malformed resize is dropped, as the kubelet logs and drops it.
        }
      } else if (channel === CLOSE && protocol === 'v5.channel.k8s.io' && payload[0] === STDIN && o.stdin) {
        stream.end();
      }
    };
    ws.on('message', onMessage);
    ws.on('close', () => {
      this.#sockets.delete(ws);
      // The command keeps running; only its streams go (as on a cluster).
      if (!finished) stream.destroy();
    });
    ws.on('error', () => ws.terminate());
  }

  close(): void {
    for (const ws of this.#sockets) ws.terminate();
    this.#wss.close();
  }
}
