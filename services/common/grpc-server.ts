/**
 * A nice-grpc server with what every Berth service exposes: standard health,
 * reflection over our own descriptor set, and the error boundary.
 */
import { readFileSync } from 'node:fs';
import { format } from 'node:util';
import { setLogger } from '@grpc/grpc-js';
import { timingSafeEqual } from 'node:crypto';
import { createServer, ServerError, Status, type Server, type ServerMiddleware } from 'nice-grpc';
import { HealthDefinition, HealthServiceImpl, HealthState } from 'nice-grpc-server-health';
import { errorBoundary } from './grpc-errors.js';
import { LazyServerReflectionService, lazyServerReflection } from './grpc-reflection.js';
import type { Logger } from './logging.js';
import type { Registry } from './metrics.js';
import { rpcMetrics } from './rpc-metrics.js';
import { CHANNEL_OPTIONS } from './channel-options.js';

export { CHANNEL_OPTIONS, MAX_MESSAGE_BYTES } from './channel-options.js';

let descriptorSet: Buffer | undefined;
function loadDescriptorSet(): Buffer {
  // dist/services/common/ → <package root>/services/gen/descriptor.binpb (and the same from the source tree).
  descriptorSet ??= readFileSync(new URL('../../../services/gen/descriptor.binpb', import.meta.url));
  return descriptorSet;
}

export interface BerthServer {
  readonly server: Server;
  readonly health: ReturnType<typeof HealthState>;
}

/** `metrics`: the registry to count RPC calls on (absent: metrics are off). */
export function createBerthServer(
  logger: Logger,
  shutdownSignal: AbortSignal,
  serviceNames: string[],
  metrics?: Registry,
): BerthServer {
  const base = createServer(CHANNEL_OPTIONS);
  // Outside the error boundary: the counted status is the one the client gets.
  const server = (metrics ? base.use(rpcMetrics(metrics)) : base).use(errorBoundary(logger, shutdownSignal));
  const health = HealthState();
  server.add(HealthDefinition, HealthServiceImpl(health));
  // The descriptor set is read now (a broken install fails at start), parsed at reflection's first request.
  server.add(LazyServerReflectionService, lazyServerReflection(loadDescriptorSet(), serviceNames));
  return { server, health };
}

export const EXECUTOR_SECRET_HEADER = 'x-berth-executor-secret';

/** Executor side of the dispatcher ↔ executor shared secret (loopback/dev; use TLS client certs across hosts). */
export function sharedSecretMiddleware(secret: string): ServerMiddleware {
  const expected = Buffer.from(secret, 'utf8');
  return async function* sharedSecretCheck(call, context) {
    if (expected.length > 0) {
      const presented = Buffer.from(String(context.metadata.get(EXECUTOR_SECRET_HEADER) ?? ''), 'utf8');
      if (presented.length !== expected.length || !timingSafeEqual(presented, expected)) {
        throw new ServerError(Status.UNAUTHENTICATED, 'executor shared secret missing or wrong');
      }
    }
    return yield* call.next(call.request, context);
  };
}

/** What a server that could not listen is called, and how its port is set, for the error a person reads. */
export interface ListenSubject {
  /** e.g. 'the Dispatcher API' */
  readonly name: string;
  /** e.g. '--port N (server.port, BERTH_PORT)' */
  readonly portSetting: string;
}

/** One line with the fix for a failed bind (grpc-js says `No address added ... [listen EADDRINUSE: ...]`). */
export function listenFailureMessage(subject: ListenSubject, address: string, err: Error): string {
  const text = err.message;
  if (/EADDRINUSE/.test(text)) {
    return `cannot serve ${subject.name} on ${address}: the port is in use by another process (another berth?); stop it, or choose another port with ${subject.portSetting}`;
  }
  if (/EACCES/.test(text)) {
    return `cannot serve ${subject.name} on ${address}: permission denied (ports below 1024 need root); choose another port with ${subject.portSetting}`;
  }
  if (/EADDRNOTAVAIL|ENOTFOUND|EAI_AGAIN/.test(text)) {
    return `cannot serve ${subject.name} on ${address}: no such address on this host; listen on one it has (127.0.0.1, 0.0.0.0) with --host`;
  }
  return `cannot serve ${subject.name} on ${address}: ${text}`;
}

/** Binds `server`, turning grpc-js's bind failure into {@link listenFailureMessage}'s line. */
export async function listenOrExplain(
  server: Server,
  address: string,
  credentials: Parameters<Server['listen']>[1],
  subject: ListenSubject,
): Promise<number> {
  try {
    return await server.listen(address, credentials);
  } catch (err) {
    throw new Error(listenFailureMessage(subject, address, err as Error), { cause: err });
  }
}

/**
 * grpc-js writes its own `E No address added ...` line to stderr before the
 * bind fails; Berth reports that failure itself, in one line with the fix,
 * so that line is dropped. Everything else grpc-js logs goes on as before.
 */
export function quietGrpcBindErrors(): void {
  // grpc-js's default logger (console.error with a level letter), with that one line left out.
  const write = (level: string) => (message?: unknown, ...rest: unknown[]) => {
    process.stderr.write(`${format(`${level} ${String(message)}`, ...rest)}\n`);
  };
  const error = write('E');
  setLogger({
    error: (message?: unknown, ...rest: unknown[]) => {
      if (typeof message === 'string' && message.startsWith('No address added')) return;
      error(message, ...rest);
    },
    info: write('I'),
    debug: write('D'),
  });
}
