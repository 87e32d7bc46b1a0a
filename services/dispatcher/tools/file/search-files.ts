/**
 * search_files: content search (ripgrep, or grep as a fallback) and file-name search in the task environment.
 *
 * Result shape and texts follow upstream hermes-agent (`SearchResult.to_dict(densify=True)` and `search_tool`):
 * `total_count` first, then `matches` (or, from 5 matches on, the path-grouped `matches_format`/`matches_text`),
 * `files`, `counts`, `truncated` + `total_count_is_lower_bound`, `limit_reason`, `warning`, `error`;
 * a truncated result has a hint appended after the JSON text.
 */
import { randomBytes } from 'node:crypto';
import { shellQuote } from '../../../common/shell/quote.js';
import type { TaskExecResult } from '../../../common/task-client.js';
import { redactFileContent } from '../../redaction/output-redaction.js';
import type { ToolArgs, ToolContext, ToolRegistration } from '../../tool-types.js';
import { SECRET_ENV_BASENAMES } from './file-safety.js';
import { READ_MAX_LINE_CHARS } from './read-file.js';
import { ToolInputError, enumArg, guarded, intArg, stringArg, TOOLSET, type JsonObject } from './common.js';

/** Which search program search_files runs in the task's environment. */
export type SearchEngine = 'auto' | 'rg' | 'grep';

const SEARCH_DEFAULT_LIMIT = 50;
const SEARCH_MAX_LIMIT = 1000;
const SEARCH_MAX_CONTEXT = 10;
/** Match content is cut to this many characters (upstream `content[:500]`). */
const SEARCH_MAX_CONTENT_CHARS = 500;
/** Raw search output kept from the environment; more makes total_count a lower bound. */
const SEARCH_OUTPUT_CAP_BYTES = 2_000_000;
const SEARCH_TIMEOUT_MS = 60_000;
const PROBE_TIMEOUT_MS = 30_000;
/** Parts of a several-paths-in-one `path` that are looked up; the rest count as missing. */
const MULTI_PATH_MAX_PARTS = 100;
/** Skipped even when not hidden or ignored: version-control internals and the heaviest dependency tree. */
const SEARCH_EXCLUDED_DIRS = ['.git', 'node_modules'] as const;
/** From this many matches on a page, matches are sent path-grouped as text (upstream `_DENSIFY_MIN_MATCHES`). */
const DENSIFY_MIN_MATCHES = 5;
const MATCHES_FORMAT =
  "path-grouped: each file path on its own line, followed by indented '<line>: <content>' rows for matches in that file";
/**
 * Directory names the hidden/ignored probe prunes before it recurses (upstream `SEARCH_PRUNE_DIR_NAMES`):
 * `--no-ignore` would otherwise walk whole dependency and build trees.
 */
const PROBE_PRUNE_DIR_NAMES = [
  '.git', '.hg', '.svn',
  'node_modules', 'venv', '.venv', 'site-packages', 'dist-packages', 'vendor', 'third_party',
  'build', 'dist', 'target', 'out', 'coverage', '.next', '.turbo', '.parcel-cache', '.nuxt', '.svelte-kit',
  '.archive',
  '__pycache__', '.cache', '.Trash', '.tox', '.nox', '.mypy_cache', '.pytest_cache', '.ruff_cache', '.npm', '.yarn',
  '.pnpm-store', '.gradle', '.m2', '.nuget',
  'backups', 'backup', '.backups',
] as const;
export { SECRET_ENV_BASENAMES };

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

/** Count-only ripgrep probes for a content search that found nothing, in upstream order; the first hit is reported. */
const ZERO_MATCH_PROBES = [
  {
    flags: '-i',
    message: (total: number, n: number, paths: string) =>
      `0 exact matches, but ${total} case-insensitive match(es) in ${n} file(s): ${paths} — ` +
      "the pattern's casing may be wrong.",
  },
  {
    flags: '--hidden --no-ignore',
    message: (total: number, n: number, paths: string) =>
      `0 matches in visible files, but ${total} match(es) in ${n} hidden or gitignored file(s): ${paths} — ` +
      'these are excluded by default.',
  },
  {
    flags: '-F',
    message: (total: number, n: number, paths: string) =>
      `0 regex matches, but ${total} literal match(es) in ${n} file(s): ${paths} — the pattern contains regex ` +
      'metacharacters that likely need escaping (or pass a simpler substring).',
  },
] as const;

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
    handler: async (args, context) => {
      // guarded() turns the result object into JSON; a truncated result's hint goes after it, outside the object.
      let hint: string | undefined;
      const text = await guarded(async (callArgs, callContext) => {
        const outcome = await searchFilesTool(callArgs, callContext, searchEngine, redact);
        hint = outcome.truncatedHint;
        return outcome.result;
      })(args, context);
      return hint === undefined ? text : `${text}${hint}`;
    },
  };
}

