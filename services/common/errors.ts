/**
 * Domain errors. Each carries the gRPC status it maps to; one boundary
 * (services/common/grpc-errors.ts) converts them, so handlers just throw.
 */

export type ErrorCode =
  | 'INVALID_ARGUMENT'
  | 'NOT_FOUND'
  | 'FAILED_PRECONDITION'
  | 'RESOURCE_EXHAUSTED'
  | 'DEADLINE_EXCEEDED'
  | 'UNAVAILABLE'
  | 'PERMISSION_DENIED'
  | 'UNAUTHENTICATED'
  | 'ABORTED'
  | 'CANCELLED';

export class BerthError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

export class InvalidArgumentError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('INVALID_ARGUMENT', message, options);
  }
}

export class NotFoundError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('NOT_FOUND', message, options);
  }
}

export class FailedPreconditionError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('FAILED_PRECONDITION', message, options);
  }
}

export class ResourceExhaustedError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('RESOURCE_EXHAUSTED', message, options);
  }
}

export class UnavailableError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('UNAVAILABLE', message, options);
  }
}

export class PermissionDeniedError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('PERMISSION_DENIED', message, options);
  }
}

export class UnauthenticatedError extends BerthError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('UNAUTHENTICATED', message, options);
  }
}

/**
 * Socket errno to domain error (the connect-es table): connection failures
 * are UNAVAILABLE, resets are ABORTED. Used for docker socket and ssh errors.
 */
export function fromSocketError(err: unknown, what: string): BerthError | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return undefined;
  const detail = err instanceof Error ? err.message : String(err);
  switch (code) {
    case 'ECONNREFUSED':
    case 'ETIMEDOUT':
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'ENOENT':
    case 'EHOSTUNREACH':
      return new UnavailableError(`${what} is unavailable: ${detail}`, { cause: err });
    case 'ECONNRESET':
    case 'EPIPE':
      return new BerthError('ABORTED', `${what} connection was reset: ${detail}`, { cause: err });
    default:
      return undefined;
  }
}

const INFRASTRUCTURE_CODES: ReadonlySet<ErrorCode> = new Set(['UNAVAILABLE', 'CANCELLED', 'ABORTED', 'UNAUTHENTICATED']);

/**
 * Settings whose refusal is the host's capacity, not the tool call's: a
 * RESOURCE_EXHAUSTED whose message starts with `SETTING: ` reaches the
 * caller as that gRPC status (as a quota does), not as a tool result. The
 * message is what crosses the executor's gRPC boundary, so it carries the mark.
 */
export const CAPACITY_SETTINGS = ['docker.memory_overcommit', 'terminal.container_disk'] as const;

/**
 * Failures of Berth's own machinery (executor unreachable, call cancelled,
 * credentials wrong) rather than of the tool call. These reach the caller as
 * a gRPC status it can act on (retry, reconnect), not as a tool result the
 * model would read.
 */
export function isInfrastructureError(err: unknown): boolean {
  if (err instanceof BerthError) {
    if (err.code === 'RESOURCE_EXHAUSTED') return CAPACITY_SETTINGS.some((s) => err.message.startsWith(`${s}: `));
    return INFRASTRUCTURE_CODES.has(err.code);
  }
  return err instanceof Error && err.name === 'AbortError';
}
