/**
 * Consecutive "old_string not found" failures per task and file, so the
 * third miss on one file tells the model to stop guessing. Bounded: the
 * least recently used tasks and paths are forgotten first.
 */
import type { ToolContext } from '../../registry/tool-types.js';

const MAX_TASKS = 1024;
const MAX_PATHS_PER_TASK = 64;

export class PatchFailureCounter {
  /** Task key → (absolute path → consecutive failures); Map order is recency. */
  private readonly tasks = new Map<string, Map<string, number>>();

  constructor(
    private readonly maxTasks = MAX_TASKS,
    private readonly maxPathsPerTask = MAX_PATHS_PER_TASK,
  ) {}

  /** Counts one more failure on `path` and returns the new count. */
  record(task: string, path: string): number {
    const paths = this.tasks.get(task) ?? new Map<string, number>();
    this.tasks.delete(task);
    this.tasks.set(task, paths);
    const count = (paths.get(path) ?? 0) + 1;
    paths.delete(path);
    paths.set(path, count);
    evictOldest(paths, this.maxPathsPerTask);
    evictOldest(this.tasks, this.maxTasks);
    return count;
  }

  /** A successful edit of these paths starts their count afresh. */
  reset(task: string, paths: readonly string[]): void {
    const counts = this.tasks.get(task);
    if (counts === undefined) return;
    for (const path of paths) counts.delete(path);
    if (counts.size === 0) this.tasks.delete(task);
  }
}

function evictOldest<K, V>(map: Map<K, V>, max: number): void {
  while (map.size > max) {
    const oldest = map.keys().next();
    if (oldest.done === true) return;
    map.delete(oldest.value);
  }
}

/** Shared by every `patch` registration in this process; keyed by tenant and task, so tasks never see each other's counts. */
export const patchFailures = new PatchFailureCounter();

/** The key a task's failures are counted under: tenant and task. */
export function taskKey(context: ToolContext): string {
  return `${context.tenant}\0${context.taskId}`;
}
