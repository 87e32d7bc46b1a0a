import { ClientError, Status } from '../common/nice-grpc-common-cjs.js';

/**
 * A call that failed as a call, not as a tool (tool failures are results):
 * bad request, unknown approval, server unreachable, permission denied, ...
 * Carries the gRPC status the server (or the channel) gave.
 */
export class BerthError extends Error {
  /** The gRPC status code, e.g. `Status.UNAVAILABLE` (14). */
  readonly code: Status;
  /** The status name, e.g. `UNAVAILABLE`. */
  readonly status: string;
  /** The server's message, without the status prefix. */
  readonly details: string;

  constructor(code: Status, details: string, options?: { cause?: unknown }) {
    super(`${Status[code] ?? String(code)}: ${details}`, options);
    this.name = 'BerthError';
    this.code = code;
    this.status = Status[code] ?? String(code);
    this.details = details;
  }
}

/** Status name (as the Session stream reports it) to code; UNKNOWN for names this version does not know. */
export function statusFromName(name: string): Status {
  const code = (Status as unknown as Record<string, unknown>)[name];
  return typeof code === 'number' ? (code as Status) : Status.UNKNOWN;
}

/** Wraps a transport error in a {@link BerthError}; other errors (aborts included) pass unchanged. */
export function toBerthError(err: unknown): unknown {
  if (err instanceof ClientError) return new BerthError(err.code, err.details, { cause: err });
  return err;
}
