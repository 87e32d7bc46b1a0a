/** Modal's (and its SDK's) failures as domain errors that name the provider, what failed, and the fix. */
import { FailedPreconditionError, ResourceExhaustedError, UnavailableError } from '../../../common/errors.js';

/** What a user reads when Modal (or the SDK) says no: the provider, what failed, and the fix. */
export function modalError(err: unknown, doing: string, image?: string): Error {
  const e = err as { code?: unknown; details?: unknown; message?: unknown; name?: unknown };
  const message = typeof e.details === 'string' && e.details ? e.details : String(e.message ?? err);
  const name = typeof e.name === 'string' ? e.name : '';
  if (/Profile is missing credentials/.test(message)) {
    return new FailedPreconditionError(
      'Modal credentials are missing: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET in the executor\'s environment ' +
        '(create a token with `modal token new`)',
      { cause: err },
    );
  }
  if (e.code === 16 || e.code === 7) {
    return new FailedPreconditionError(
      `Modal refused the credentials while ${doing} (${message}): check MODAL_TOKEN_ID and MODAL_TOKEN_SECRET ` +
        'in the executor\'s environment (create a token with `modal token new`)',
      { cause: err },
    );
  }
  if (e.code === 8 || name === 'ResourceExhaustedError') {
    return new ResourceExhaustedError(`Modal has no capacity or quota left while ${doing}: ${message}`, { cause: err });
  }
  if (/^Image build for .* failed/.test(message)) {
    return new FailedPreconditionError(
      `Modal could not build terminal.modal_image ${JSON.stringify(image ?? '')} while ${doing}: ${message.replace(/\s+/g, ' ')}; ` +
        'check the image name and that Modal can pull it',
      { cause: err },
    );
  }
  if (e.code === 14) {
    return new UnavailableError(`cannot reach Modal while ${doing}: ${message}`, { cause: err });
  }
  return new UnavailableError(`Modal failed while ${doing}: ${message}`, { cause: err });
}
