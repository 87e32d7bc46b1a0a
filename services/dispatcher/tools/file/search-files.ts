/** search_files: content search (ripgrep, or grep as a fallback) and file-name search in the task environment. */
import { randomBytes } from 'node:crypto';
import type { TaskExecResult } from '../../../common/task-client.js';
import type { ToolArgs, ToolContext, ToolRegistration } from '../../tool-types.js';
import { shellQuote } from '../shell-quote.js';
import { READ_MAX_LINE_CHARS } from './read-file.js';
import { ToolInputError, enumArg, guarded, intArg, stringArg, TOOLSET, type JsonObject } from './common.js';

/** Which search program search_files runs in the task's environment. */
export type SearchEngine = 'auto' | 'rg' | 'grep';

const SEARCH_DEFAULT_LIMIT = 50;
const SEARCH_MAX_LIMIT = 1000;
const SEARCH_MAX_CONTEXT = 10;
const SEARCH_MAX_LINE_CHARS = 500;
/** Raw search output kept from the environment; more makes total_count a lower bound. */
const SEARCH_OUTPUT_CAP_BYTES = 2_000_000;
const SEARCH_TIMEOUT_MS = 60_000;
const SEARCH_EXCLUDED_DIRS = ['.git', 'node_modules'] as const;

export function searchFilesRegistration(searchEngine: SearchEngine): ToolRegistration {
  return {
    name: 'search_files',
    toolset: TOOLSET,
    emoji: '🔎',
    schema: {
      name: 'search_files',
      description:
        'Search the task environment. target="content" (default) finds lines matching a regular expression ' +
        '(ripgrep syntax) in files under path; target="files" finds files whose name matches a glob such as ' +
        '"*.py" (newest first). .git and node_modules are skipped. Use this instead of grep/find in the terminal.',
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
        },
        required: ['pattern'],
      },
    },
    handler: guarded((args, context) => searchFilesTool(args, context, searchEngine)),
  };
}

type SearchMode = 'content' | 'files_only' | 'count' | 'files';

interface SearchPlan {
  readonly mode: SearchMode;
  readonly pattern: string;
  /** The path as handed to the search program (already made safe to pass). */
  readonly searchPath: string;
  readonly fileGlob?: string;
  readonly context: number;
  readonly engine: SearchEngine;
}

interface ContentRecord {
  readonly path: string;
  readonly line: number;
  readonly text: string;
  readonly isMatch: boolean;
}

