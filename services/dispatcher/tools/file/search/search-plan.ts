/** What one search_files call asks the environment to do. */

/** Which search program search_files runs in the task's environment. */
export type SearchEngine = 'auto' | 'rg' | 'grep';

export type SearchMode = 'content' | 'files_only' | 'count' | 'files';
export type FileOrder = 'discovery' | 'modified';

export interface SearchPlan {
  readonly mode: SearchMode;
  readonly pattern: string;
  /** The roots as handed to the search program (already made safe to pass). */
  readonly roots: readonly string[];
  readonly fileGlob?: string;
  readonly context: number;
  readonly engine: SearchEngine;
  readonly order: FileOrder;
  readonly multiline: boolean;
}

/** Skipped even when not hidden or ignored: version-control internals and the heaviest dependency tree. */
export const SEARCH_EXCLUDED_DIRS = ['.git', 'node_modules'] as const;
