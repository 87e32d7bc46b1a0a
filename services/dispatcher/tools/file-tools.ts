/**
 * The `file` toolset: read_file, write_file, patch and search_files.
 *
 * They run on the dispatcher and act only through the task's
 * {@link TaskClient} (read, write, stat, and stateless `exec` for search and
 * delete), so they behave the same on every executor backend. Edit logic is
 * pure and lives in patch/ (parse, apply, fuzzy matching, diff); the tools
 * do the I/O, argument handling and result shapes.
 *
 * Results are JSON strings. Problems the model can fix (bad arguments,
 * missing files, patches that do not apply) come back as `{"error": ...}`;
 * failures of the environment itself (executor unreachable) are thrown, so
 * the registry reports them as tool errors.
 */
import { parseJsonObject } from '../../common/json-object.js';
import type { ToolArgs, ToolContext, ToolHandler, ToolRegistration } from '../registry/tool-types.js';
import { FileLoopGuard } from './file/loop-guard.js';
import { patchRegistration } from './patch/patch-tool.js';
import { readFileRegistration } from './file/read-file.js';
import { searchFilesRegistration } from './file/search/search-files.js';
import type { SearchEngine } from './file/search/search-plan.js';
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
  /**
   * The repeated-read/search guard shared by these registrations; a new one
   * when omitted (one per registry in production, where the registry tells
   * it about every call).
   */
  readonly loopGuard?: FileLoopGuard;
  /** Mask secrets in read_file content and search_files matches (`security.redact_secrets`); default true. */
  readonly redactSecrets?: boolean;
}

/**
 * The four file tools as registrations for the `file` toolset, ready for
 * `ToolRegistry.register`. Returned as data so the registry and its callers
 * decide when to register.
 */
export function fileToolRegistrations(options: FileToolOptions = {}): ToolRegistration[] {
  const searchEngine = options.searchEngine ?? 'auto';
  const loopGuard = options.loopGuard ?? new FileLoopGuard();
  const patch = patchRegistration();
  const redactSecrets = options.redactSecrets ?? true;
  const search = searchFilesRegistration(searchEngine, { redactSecrets });
  return [
    readFileRegistration({ loopGuard, redactSecrets }),
    writeFileRegistration({ loopGuard }),
    { ...patch, handler: forgettingPatchedFiles(patch.handler, loopGuard) },
    { ...search, callObserver: loopGuard, handler: guardedSearch(search.handler, loopGuard) },
  ];
}

/** Upstream `_handle_search_files` accepts these for `target`; the key uses the mapped value. */
const SEARCH_TARGET_ALIASES: Readonly<Record<string, string>> = { grep: 'content', find: 'files' };

function integerOr(value: unknown, fallback: number): number {
  const n = typeof value === 'number' ? value : typeof value === 'string' && value.trim() !== '' ? Number(value) : NaN;
  return Number.isFinite(n) ? Math.trunc(n) : fallback;
}

/**
 * The key of a search for the repeated-search guard: pattern, target, path
 * (blank meaning `.`), glob, the page (so paging through results is not a
 * repeat) and the order, normalised as upstream `search_tool` does before
 * counting.
 */
export function searchCallKey(args: ToolArgs): string {
  const rawTarget = typeof args.target === 'string' ? args.target : 'content';
  return JSON.stringify([
    typeof args.pattern === 'string' ? args.pattern : '',
    SEARCH_TARGET_ALIASES[rawTarget] ?? rawTarget,
    typeof args.path === 'string' && args.path.trim() !== '' ? args.path : '.',
    typeof args.file_glob === 'string' ? args.file_glob : '',
    Math.max(1, integerOr(args.limit, 50)),
    Math.max(0, integerOr(args.offset, 0)),
    typeof args.order === 'string' ? args.order : 'discovery',
  ]);
}

/**
 * Adds the repeated-search guard around search_files: the 3rd identical
 * search in a row gets `_warning`, the 4th and later are refused without
 * searching. Counted before the search runs, as upstream does.
 */
function guardedSearch(inner: ToolHandler, guard: FileLoopGuard): ToolHandler {
  return async (args: ToolArgs, context: ToolContext) => {
    const count = guard.recordSearch(context, searchCallKey(args));
    if (count >= 4) {
      return JSON.stringify({
        error:
          `BLOCKED: You have run this exact search ${count} times in a row. The results have NOT changed. ` +
          'You already have this information. STOP re-searching and proceed with your task.',
        pattern: args.pattern,
        already_searched: count,
      });
    }
    const result = await inner(args, context);
    if (count < 3) return result;
    return withKeyAdded(
      result,
      '_warning',
      `You have run this exact search ${count} times consecutively. The results have not changed. ` +
        'Use the information you already have.',
    );
  };
}

/**
 * Adds a key to a JSON-object result, before its `_hint` when it has one
 * (upstream sets the truncation `_hint` last, after `_warning`). A result
 * that is not a JSON object is returned unchanged.
 */
export function withKeyAdded(result: string, key: string, value: unknown): string {
  const parsed = parseJsonObject(result);
  if (parsed === undefined) return result;
  const { _hint: hint, ...rest } = parsed;
  return JSON.stringify({ ...rest, [key]: value, ...(hint === undefined ? {} : { _hint: hint }) });
}

/** After a patch that changed files, read_file returns their content again instead of an "unchanged" stub. */
function forgettingPatchedFiles(inner: ToolHandler, guard: FileLoopGuard): ToolHandler {
  return async (args: ToolArgs, context: ToolContext) => {
    const result = await inner(args, context);
    // A patch may touch several files, named in ways this wrapper cannot resolve; forget every region.
    if (!/^\{"error"/.test(result)) guard.forgetAllPaths(context);
    return result;
  };
}