type SearchMode = 'content' | 'files_only' | 'count' | 'files';
type FileOrder = 'discovery' | 'modified';

interface SearchPlan {
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

interface ContentRecord {
  readonly path: string;
  readonly line: number;
  readonly text: string;
  readonly isMatch: boolean;
}

/** The fields of upstream's SearchResult; {@link toWire} gives them upstream's key order and omission rules. */
interface SearchOutcome {
  totalCount: number;
  matches: JsonObject[];
  matchesText?: string;
  files: string[];
  counts: [string, number][];
  truncated: boolean;
  limitReason?: string;
  warnings: string[];
  error?: string;
}

function emptyOutcome(): SearchOutcome {
  return { totalCount: 0, matches: [], files: [], counts: [], truncated: false, warnings: [] };
}

function toWire(outcome: SearchOutcome): JsonObject {
  const result: JsonObject = { total_count: outcome.totalCount };
  if (outcome.matchesText !== undefined) {
    result.matches_format = MATCHES_FORMAT;
    result.matches_text = outcome.matchesText;
  } else if (outcome.matches.length > 0) {
    result.matches = outcome.matches;
  }
  if (outcome.files.length > 0) result.files = outcome.files;
  if (outcome.counts.length > 0) result.counts = Object.fromEntries(outcome.counts);
  if (outcome.truncated) {
    result.truncated = true;
    result.total_count_is_lower_bound = true;
  }
  if (outcome.limitReason !== undefined) result.limit_reason = outcome.limitReason;
  const warning = outcome.warnings.filter((text) => text !== '').join(' ');
  if (warning !== '') result.warning = warning;
  if (outcome.error !== undefined) result.error = outcome.error;
  return result;
}

function errorOutcome(message: string): JsonObject {
  return toWire({ ...emptyOutcome(), error: message });
}

async function searchFilesTool(
  args: ToolArgs,
  context: ToolContext,
  engine: SearchEngine,
  redact: boolean,
): Promise<{ result: JsonObject; truncatedHint?: string }> {
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
  const record = (result: JsonObject, truncatedHint?: string) =>
    truncatedHint === undefined ? { result } : { result, truncatedHint };
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

function truncationHint(offset: number, limit: number): string {
  return (
    `\n\n[Hint: Results truncated. Use offset=${offset + limit} to see more, ` +
    'or narrow with a more specific pattern or file_glob.]'
  );
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

function fillContentMatches(
  outcome: SearchOutcome,
  shown: readonly ContentRecord[],
  records: readonly ContentRecord[],
  context: number,
  /** What the model sees of a line's text (cut, then redacted as upstream redacts `content[:500]`). */
  show: (text: string) => string,
): void {
  const linesByFile = new Map<string, Map<number, string>>();
  if (context > 0) {
    for (const entry of records) {
      let lines = linesByFile.get(entry.path);
      if (lines === undefined) linesByFile.set(entry.path, (lines = new Map()));
      lines.set(entry.line, entry.text);
    }
  }
  if (shown.length >= DENSIFY_MIN_MATCHES) {
    // Path-grouped rows; with context, the context lines are rows too (as upstream, whose context lines are matches).
    const rows: string[] = [];
    let index = 0;
    while (index < shown.length) {
      const path = shown[index]?.path ?? '';
      const lines = new Map<number, string>();
      for (; index < shown.length && shown[index]?.path === path; index++) {
        const match = shown[index] as ContentRecord;
        const around = linesByFile.get(path);
        for (let n = Math.max(1, match.line - context); n <= match.line + context; n++) {
          const text = n === match.line ? match.text : around?.get(n);
          if (text !== undefined && !lines.has(n)) lines.set(n, text);
        }
      }
      rows.push(path);
      for (const n of [...lines.keys()].sort((a, b) => a - b)) {
        rows.push(`  ${n}: ${show(cutContent(lines.get(n) ?? '')).trimEnd()}`);
      }
    }
    outcome.matchesText = rows.join('\n');
    return;
  }
  outcome.matches = shown.map((match) => {
    const entry: JsonObject = { path: match.path, line: match.line, content: show(cutContent(match.text)) };
    if (context > 0) {
      const lines = linesByFile.get(match.path);
      const around = (from: number, to: number): string[] => {
        const out: string[] = [];
        for (let n = from; n <= to; n++) {
          const text = lines?.get(n);
          if (text !== undefined) out.push(show(cutContent(text)));
        }
        return out;
      };
      entry.context_before = around(Math.max(1, match.line - context), match.line - 1);
      entry.context_after = around(match.line + 1, match.line + context);
    }
    return entry;
  });
}

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The first 500 characters (code points, as Python slices). */
function cutContent(text: string): string {
  if (text.length <= SEARCH_MAX_CONTENT_CHARS) return text;
  return Array.from(text).slice(0, SEARCH_MAX_CONTENT_CHARS).join('');
}

/** `os.path.dirname` / `basename` as Python computes them (a trailing slash leaves an empty base name). */
function splitPythonPath(path: string): { parent: string; base: string } {
  const cut = path.lastIndexOf('/') + 1;
  let head = path.slice(0, cut);
  if (head !== '' && !/^\/+$/.test(head)) head = head.replace(/\/+$/, '');
  return { parent: head === '' ? '.' : head, base: path.slice(cut) };
}

/** `Path not found: {path}` plus, when the parent directory lists names like it, `Similar paths: …` (upstream rule). */
async function pathNotFound(path: string, context: ToolContext): Promise<string> {
  const parts = [`Path not found: ${path}`];
  const { parent, base } = splitPythonPath(path);
  if (base !== '') {
    const q = shellQuote(parent);
    const listing = await context.task
      .exec({
        command: `if [ -d ${q} ]; then ls -1 -- ${q} 2>/dev/null | head -n 20; fi`,
        stateless: true,
        timeoutMs: PROBE_TIMEOUT_MS,
        maxOutputChars: 64_000,
        signal: context.signal,
      })
      .catch(() => undefined);
    if (listing !== undefined && listing.exitCode === 0) {
      const wanted = base.toLowerCase();
      const candidates = listing.output
        .split('\n')
        .filter((entry) => {
          const name = entry.toLowerCase();
          return entry !== '' && (name.includes(wanted) || wanted.includes(name) || name.startsWith(wanted.slice(0, 3)));
        })
        .map((entry) => (parent.endsWith('/') ? `${parent}${entry}` : `${parent}/${entry}`));
      if (candidates.length > 0) parts.push(`Similar paths: ${candidates.slice(0, 5).join(', ')}`);
    }
  }
  return parts.join('. ');
}

/** find's -path takes a glob; a root is matched literally. */
function escapeFindGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/**
 * One shell script that picks the engine (`command -v rg`), runs the search
 * with NUL-separated paths (so spaces, colons and quotes in names parse
 * unambiguously), caps its output, then prints a sentinel, the exit status
 * and stderr. Exec output merges stdout and stderr, so stderr is held in a
 * temp file and printed after the sentinel where it cannot corrupt results.
 *
 * Hidden files and directories are skipped below the roots (a root the caller
 * names is searched even when hidden): ripgrep does that by default and also
 * honours .gitignore; the fallback prunes them with find, since grep's
 * --exclude-dir also matches the roots themselves and any root below a
 * hidden directory.
 */
function buildSearchScript(plan: SearchPlan, sentinel: string): string {
  const q = shellQuote;
  const roots = plan.roots.map(q).join(' ');
  const rgExcludes = SEARCH_EXCLUDED_DIRS.map((dir) => `-g ${q(`!${dir}`)}`).join(' ');
  const exemptRoots = plan.roots.map((root) => `-path ${q(escapeFindGlob(root))}`).join(' -o ');
  const hiddenNames = ['.*', ...SEARCH_EXCLUDED_DIRS.filter((dir) => !dir.startsWith('.'))];
  const findWalk =
    `find ${roots} \\( -type d \\( ${hiddenNames.map((name) => `-name ${q(name)}`).join(' -o ')} \\) ` +
    `! \\( ${exemptRoots} \\) \\) -prune -o -type f \\( ! -name '.*' -o ${exemptRoots} \\)`;

  let rgCommand: string;
  let fallbackCommand: string;
  let fallbackSelect: string;
  if (plan.mode === 'files') {
    const glob = /[*?[]/.test(plan.pattern) ? plan.pattern : `*${plan.pattern}*`;
    // find's -name sees only the base name; a glob with a slash goes to -ipath,
    // whose `*` already crosses directories, so `**/` collapses into it.
    const findTest = glob.includes('/')
      ? `-ipath ${q(`*${glob.replaceAll('**/', '').replaceAll('**', '*')}`)}`
      : `-iname ${q(glob)}`;
    const sort = plan.order === 'modified' ? '--sortr modified' : '--sort path';
    // A whitelisting glob overrides rg's hidden-file rule, so hidden names are excluded again after it (a later
    // glob of the same kind wins; roots named explicitly are not subject to globs).
    rgCommand = `rg --no-config --files --null ${sort} ${rgExcludes} --iglob ${q(glob)} --iglob '!.*' -- ${roots}`;
    if (plan.order === 'modified') {
      fallbackSelect =
        "if find . -maxdepth 0 -printf '' >/dev/null 2>&1; then engine=find-mtime; else engine=find-no-mtime; fi";
      fallbackCommand = `if [ "$engine" = find-mtime ]; then ${findWalk} ${findTest} -printf '%T@ %p\\0'; fi`;
    } else {
      fallbackSelect = 'engine=find';
      fallbackCommand = `${findWalk} ${findTest} -print0`;
    }
  } else {
    const rgGlob = plan.fileGlob !== undefined ? ` -g ${q(plan.fileGlob)} -g '!.*'` : '';
    const globTest =
      plan.fileGlob === undefined
        ? ''
        : plan.fileGlob.includes('/')
          ? `-path ${q(`*/${plan.fileGlob}`)}`
          : `-name ${q(plan.fileGlob)}`;
    // An explicitly named file root is searched whatever the glob says, as rg does.
    const findGlob = globTest === '' ? '' : ` \\( ${globTest} -o ${exemptRoots} \\)`;
    const context = plan.context > 0 ? ` -C ${plan.context}` : '';
    const rgMode =
      plan.mode === 'files_only'
        ? '--files-with-matches'
        : plan.mode === 'count'
          ? '--count'
          : `--no-heading --line-number --sort path --max-columns ${READ_MAX_LINE_CHARS} --max-columns-preview${context}`;
    const grepMode = plan.mode === 'files_only' ? '-l' : plan.mode === 'count' ? '-c' : `-n${context}`;
    const multiline = plan.multiline ? ' --multiline' : '';
    rgCommand =
      `rg --no-config --color never --null --with-filename ${rgExcludes} ${rgMode}${multiline}${rgGlob} ` +
      `-e ${q(plan.pattern)} -- ${roots}`;
    fallbackSelect = 'engine=grep';
    // PCRE is the closest grep dialect to ripgrep's (\d, \s, lazy quantifiers); ERE otherwise.
    fallbackCommand =
      `if printf 'x\\n' | grep -qP 'x' 2>/dev/null; then flavor=-P; else flavor=-E; fi; ` +
      `${findWalk}${findGlob} -exec grep -H -Z -I -D skip $flavor --color=never ${grepMode} -e ${q(plan.pattern)} -- {} +`;
  }
  const select =
    plan.engine === 'rg'
      ? 'engine=rg'
      : plan.engine === 'grep'
        ? fallbackSelect
        : `if command -v rg >/dev/null 2>&1; then engine=rg; else ${fallbackSelect}; fi`;
  const search =
    plan.engine === 'rg'
      ? rgCommand
      : plan.engine === 'grep'
        ? fallbackCommand
        : `if [ "$engine" = rg ]; then ${rgCommand}; else ${fallbackCommand}; fi`;
  return [
    // A FIFO or device named as the path would be read by rg or grep until the timeout (a FIFO) or forever
    // (/dev/zero); inside a directory both skip them (find by -type f, rg by itself).
    ...plan.roots.map(
      (root) =>
        `if [ ! -d ${q(root)} ] && [ ! -f ${q(root)} ]; then printf 'engine=refused\\n\\n%s\\n2\\n%s\\n' ${q(sentinel)} ` +
        `${q(`${root} is not a regular file or directory; search_files only reads regular files`)}; exit 0; fi`,
    ),
    `t=$(mktemp -d 2>/dev/null) || { t="\${TMPDIR:-/tmp}/berth-search.$$"; mkdir -p "$t" || exit 90; }`,
    `trap 'rm -rf "$t"' EXIT`,
    select,
    `printf 'engine=%s\\n' "$engine"`,
    `{ { ${search}; } 2>"$t/err"; echo $? >"$t/rc"; } | head -c ${SEARCH_OUTPUT_CAP_BYTES}`,
    `printf '\\n%s\\n' ${q(sentinel)}`,
    `cat "$t/rc" 2>/dev/null`,
    `head -c 2000 "$t/err" 2>/dev/null`,
  ].join('\n');
}

/**
 * Upstream's steering hint for a content search that found nothing: count-only
 * ripgrep runs (case-insensitive, hidden/ignored, fixed-string when the pattern
 * has regex metacharacters), in one script that stops at the first that hits.
 */
async function zeroMatchProbe(
  plan: SearchPlan,
  display: (p: string) => string,
  context: ToolContext,
): Promise<string | undefined> {
  const q = shellQuote;
  const hasMeta = /[.[\](){}?*+^$\\|]/.test(plan.pattern);
  const roots = plan.roots.map(q).join(' ');
  const excludes = SEARCH_EXCLUDED_DIRS.map((dir) => `-g ${q(`!${dir}`)}`).join(' ');
  const base = `rg --no-config --color never --null --with-filename ${excludes}`;
  const glob = plan.fileGlob !== undefined ? ` --glob ${q(plan.fileGlob)}` : '';
  const prune = PROBE_PRUNE_DIR_NAMES.flatMap((dir) => [`--glob ${q(`!${dir}/**`)}`, `--glob ${q(`!**/${dir}/**`)}`])
    .join(' ');
  const steps = ZERO_MATCH_PROBES.map((probe, index) => ({ probe, index })).filter(
    ({ probe }) => probe.flags !== '-F' || hasMeta,
  );
  const script = [
    `t=$(mktemp -d 2>/dev/null) || { t="\${TMPDIR:-/tmp}/berth-probe.$$"; mkdir -p "$t" || exit 90; }`,
    `trap 'rm -rf "$t"' EXIT`,
    ...steps.map(({ probe, index }) => {
      // Only the hidden/ignored probe may see hidden files; the file glob would otherwise let them through.
      const extra = probe.flags.startsWith('--hidden') ? ` ${prune}` : glob !== '' ? " --glob '!.*'" : '';
      return (
        `${base} ${probe.flags} --count-matches${glob}${extra} -e ${q(plan.pattern)} -- ${roots} 2>/dev/null ` +
        '| head -n 50 >"$t/out"; ' +
        `if [ -s "$t/out" ]; then printf 'probe=%d\\n' ${index}; cat "$t/out"; exit 0; fi`
      );
    }),
  ].join('\n');
  const result = await context.task.exec({
    command: script,
    stateless: true,
    timeoutMs: PROBE_TIMEOUT_MS,
    maxOutputChars: 200_000,
    signal: context.signal,
  });
  if (result.timedOut || result.interrupted) return undefined;
  const header = /^probe=(\d+)\n/.exec(result.output);
  const probe = header === null ? undefined : ZERO_MATCH_PROBES[Number(header[1])];
  if (header === null || probe === undefined) return undefined;
  let total = 0;
  const files: string[] = [];
  for (const [file, count] of parseCounts(result.output.slice(header[0].length))) {
    total += count;
    files.push(display(file));
  }
  if (total === 0) return undefined;
  const extra = files.length - 5;
  const paths = files.slice(0, 5).join(', ') + (extra > 0 ? ` (+${extra} more)` : '');
  return probe.message(total, files.length, paths);
}

interface SearchOutput {
  readonly engine: string;
  readonly body: string;
  /** The output hit the byte cap, so results are incomplete. */
  readonly capped: boolean;
  /** Set when the program reported errors but still produced results. */
  readonly warning?: string;
  /** Set when the program failed and produced nothing usable. */
  readonly error?: string;
}

function splitSearchOutput(result: TaskExecResult, sentinel: string): SearchOutput {
  const { output } = result;
  const header = /(?:^|\n)engine=([\w-]*)\n/.exec(output);
  const end = output.lastIndexOf(`\n${sentinel}\n`);
  if (header === null || end < 0) {
    throw new Error(`search_files: unexpected output from the environment (exit ${result.exitCode}): ${output.slice(0, 500)}`);
  }
  const body = output.slice(header.index + header[0].length, end);
  const trailer = output.slice(end + sentinel.length + 2);
  const newline = trailer.indexOf('\n');
  const status = Number.parseInt(newline >= 0 ? trailer.slice(0, newline) : trailer, 10);
  const stderr = (newline >= 0 ? trailer.slice(newline + 1) : '').trim();
  const engine = header[1] ?? '';
  const capped = Buffer.byteLength(body, 'utf8') >= SEARCH_OUTPUT_CAP_BYTES;
  const hasResults = body.replace(/\s+/g, '') !== '';
  // grep runs under find -exec, whose status folds "no match" and "error" into 1: its diagnostics decide
  // (warnings such as "stray \" are not failures). rg exits 1 for "no match", 2 for errors; find 1 for errors.
  const diagnostics = stderr
    .split('\n')
    .filter((line) => line.trim() !== '' && !/^grep: warning: /.test(line))
    .join('\n');
  const failed = Number.isNaN(status)
    ? false
    : engine === 'grep'
      ? diagnostics !== ''
      : engine.startsWith('find')
        ? status !== 0
        : status >= 2;
  if (failed && !capped) {
    const reason =
      diagnostics !== '' ? diagnostics.split('\n').slice(0, 5).join('\n') : stderr !== '' ? stderr : `exit code ${status}`;
    if (!hasResults) return { engine, body, capped, error: `Search failed: ${reason}` };
    return { engine, body, capped, warning: `Some files could not be searched: ${reason.split('\n')[0] ?? ''}` };
  }
  return { engine, body, capped };
}

/** Records `PATH\0LINE:TEXT` (match) and `PATH\0LINE-TEXT` (context), one per line; `--` separators skipped. */
function parseContentRecords(body: string): ContentRecord[] {
  const records: ContentRecord[] = [];
  for (const raw of body.split('\n')) {
    const nul = raw.indexOf('\0');
    if (nul <= 0) continue;
    const parsed = /^(\d+)([:-])(.*)$/s.exec(raw.slice(nul + 1));
    if (parsed === null) continue;
    let text = parsed[3] ?? '';
    if (text.endsWith('\r')) text = text.slice(0, -1);
    records.push({ path: raw.slice(0, nul), line: Number(parsed[1]), text, isMatch: parsed[2] === ':' });
  }
  return records;
}

function parseNulList(body: string): string[] {
  return body
    .split('\0')
    .map((entry) => entry.replace(/^\n+/, ''))
    .filter((entry) => entry !== '' && entry !== '\n');
}

/**
 * File lists: rg sorts them itself (path order, or newest first); find's plain
 * list is sorted by path here, its `MTIME PATH` records newest first.
 */
function parseFileList(body: string, engine: string): string[] {
  const entries = parseNulList(body);
  if (engine === 'rg') return entries;
  if (engine !== 'find-mtime') return entries.sort(compareText);
  return entries
    .map((entry) => {
      const space = entry.indexOf(' ');
      return { mtime: Number.parseFloat(entry.slice(0, space)), path: entry.slice(space + 1) };
    })
    .filter((entry) => entry.path !== '' && !Number.isNaN(entry.mtime))
    .sort((a, b) => b.mtime - a.mtime || compareText(a.path, b.path))
    .map((entry) => entry.path);
}

/** `PATH\0COUNT` per line; files with zero matches (grep -c lists them) are dropped. */
function parseCounts(body: string): [string, number][] {
  const counts: [string, number][] = [];
  for (const raw of body.split('\n')) {
    const nul = raw.indexOf('\0');
    if (nul <= 0) continue;
    const count = Number.parseInt(raw.slice(nul + 1), 10);
    if (Number.isFinite(count) && count > 0) counts.push([raw.slice(0, nul), count]);
  }
  return counts;
}
