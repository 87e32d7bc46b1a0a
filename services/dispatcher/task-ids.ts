/** The task ids clients send: opaque to Berth but bounded, as they end up in paths and labels on the executor. */
import { InvalidArgumentError } from '../common/errors.js';

const TASK_ID_PATTERN = /^[A-Za-z0-9_.:@=+-]{1,128}$/;

/** Validates a client-supplied task id (`''` is `default`); the tenant namespaces it from here on. */
export function checkTaskId(taskId: string): string {
  const id = taskId === '' ? 'default' : taskId;
  if (!TASK_ID_PATTERN.test(id)) {
    throw new InvalidArgumentError(
      'task_id must be 1-128 characters of A-Z a-z 0-9 and _ . : @ = + -',
    );
  }
  return id;
}