async function searchFilesTool(args: ToolArgs, context: ToolContext, engine: SearchEngine): Promise<JsonObject> {
  const pattern = stringArg(args, 'pattern', true);
  if (pattern === '') throw new ToolInputError('Parameter pattern must not be empty');
  const target = enumArg(args, 'target', ['content', 'files'] as const, 'content');
  const outputMode = enumArg(args, 'output_mode', ['content', 'files_only', 'count'] as const, 'content');
  const rawPath = stringArg(args, 'path', false) ?? '.';
  const path = rawPath.trim() === '' ? '.' : rawPath;
  const fileGlob = stringArg(args, 'file_glob', false);
  const limit = intArg(args, 'limit', SEARCH_DEFAULT_LIMIT, 1, SEARCH_MAX_LIMIT);
  const offset = intArg(args, 'offset', 0, 0);
  const contextLines = intArg(args, 'context', 0, 0, SEARCH_MAX_CONTEXT);

  const stat = await context.task.stat(path);
  if (!stat.exists) throw new ToolInputError(`Path not found: ${path}`);

  // `~` must reach the program expanded, and quoting would stop the shell
  // from doing it; a leading `-` would read as an option to find.
  const searchPath = path.startsWith('~') ? stat.absPath : path.startsWith('-') ? `./${path}` : path;
  const plan: SearchPlan = {
    mode: target === 'files' ? 'files' : outputMode,
    pattern,
    searchPath,
    ...(fileGlob !== undefined && fileGlob !== '' ? { fileGlob } : {}),
    context: contextLines,
    engine,
  };
  const sentinel = `__BERTH_SEARCH_END_${randomBytes(8).toString('hex')}__`;
  const execResult = await context.task.exec({
    command: buildSearchScript(plan, sentinel),
    stateless: true,
    timeoutMs: SEARCH_TIMEOUT_MS,
    maxOutputChars: SEARCH_OUTPUT_CAP_BYTES + 64_000,
    signal: context.signal,
  });
  const output = splitSearchOutput(execResult, sentinel);
  const display = (p: string): string => (path === '.' || path === './') && p.startsWith('./') ? p.slice(2) : p;

  const page = <T>(items: readonly T[]): { items: T[]; more: boolean } => ({
    items: items.slice(offset, offset + limit),
    more: offset + limit < items.length,
  });
  const finish = (result: JsonObject, shown: number, total: number, more: boolean): JsonObject => {
    result.truncated = more || output.capped;
    if (more) {
      result.hint = `Showing results ${offset + 1}-${offset + shown} of ${total}. Use offset=${offset + shown} for more.`;
    }
    const notes: string[] = [];
    if (output.capped) {
      notes.push('The search produced too much output; total_count is a lower bound. Narrow the pattern, path or file_glob.');
    }
    if (output.warning !== undefined) notes.push(output.warning);
    if (notes.length > 0) result.note = notes.join(' ');
    return result;
  };

  if (plan.mode === 'files') {
    const files = parseFileList(output.body, output.engine).map(display);
    const shown = page(files);
    return finish({ files: shown.items, total_count: files.length }, shown.items.length, files.length, shown.more);
  }
  if (plan.mode === 'files_only') {
    const files = [...new Set(parseNulList(output.body))].map(display).sort(compareText);
    const shown = page(files);
    return finish({ files: shown.items, total_count: files.length }, shown.items.length, files.length, shown.more);
  }
  if (plan.mode === 'count') {
    const entries = parseCounts(output.body)
      .map(([file, count]): [string, number] => [display(file), count])
      .sort((a, b) => compareText(a[0], b[0]));
    const shown = page(entries);
    const total = entries.reduce((sum, [, count]) => sum + count, 0);
    return finish(
      { counts: Object.fromEntries(shown.items), total_count: total, total_files: entries.length },
      shown.items.length,
      entries.length,
      shown.more,
    );
  }

  const records = parseContentRecords(output.body).map((record) => ({ ...record, path: display(record.path) }));
  const matches = records.filter((record) => record.isMatch).sort((a, b) => compareText(a.path, b.path) || a.line - b.line);
  const shown = page(matches);
  const linesByFile = new Map<string, Map<number, string>>();
  if (plan.context > 0) {
    for (const record of records) {
      let lines = linesByFile.get(record.path);
      if (lines === undefined) linesByFile.set(record.path, (lines = new Map()));
      lines.set(record.line, record.text);
    }
  }
  const entries = shown.items.map((match) => {
    const entry: JsonObject = { path: match.path, line: match.line, content: capLine(match.text) };
    if (plan.context > 0) {
      const lines = linesByFile.get(match.path);
      const around = (from: number, to: number): string[] => {
        const out: string[] = [];
        for (let n = from; n <= to; n++) {
          const text = lines?.get(n);
          if (text !== undefined) out.push(capLine(text));
        }
        return out;
      };
      entry.context_before = around(Math.max(1, match.line - plan.context), match.line - 1);
      entry.context_after = around(match.line + 1, match.line + plan.context);
    }
    return entry;
  });
  return finish({ matches: entries, total_count: matches.length }, entries.length, matches.length, shown.more);
}

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function capLine(text: string): string {
  return text.length > SEARCH_MAX_LINE_CHARS
    ? `${text.slice(0, SEARCH_MAX_LINE_CHARS)}... [line truncated: ${text.length.toLocaleString('en-US')} chars]`
    : text;
}

/**
 * One shell script that picks the engine (`command -v rg`), runs the search
 * with NUL-separated paths (so spaces, colons and quotes in names parse
 * unambiguously), caps its output, then prints a sentinel, the exit status
 * and stderr. Exec output merges stdout and stderr, so stderr is held in a
 * temp file and printed after the sentinel where it cannot corrupt results.
 */
