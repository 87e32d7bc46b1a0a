/**
 * The one boundary between domain errors and gRPC status, both ways.
 * Server: known domain errors keep their code and message; an abort becomes
 * CANCELLED; anything else becomes INTERNAL with a generic message and the
 * real error goes to the log. Client: status back to typed errors.
 */
import { ClientError, ServerError, Status, type CallContext, type ServerMiddleware } from 'nice-grpc';
import { isAbortError } from 'abort-controller-x';
import { BerthError, type ErrorCode } from './errors.js';
import type { Logger } from './logging.js';

const TO_STATUS: Readonly<Record<ErrorCode, Status>> = {
  INVALID_ARGUMENT: Status.INVALID_ARGUMENT,
  NOT_FOUND: Status.NOT_FOUND,
  FAILED_PRECONDITION: Status.FAILED_PRECONDITION,
  RESOURCE_EXHAUSTED: Status.RESOURCE_EXHAUSTED,
  DEADLINE_EXCEEDED: Status.DEADLINE_EXCEEDED,
  UNAVAILABLE: Status.UNAVAILABLE,
  PERMISSION_DENIED: Status.PERMISSION_DENIED,
  UNAUTHENTICATED: Status.UNAUTHENTICATED,
  ABORTED: Status.ABORTED,
  CANCELLED: Status.CANCELLED,
};

const FROM_STATUS = new Map<Status, ErrorCode>(
  Object.entries(TO_STATUS).map(([code, status]) => [status, code as ErrorCode]),
);

/** Converts any thrown value to a ServerError. */
export function toServerError(err: unknown, logger: Logger, method: string): ServerError {
  if (err instanceof ServerError) return err;
  if (err instanceof BerthError) return new ServerError(TO_STATUS[err.code], err.message);
  if (err instanceof ClientError) {
    // An upstream (executor) failure: keep its status so UNAVAILABLE stays UNAVAILABLE.
    return new ServerError(err.code, err.details);
  }
  if (isAbortError(err)) return new ServerError(Status.CANCELLED, 'The call was cancelled');
  logger.error({ err, method }, 'unhandled error');
  return new ServerError(Status.INTERNAL, 'Internal error; the server log has the details');
}

/** The status {@link toServerError} gives a thrown value (for metrics: no logging, no allocation). */
export function statusOf(err: unknown): Status {
  if (err instanceof ServerError || err instanceof ClientError) return err.code;
  if (err instanceof BerthError) return TO_STATUS[err.code];
  return isAbortError(err) ? Status.CANCELLED : Status.INTERNAL;
}

/**
 * Server middleware applying {@link toServerError} to every method. Calls cut
 * short by server shutdown end UNAVAILABLE, so clients know to retry elsewhere.
 */
export function errorBoundary(logger: Logger, shutdownSignal?: AbortSignal): ServerMiddleware {
  return async function* errorBoundaryMiddleware(call, context: CallContext) {
    try {
      return yield* call.next(call.request, context);
    } catch (err) {
      if (shutdownSignal?.aborted && !(err instanceof BerthError) && !(err instanceof ServerError)) {
        throw new ServerError(Status.UNAVAILABLE, 'Berth is shutting down; retry the call');
      }
      throw toServerError(err, logger, call.method.path);
    }
  };
}

/** Client side: a gRPC ClientError back to the domain error of the same code. */
export function fromClientError(err: unknown): unknown {
  if (!(err instanceof ClientError)) return err;
  const code = FROM_STATUS.get(err.code);
  if (!code) return err;
  return new BerthError(code, err.details, { cause: err });
}
