/**
 * One `pods/exec` of the pod's container over client-node's WebSocket
 * (`v5.channel.k8s.io` where the server offers it, so stdin can be
 * half-closed; v4 otherwise, where ending stdin closes the socket), as the
 * {@link AgentProcess} startStdioAgent drives: stdin frames are sent as the
 * caller writes (a write completes once the socket took it), stdout and
 * stderr arrive on their channels, and the status channel's `v1.Status`
 * gives the exit code.
 *
 * Closing the socket does not stop the command in the pod (on a cluster
 * the exec outlives its client): a dropped stream ends the agent's stdin
 * first (v5) and closes the socket, so the agent learns its stream is gone
 * and waits on its linger socket to be found again.
 */
import { EventEmitter } from 'node:events';
import { PassThrough, Writable } from 'node:stream';
import type { V1Status } from '@kubernetes/client-node';
import type WebSocket from 'ws';
import { FailedPreconditionError, UnavailableError, type BerthError } from '../../../common/errors.js';
import type { AgentProcess } from '../shared/agent/stdio-agent.js';
import type { KubeApi } from './kube-api.js';
import { CONTAINER_NAME } from './pod-spec.js';

const STDIN = 0;
const CLOSE = 255;
/** Largest stdin frame sent at once. */
const MAX_FRAME_BYTES = 256 * 1024;

/** The exit code a status carries: 0 on Success, the ExitCode cause on NonZeroExitCode, else undefined. */
export function exitCodeOf(status: V1Status | undefined): number | undefined {
  if (!status) return undefined;
  if (status.status === 'Success') return 0;
  const cause = status.details?.causes?.find((c) => c.reason === 'ExitCode');
  const code = cause?.message !== undefined ? Number(cause.message) : NaN;
  return Number.isInteger(code) ? code : undefined;
}

/** What a refused upgrade means, as a domain error naming the pod and what to do. */
export function execRefusal(err: unknown, pod: string, namespace: string): BerthError {
  const message = (err as { message?: unknown } | null)?.message;
  const text = typeof message === 'string' ? message : String(err);
  const code = /Unexpected server response: (\d+)/.exec(text)?.[1];
  if (code === '403') {
    return new FailedPreconditionError(
      `the Kubernetes API server refused to exec into pod ${pod} (Forbidden): give the executor's ServiceAccount (or kubeconfig user) ` +
        `the verbs "create" and "get" on "pods/exec" in namespace ${namespace}`,
    );
  }
  if (code === '404') return new UnavailableError(`pod ${pod} in namespace ${namespace} is gone (exec answered 404 Not Found)`);
  if (code === '400') return new UnavailableError(`pod ${pod} in namespace ${namespace} cannot be exec'd into (400 Bad Request: it is finished or its container is not running)`);
  return new UnavailableError(`exec into pod ${pod} in namespace ${namespace} failed: ${text}`);
}

export class PodExecProcess extends EventEmitter implements AgentProcess {
  readonly stdin: Writable;
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  /** Settles once the exec's stdin was ended (or the exec never started). */
  readonly stdinEnded: Promise<void>;
  /** Why the exec could not start, as a domain error (after 'error'). */
  startError: BerthError | undefined;
  #ws: WebSocket | undefined;
  #status: V1Status | undefined;
  #closed = false;
  #queue: Promise<unknown>;