function buildSearchScript(plan: SearchPlan, sentinel: string): string {
  const q = shellQuote;
  const path = q(plan.searchPath);
  const rgExcludes = SEARCH_EXCLUDED_DIRS.map((dir) => `-g ${q(`!${dir}`)}`).join(' ');
  const grepExcludes = SEARCH_EXCLUDED_DIRS.map((dir) => `--exclude-dir=${q(dir)}`).join(' ');
  const findPrune = `\\( ${SEARCH_EXCLUDED_DIRS.map((dir) => `-name ${q(dir)}`).join(' -o ')} \\) -prune -o`;
  const rgBase = `rg --no-config --color never --hidden --null --with-filename ${rgExcludes}`;
  const context = plan.context > 0 ? ` -C ${plan.context}` : '';

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
    rgCommand = `rg --no-config --files --hidden --null --sortr modified ${rgExcludes} --iglob ${q(glob)} -- ${path}`;
    fallbackSelect = `if find . -maxdepth 0 -printf '' >/dev/null 2>&1; then engine=find-mtime; else engine=find; fi`;
    fallbackCommand =
      `if [ "$engine" = find-mtime ]; then find ${path} ${findPrune} -type f ${findTest} -printf '%T@ %p\\0'; ` +
      `else find ${path} ${findPrune} -type f ${findTest} -print0; fi`;
  } else {
    const rgGlob = plan.fileGlob !== undefined ? ` -g ${q(plan.fileGlob)}` : '';
    const grepGlob = plan.fileGlob !== undefined ? ` --include=${q(plan.fileGlob)}` : '';
    const rgMode =
      plan.mode === 'files_only'
        ? '--files-with-matches'
        : plan.mode === 'count'
          ? '--count'
          : `--no-heading --line-number --sort path --max-columns ${READ_MAX_LINE_CHARS} --max-columns-preview${context}`;
    const grepMode = plan.mode === 'files_only' ? '-l' : plan.mode === 'count' ? '-c' : `-n${context}`;
    rgCommand = `${rgBase} ${rgMode}${rgGlob} -e ${q(plan.pattern)} -- ${path}`;
    fallbackSelect = 'engine=grep';
    // PCRE is the closest grep dialect to ripgrep's (\d, \s, lazy quantifiers); ERE otherwise.
    fallbackCommand =
      `if printf 'x\\n' | grep -qP 'x' 2>/dev/null; then flavor=-P; else flavor=-E; fi; ` +
      `grep -r -D skip -H -Z -I $flavor --color=never ${grepExcludes} ${grepMode}${grepGlob} -e ${q(plan.pattern)} -- ${path}`;
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
    // (/dev/zero); inside a directory both skip them (grep by -D skip, rg by itself).
    `if [ ! -d ${path} ] && [ ! -f ${path} ]; then printf 'engine=refused\\n\\n%s\\n2\\n%s\\n' ${q(sentinel)} ` +
      `${q(`${plan.searchPath} is not a regular file or directory; search_files only reads regular files`)}; exit 0; fi`,
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

interface SearchOutput {
  readonly engine: string;
  readonly body: string;
  /** The output hit the byte cap, so results are incomplete. */
  readonly capped: boolean;
  /** Set when the program reported errors but still produced results. */
  readonly warning?: string;
}

function splitSearchOutput(result: TaskExecResult, sentinel: string): SearchOutput {
  if (result.interrupted) throw new ToolInputError('Search interrupted.');
  if (result.timedOut) {
    throw new ToolInputError(
      `Search timed out after ${SEARCH_TIMEOUT_MS / 1000}s. Narrow the path, add a file_glob, or simplify the pattern.`,
    );
  }
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
  // rg and grep exit 1 for "no match"; 2 and above are errors. find uses 1 for errors.
  const failed = Number.isNaN(status) ? false : engine.startsWith('find') ? status !== 0 : status >= 2;
  if (failed && !capped) {
    const reason = stderr !== '' ? stderr.split('\n').slice(0, 5).join('\n') : `exit code ${status}`;
    if (!hasResults) throw new ToolInputError(`Search failed: ${reason}`);
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

/** File lists newest first: rg sorts them itself; find's `MTIME PATH` records are sorted here; plain find by name. */
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

