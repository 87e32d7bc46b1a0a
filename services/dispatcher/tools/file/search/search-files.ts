/**
 * search_files: content search (ripgrep, or grep as a fallback) and file-name search in the task environment.
 *
 * Result shape and texts follow upstream hermes-agent (`SearchResult.to_dict(densify=True)` and `search_tool`):
 * `total_count` first, then `matches` (or, from 5 matches on, the path-grouped `matches_format`/`matches_text`),
 * `files`, `counts`, `truncated` + `total_count_is_lower_bound`, `limit_reason`, `warning`, `error`;
 * a truncated result has a hint appended after the JSON text.
 */
import { randomBytes } from 'node:crypto';
import { redactFileContent, SECRET_ENV_BASENAMES } from '../../../redaction/output-redaction.js';
import type { ToolArgs, ToolContext, ToolRegistration } from '../../../registry/tool-types.js';
import { ToolInputError, enumArg, guarded, intArg, stringArg, TOOLSET, type JsonObject } from '../common.js';
import { compareText, parseContentRecords, parseCounts, parseFileList, parseNulList, splitSearchOutput } from './search-output.js';
import type { SearchEngine, SearchPlan } from './search-plan.js';
import { pathNotFound, zeroMatchProbe } from './search-probes.js';
import { emptyOutcome, errorOutcome, fillContentMatches, toWire, truncationHint } from './search-result.js';
import { buildSearchScript, SEARCH_OUTPUT_CAP_BYTES } from './search-script.js';

const SEARCH_DEFAULT_LIMIT = 50;
const SEARCH_MAX_LIMIT = 1000;
const SEARCH_MAX_CONTEXT = 10;
const SEARCH_TIMEOUT_MS = 60_000;
/** Parts of a several-paths-in-one `path` that are looked up; the rest count as missing. */
const MULTI_PATH_MAX_PARTS = 100;

export function isSecretEnvFile(path: string): boolean {
  const base = path.slice(path.lastIndexOf('/') + 1).toLowerCase();
  return SECRET_ENV_BASENAMES.has(base);
}

export function secretEnvAccessDenied(path: string): string {
  return (
    `Access denied: ${path} is a secret-bearing environment file and cannot be read to prevent credential leakage. ` +
    'If you need to check the file structure, read .env.example instead. ' +
    '(Defense-in-depth — not a security boundary; the terminal tool can still bypass.)'
  );
}

const MULTILINE_NOTE =
  'Pattern contains \\n — multiline mode (-U) was enabled automatically so the regex can match across line boundaries.';
const LINE_ORIENTED_NOTE =
  '0 results found. Note: search_files content search is line-oriented and does not run ripgrep with ' +
  '-U/--multiline, so `\\n` in the regex does not match line breaks. Use context=N to inspect neighboring lines, ' +
  'or escape as `\\\\n` when searching for a literal backslash+n.';

/** Options of {@link searchFilesRegistration}. */
export interface SearchFilesOptions {
  /** Mask secrets in match content (`security.redact_secrets`); default true. */
  readonly redactSecrets?: boolean;
}

export function searchFilesRegistration(searchEngine: SearchEngine, options: SearchFilesOptions = {}): ToolRegistration {
  const redact = options.redactSecrets ?? true;
  return {
    name: 'search_files',
    toolset: TOOLSET,
    emoji: '🔎',
    schema: {
      name: 'search_files',
      description:
        'Search the task environment. Use this instead of grep/rg/find/ls in the terminal. target="content" ' +
        '(default) finds lines matching a regular expression (ripgrep syntax) in files under path, as matching ' +
        'lines, file paths only, or match counts per file; target="files" finds files whose name matches a glob ' +
        'such as "*.py". Hidden files and directories, .gitignore\'d files and node_modules are skipped. ' +
        'From 5 matches on, matches come path-grouped as matches_text.',
      parameters: {
        type: 'object',
        properties: {
          pattern: {
            type: 'string',
            description:
              'target="content": regular expression to look for in file contents. target="files": file-name glob ' +
              '(e.g. "*.ts", "test_*"); text without wildcards matches names containing it.',
          },
          target: {
            type: 'string',
            enum: ['content', 'files'],
            description: 'Search file contents ("content") or file names ("files"). Default "content".',
            default: 'content',
          },
          path: {
            type: 'string',
            description: 'Directory (or single file) to search. Default "." (the current working directory).',
            default: '.',
          },
          file_glob: {
            type: 'string',
            description: 'target="content" only: search just files whose name matches this glob, e.g. "*.py".',
          },
          limit: {
            type: 'integer',
            description: `Maximum results to return, 1-${SEARCH_MAX_LIMIT}. Default ${SEARCH_DEFAULT_LIMIT}.`,
            minimum: 1,
            maximum: SEARCH_MAX_LIMIT,
            default: SEARCH_DEFAULT_LIMIT,
          },
          offset: {
            type: 'integer',
            description: 'Results to skip, for paging through many results. Default 0.',
            minimum: 0,
            default: 0,
          },
          output_mode: {
            type: 'string',
            enum: ['content', 'files_only', 'count'],
            description:
              'target="content" only: "content" lists matching lines, "files_only" lists matching files, ' +
              '"count" gives matching lines per file. Default "content".',
            default: 'content',
          },
          context: {
            type: 'integer',
            description: `Lines of context to include before and after each match (0-${SEARCH_MAX_CONTEXT}). Default 0.`,
            minimum: 0,
            maximum: SEARCH_MAX_CONTEXT,
            default: 0,
          },
          order: {
            type: 'string',
            enum: ['discovery', 'modified'],
            description:
              'target="files" only: "discovery" (default) lists files in path order; "modified" lists the most ' +
              'recently modified first.',
            default: 'discovery',
          },
        },
        required: ['pattern'],
      },
    },
    handler: guarded((args, context) => searchFilesTool(args, context, searchEngine, redact)),
  };
}