  /**
   * Runs `command` in `pod`; `prefix` is sent on stdin before anything
   * written; `after`: the exec starts once it settled.
   */
  constructor(api: KubeApi, pod: string, command: readonly string[], prefix?: Uint8Array, after?: Promise<void>) {
    super();
    this.stdout.on('error', () => undefined);
    this.stderr.on('error', () => undefined);
    // client-node pipes a stdin stream of its own into the socket; stdin frames are sent here instead (with completion).
    const unused = new PassThrough();
    const connecting = (async () => {
      await after;
      const exec = new api.sdk.Exec(api.kc);
      const ws = (await exec.exec(api.namespace, pod, CONTAINER_NAME, [...command], this.stdout, this.stderr, unused, false, (status) => {
        this.#status = status;
      })) as unknown as WebSocket;
      this.#ws = ws;
      ws.on('close', () => this.#onClose());
      ws.on('error', () => undefined);
      if (ws.readyState !== ws.OPEN) this.#onClose();
      return ws;
    })();
    connecting.catch((err: unknown) => {
      this.startError = execRefusal(err, pod, api.namespace);
      this.#closed = true;
      unused.destroy();
      this.emit('error', this.startError);
    });
    this.once('close', () => unused.destroy());
    this.#queue = prefix && prefix.length > 0 ? connecting.then((ws) => this.#send(ws, prefix)) : connecting;
    this.#queue.catch(() => undefined);
    let ending: Promise<void> | undefined;
    const endStdin = (drop: boolean) =>
      (ending ??= this.#queue.then(async () => {
        const ws = this.#ws;
        if (!ws || ws.readyState !== ws.OPEN) return;
        if (ws.protocol === 'v5.channel.k8s.io') await sendFrame(ws, Buffer.from([CLOSE, STDIN]));
        // v4 cannot half-close: ending stdin is closing the socket. A dropped stream lets go of the socket too.
        if (drop || ws.protocol !== 'v5.channel.k8s.io') ws.close(1000);
      }));
    this.stdin = new Writable({
      write: (chunk: Buffer, _encoding, callback) => {
        this.#queue = this.#queue.then(async () => {
          const ws = this.#ws;
          if (!ws) throw new Error('the exec never started');
          await this.#send(ws, chunk);
        });
        this.#queue.then(() => callback(), (err: Error) => callback(err));
      },
      final: (callback) => {
        endStdin(false).then(() => callback(), (err: Error) => callback(err));
      },
    });
    let stdinEnded!: () => void;
    this.stdinEnded = new Promise<void>((resolve) => (stdinEnded = resolve));
    // Destroyed without an end (the channel dropped its stream): end the agent's stdin and let go of the socket.
    this.stdin.once('close', () => {
      endStdin(!this.stdin.writableFinished).then(stdinEnded, stdinEnded);
    });
  }

  async #send(ws: WebSocket, data: Uint8Array): Promise<void> {
    for (let at = 0; at < data.length; at += MAX_FRAME_BYTES) {
      const part = data.subarray(at, at + MAX_FRAME_BYTES);
      if (ws.readyState !== ws.OPEN) throw new Error('the exec stream is closed');
      await sendFrame(ws, Buffer.concat([Buffer.from([STDIN]), part]));
    }
  }

  #onClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    const code = exitCodeOf(this.#status);
    const status = this.#status;
    // A command that could not start (no python3): its Status's message is what tells; put it where the stderr is read.
    if (code === undefined && status?.message && !this.stderr.writableEnded) this.stderr.write(`${status.message}\n`);
    if (!this.stdout.writableEnded) this.stdout.end();
    if (!this.stderr.writableEnded) this.stderr.end();
    // No Status: the socket dropped (or was let go of) while the command ran.
    const exitCode = code ?? (status ? (/not found|no such file/i.test(status.message ?? '') ? 127 : 126) : null);
    this.emit('close', exitCode, exitCode === null ? ('SIGKILL' as NodeJS.Signals) : null);
  }

  /** Ends the exec's stdin and lets go of the socket (the command in the pod is not signalled: exec cannot). */
  kill(): boolean {
    if (this.#closed) return false;
    this.stdin.destroy();
    const ws = this.#ws;
    if (ws && ws.readyState === ws.OPEN) {
      // After the stdin close frame went out.
      void this.stdinEnded.then(() => ws.close(1000));
    }
    this.#onClose();
    return true;
  }

  /** Lets go of the socket without ending what runs in the pod (a lingering agent). */
  abandon(): void {
    this.kill();
  }
}

function sendFrame(ws: WebSocket, frame: Buffer): Promise<void> {
  return new Promise<void>((resolve, reject) => ws.send(frame, (err) => (err ? reject(err) : resolve())));
}

export interface ExecOutput {
  readonly code: number | null;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
}

/** Runs `command` in the pod with `input` on stdin (then ended); its output, at most `maxBytes` of each stream. */
export function execInPod(api: KubeApi, pod: string, command: readonly string[], input?: Uint8Array, maxBytes = 1024 * 1024): Promise<ExecOutput> {
  return new Promise<ExecOutput>((resolve, reject) => {
    const proc = new PodExecProcess(api, pod, command);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let outBytes = 0;
    let errBytes = 0;
    proc.stdout.on('data', (c: Buffer) => {
      if (outBytes < maxBytes) out.push(c);
      outBytes += c.length;
    });
    proc.stderr.on('data', (c: Buffer) => {
      if (errBytes < maxBytes) err.push(c);
      errBytes += c.length;
    });
    proc.once('error', (e: Error) => reject(e));
    proc.once('close', (code: number | null) => resolve({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err) }));
    proc.stdin.end(input ?? Buffer.alloc(0));
    proc.stdin.on('error', () => undefined);
  });
}
