/**
 * The `file` toolset: read_file, write_file, patch and search_files.
 *
 * They run on the dispatcher and act only through the task's
 * {@link TaskClient} (read, write, stat, and stateless `exec` for search and
 * delete), so they behave the same on every executor backend. Edit logic is
 * pure and lives in patch-parser.ts / unified-diff.ts; this file does the
 * I/O, argument handling and result shapes.
 *
 * Results are JSON strings. Problems the model can fix (bad arguments,
 * missing files, patches that do not apply) come back as `{"error": ...}`;
 * failures of the environment itself (executor unreachable) are thrown, so
 * the registry reports them as tool errors.
 */
import type { ToolRegistration } from '../tool-types.js';
import { patchRegistration } from './file/patch-tool.js';
import { readFileRegistration } from './file/read-file.js';
import { searchFilesRegistration, type SearchEngine } from './file/search-files.js';
import { writeFileRegistration } from './file/write-file.js';

export type { SearchEngine };

/** Options of {@link fileToolRegistrations}. */
export interface FileToolOptions {
  /**
   * `auto` (default) uses ripgrep when `command -v rg` finds it and GNU-style
   * grep/find otherwise; `rg` and `grep` force one (tests use `grep` to cover
   * the fallback on machines that have ripgrep).
   */
  readonly searchEngine?: SearchEngine;
}


/**
 * The four file tools as registrations for the `file` toolset, ready for
 * `ToolRegistry.register`. Returned as data so the registry and its callers
 * decide when to register.
 */
export function fileToolRegistrations(options: FileToolOptions = {}): ToolRegistration[] {
  const searchEngine = options.searchEngine ?? 'auto';
  return [readFileRegistration(), writeFileRegistration(), patchRegistration(), searchFilesRegistration(searchEngine)];
}
