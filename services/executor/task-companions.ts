/**
 * A task's companions: what lives and goes with its environment (execute_code's
 * code container, the task's MCP connections). One is made on first use,
 * shared by later calls, and disposed when the task is released.
 */
import { UnavailableError } from '../common/errors.js';
import type { Logger } from '../common/logging.js';
import type { TaskKey } from './backend.js';
import { taskKeyString } from './backend.js';

/** Something that lives and goes with a task's environment (execute_code's code container). */
export interface TaskCompanion {
  dispose(): Promise<void>;
}

/** What of a task holds its companions (a task table entry). */
export interface CompanionHolder {
  readonly key: TaskKey;
  /** By name; a companion being made is its promise. */
  readonly companions: Map<string, Promise<TaskCompanion>>;
  /** Set when release begins: no new companions after that. */
  released: boolean;
}

/**
 * The task's companion called `name`, made by `create` on first use. A failed
 * `create` is not kept; the next call tries again. Rejects once the task is
 * being released.
 */
export function taskCompanion<T extends TaskCompanion>(holder: CompanionHolder, name: string, create: () => Promise<T>): Promise<T> {
  if (holder.released) {
    return Promise.reject(new UnavailableError(`task ${taskKeyString(holder.key)} was released while it was being used`));
  }
  let entry = holder.companions.get(name);
  if (!entry) {
    const created = create();
    entry = created;
    holder.companions.set(name, created);
    created.catch(() => {
      if (holder.companions.get(name) === created) holder.companions.delete(name);
    });
  }
  return entry as Promise<T>;
}

/** Disposes every companion of a released task; one that was never made, or fails to go, does not stop the others. */
export async function disposeCompanions(holder: CompanionHolder, logger: Logger): Promise<void> {
  await Promise.all([...holder.companions].map(([name, companion]) => disposeCompanion(holder, name, companion, logger)));
}

async function disposeCompanion(holder: CompanionHolder, name: string, companion: Promise<TaskCompanion>, logger: Logger): Promise<void> {
  let made: TaskCompanion;
  try {
    made = await companion;
  } catch {
    return;
  }
  await made.dispose().catch((err: unknown) =>
    logger.warn({ err, tenant: holder.key.tenant, task: holder.key.taskId, companion: name }, 'disposing a task companion failed'),
  );
}
