/**
 * Guards every backend's environment puts around the caller's code and its
 * own lifetime: a released environment refuses new work, and a consumer of
 * output or of an exit code that throws is logged, never allowed to kill the
 * executor or stop the process being read.
 */
import { posix } from 'node:path';
import { FailedPreconditionError, InvalidArgumentError } from '../../../common/errors.js';
import type { Logger } from '../../../common/logging.js';

/** File operations take absolute paths inside the sandbox only. */
export function assertAbsolute(absPath: string): void {
  if (!posix.isAbsolute(absPath)) throw new InvalidArgumentError(`path must be absolute: ${absPath}`);
}

/** Throws once the environment is being (or was) released. */
export function assertNotReleased(environment: { readonly description: string }, released: unknown): void {
  if (released) throw new FailedPreconditionError(`environment ${environment.description} was released`);
}

/** Hands a non-empty `chunk` to `onOutput`. */
export function deliverOutput(onOutput: ((chunk: Buffer) => void) | undefined, chunk: Buffer, logger: Logger | undefined): void {
  if (!onOutput || chunk.length === 0) return;
  try {
    onOutput(chunk);
  } catch (err) {
    logger?.warn({ err }, 'output consumer threw');
  }
}

/** Hands a background process's exit code to `onExit`. */
export function deliverExit(onExit: (code: number) => void, code: number, logger: Logger | undefined): void {
  try {
    onExit(code);
  } catch (err) {
    logger?.warn({ err }, 'exit consumer threw');
  }
}
