/**
 * Docker Engine API failures as domain errors. A daemon that cannot be
 * reached is UNAVAILABLE (the caller may retry once it is back); a missing
 * image is FAILED_PRECONDITION with the way to build it.
 */
import {
  BerthError,
  FailedPreconditionError,
  ResourceExhaustedError,
  UnavailableError,
  fromSocketError,
} from '../../../common/errors.js';

/** The HTTP status of a Docker API error, if it is one. */
export function dockerStatus(err: unknown): number | undefined {
  const status = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof status === 'number' ? status : undefined;
}

/** 404 from the API: no such container, image, exec or volume. */
export function isNotFound(err: unknown): boolean {
  return dockerStatus(err) === 404;
}

/** 409: a name already in use, or a container that is not running. */
export function isConflict(err: unknown): boolean {
  return dockerStatus(err) === 409;
}

/** The daemon's own message, without dockerode's "(HTTP code 404) no such container -" prefix. */
export function dockerMessage(err: unknown): string {
  const json = (err as { json?: { message?: unknown } } | null)?.json;
  if (json && typeof json.message === 'string') return json.message;
  const reason = (err as { reason?: unknown } | null)?.reason;
  const message = err instanceof Error ? err.message : String(err);
  return typeof reason === 'string' && !message ? reason : message;
}

/** Names the daemon in messages: the socket path, or DOCKER_HOST. */
export function describeDaemon(socketPath: string | undefined): string {
  return socketPath ? `the Docker daemon at ${socketPath}` : 'the Docker daemon';
}

/**
 * Maps a dockerode failure during `what` (e.g. "creating the container for
 * task t1") to a domain error. Errors that are already domain errors pass.
 */
export function dockerError(err: unknown, what: string, daemon: string): BerthError {
  if (err instanceof BerthError) return err;
  const socket = fromSocketError(err, daemon);
  if (socket) {
    if (socket.code === 'UNAVAILABLE') {
      return new UnavailableError(`${socket.message}; start Docker (scripts/ensure-docker.sh) and retry (while ${what})`, {
        cause: err,
      });
    }
    return socket;
  }
  const status = dockerStatus(err);
  const message = dockerMessage(err);
  if (status === undefined) {
    return new UnavailableError(`${daemon} failed while ${what}: ${message}`, { cause: err });
  }
  if (/unknown or invalid runtime|unknown runtime/i.test(message)) {
    return new FailedPreconditionError(
      `${daemon} does not know the configured runtime (${message}); register it (scripts/ensure-docker.sh registers runsc) or change docker.runtime`,
      { cause: err },
    );
  }
  if (/no space left|too many/i.test(message)) {
    return new ResourceExhaustedError(`${daemon} is out of resources while ${what}: ${message}`, { cause: err });
  }
  if (status >= 500) return new UnavailableError(`${daemon} failed while ${what}: ${message}`, { cause: err });
  return new FailedPreconditionError(`${daemon} refused ${what}: ${message}`, { cause: err });
}

/** The error for an image that is not on the Docker host (Berth never pulls). */
export function missingImageError(image: string, daemon: string): FailedPreconditionError {
  return new FailedPreconditionError(
    `the sandbox image ${image} does not exist on ${daemon}. Build it with \`make image\` ` +
      '(scripts/build-image.sh builds berth-sandbox:latest), or set terminal.docker_image to an image that exists there; ' +
      'Berth never pulls images.',
  );
}