async function searchFilesTool(
  args: ToolArgs,
  context: ToolContext,
  engine: SearchEngine,
  redact: boolean,
): Promise<JsonObject> {
  const pattern = stringArg(args, 'pattern', true);
  if (pattern === '') throw new ToolInputError('Parameter pattern must not be empty');
  const rawTarget = stringArg(args, 'target', false) ?? 'content';
  const target = rawTarget === 'grep' ? 'content' : rawTarget === 'find' ? 'files' : rawTarget;
  if (target !== 'content' && target !== 'files') {
    throw new ToolInputError('Parameter target must be one of: content, files');
  }
  const outputMode = enumArg(args, 'output_mode', ['content', 'files_only', 'count'] as const, 'content');
  const rawPath = stringArg(args, 'path', false) ?? '.';
  const path = rawPath.trim() === '' ? '.' : rawPath;
  const fileGlob = stringArg(args, 'file_glob', false);
  const limit = intArg(args, 'limit', SEARCH_DEFAULT_LIMIT, 1, SEARCH_MAX_LIMIT);
  const offset = intArg(args, 'offset', 0, 0);
  const contextLines = intArg(args, 'context', 0, 0, SEARCH_MAX_CONTEXT);
  const order = stringArg(args, 'order', false) ?? 'discovery';
  /** A truncated result's hint is its last key (the repeated-search `_warning` goes before it). */
  const record = (result: JsonObject, hint?: string) => (hint === undefined ? result : { ...result, _hint: hint });
  if (target === 'files' && order !== 'discovery' && order !== 'modified') {
    return record(errorOutcome(`Invalid file search order '${order}'; expected 'discovery' or 'modified'.`));
  }

  const stat = await context.task.stat(path);
  if (isSecretEnvFile(stat.absPath)) return record({ error: secretEnvAccessDenied(stat.absPath) });
  const expand = (given: string, absPath: string): string => (given.startsWith('~') ? absPath : given);
  let roots: string[];
  let displayRoot: string | undefined;
  const leadWarnings: string[] = [];
  if (stat.exists) {
    roots = [expand(path, stat.absPath)];
    displayRoot = path;
  } else {
    // Models often pass several paths in one string: search the parts that exist.
    const parts = path.includes(',')
      ? path.split(',').map((part) => part.trim()).filter((part) => part !== '')
      : path.split(/\s+/).filter((part) => part !== '');
    const existing: string[] = [];
    const missing: string[] = [];
    if (parts.length >= 2) {
      const stats = await Promise.all(parts.slice(0, MULTI_PATH_MAX_PARTS).map((part) => context.task.stat(part)));
      for (const [index, part] of parts.entries()) {
        const partStat = stats[index];
        if (partStat?.exists !== true) {
          missing.push(partStat === undefined ? part : expand(part, partStat.absPath));
          continue;
        }
        if (isSecretEnvFile(partStat.absPath)) return record({ error: secretEnvAccessDenied(partStat.absPath) });
        existing.push(expand(part, partStat.absPath));
      }
    }
    if (existing.length === 0) return record(errorOutcome(await pathNotFound(expand(path, stat.absPath), context)));
    let note = `path contained ${parts.length} entries; searched ${existing.length} that exist`;
    if (missing.length > 0) {
      note += `; skipped missing: ${missing.slice(0, 3).join(', ')}`;
      if (missing.length > 3) note += ` (+${missing.length - 3} more)`;
    }
    leadWarnings.push(note);
    roots = existing;
  }

  const plan: SearchPlan = {
    mode: target === 'files' ? 'files' : outputMode,
    pattern,
    // A leading `-` would read as an option to find.
    roots: roots.map((root) => (root.startsWith('-') ? `./${root}` : root)),
    ...(fileGlob !== undefined && fileGlob !== '' ? { fileGlob } : {}),
    context: contextLines,
    engine,
    order: order === 'modified' ? 'modified' : 'discovery',
    multiline: target === 'content' && patternHasRegexNewline(pattern),
  };
  const display = (p: string): string =>
    (displayRoot === '.' || displayRoot === './') && p.startsWith('./') ? p.slice(2) : p;

  const outcome = emptyOutcome();
  outcome.warnings.push(...leadWarnings);
  const sentinel = `__BERTH_SEARCH_END_${randomBytes(8).toString('hex')}__`;
  const execResult = await context.task.exec({
    command: buildSearchScript(plan, sentinel),
    stateless: true,
    timeoutMs: SEARCH_TIMEOUT_MS,
    maxOutputChars: SEARCH_OUTPUT_CAP_BYTES + 64_000,
    signal: context.signal,
  });
  if (execResult.interrupted) throw new ToolInputError('Search interrupted.');
  if (execResult.timedOut) {
    outcome.truncated = true;
    outcome.limitReason = 'search_timeout';
    outcome.warnings.push(
      `Search timed out after ${SEARCH_TIMEOUT_MS / 1000}s. Narrow the path, add a file_glob, or simplify the pattern.`,
    );
    return record(toWire(outcome), truncationHint(offset, limit));
  }
  const output = splitSearchOutput(execResult, sentinel);
  if (output.error !== undefined) {
    if (plan.mode !== 'files' && output.engine === 'grep' && plan.multiline && isLineOrientedNewlineError(output.error)) {
      outcome.warnings.splice(0, outcome.warnings.length, ...leadWarnings, LINE_ORIENTED_NOTE);
      return record(toWire(outcome));
    }
    outcome.error = output.error;
    return record(toWire(outcome));
  }
  if (output.engine === 'find-no-mtime') {
    return record(
      errorOutcome(
        'Exact modification-time order requires GNU find with -printf support; ' +
          "install ripgrep 14+ or use order='discovery'.",
      ),
    );
  }
  if (output.capped) {
    outcome.warnings.push(
      'The search produced too much output; total_count is a lower bound. Narrow the pattern, path or file_glob.',
    );
  }
  if (output.warning !== undefined) outcome.warnings.push(output.warning);
  if (plan.multiline && output.engine === 'rg' && plan.mode !== 'count') outcome.warnings.unshift(MULTILINE_NOTE);

  const page = <T>(items: readonly T[]): T[] => {
    outcome.truncated = outcome.truncated || output.capped || offset + limit < items.length;
    return items.slice(offset, offset + limit);
  };
  if (plan.mode === 'files') {
    const files = parseFileList(output.body, output.engine).map(display);
    outcome.totalCount = files.length;
    outcome.files = page(files);
  } else if (plan.mode === 'files_only') {
    const files = [...new Set(parseNulList(output.body))].map(display).sort(compareText);
    outcome.totalCount = files.length;
    outcome.files = page(files);
  } else if (plan.mode === 'count') {
    const entries = parseCounts(output.body)
      .map(([file, count]): [string, number] => [display(file), count])
      .sort((a, b) => compareText(a[0], b[0]));
    outcome.totalCount = entries.reduce((sum, [, count]) => sum + count, 0);
    outcome.counts = page(entries);
  } else {
    const records = parseContentRecords(output.body).map((entry) => ({ ...entry, path: display(entry.path) }));
    const matches = records.filter((entry) => entry.isMatch).sort((a, b) => compareText(a.path, b.path) || a.line - b.line);
    outcome.totalCount = matches.length;
    const shown = page(matches);
    fillContentMatches(outcome, shown, records, plan.context, redact ? redactFileContent : (text) => text);
  }

  if (plan.mode !== 'files' && outcome.totalCount === 0) {
    if (output.engine === 'rg') {
      const hint = await zeroMatchProbe(plan, display, context).catch(() => undefined);
      if (hint !== undefined) outcome.warnings.push(hint);
    } else if (output.engine === 'grep' && plan.multiline) {
      outcome.warnings.splice(0, outcome.warnings.length, ...leadWarnings, LINE_ORIENTED_NOTE);
    }
  }
  const result = toWire(outcome);
  return record(result, outcome.truncated ? truncationHint(offset, limit) : undefined);
}

/** A literal newline, or `\n` after an odd number of backslashes (`\\n` is a literal backslash and n). */
export function patternHasRegexNewline(pattern: string): boolean {
  return pattern.includes('\n') || /(?<!\\)(?:\\\\)*\\n/.test(pattern);
}

/** rg refusing `\n` outside multiline mode, or grep -P refusing a pattern with a newline in it. */
function isLineOrientedNewlineError(error: string): boolean {
  const rgRefusal = /literal "\\n" is not allowed/.test(error) && error.includes('--multiline');
  return rgRefusal || /only supports a single pattern/.test(error);
}
