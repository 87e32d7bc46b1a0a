/**
 * A nice-grpc server with what every Berth service exposes: standard health,
 * reflection over our own descriptor set, and the error boundary.
 */
import { readFileSync } from 'node:fs';
import { timingSafeEqual } from 'node:crypto';
import { createServer, ServerError, Status, type Server, type ServerMiddleware } from 'nice-grpc';
import { HealthDefinition, HealthServiceImpl, HealthState } from 'nice-grpc-server-health';
import { ServerReflection, ServerReflectionService } from 'nice-grpc-server-reflection';
import { errorBoundary } from './grpc-errors.js';
import type { Logger } from './logging.js';
import type { Registry } from './metrics.js';
import { rpcMetrics } from './rpc-metrics.js';

/** Max message size both ways: 10 MB argument strings must arrive whole and get a clear error, not a reset. */
export const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

export const CHANNEL_OPTIONS = {
  'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
  'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
} as const;

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
  server.add(ServerReflectionService, ServerReflection(loadDescriptorSet(), serviceNames));
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
