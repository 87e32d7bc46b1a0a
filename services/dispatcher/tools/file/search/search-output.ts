/** Reads what the search script printed: engine, records, exit status and diagnostics. */
import type { TaskExecResult } from '../../../../common/task-client.js';
import { SEARCH_OUTPUT_CAP_BYTES } from './search-script.js';

export interface SearchOutput {
  readonly engine: string;
  readonly body: string;
  /** The output hit the byte cap, so results are incomplete. */
  readonly capped: boolean;
  /** Set when the program reported errors but still produced results. */
  readonly warning?: string;
  /** Set when the program failed and produced nothing usable. */
  readonly error?: string;
}

export function splitSearchOutput(result: TaskExecResult, sentinel: string): SearchOutput {
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
export function parseContentRecords(body: string): ContentRecord[] {
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

export function parseNulList(body: string): string[] {
  return body
    .split('\0')
    .map((entry) => entry.replace(/^\n+/, ''))
    .filter((entry) => entry !== '' && entry !== '\n');
}

/**
 * File lists: rg sorts them itself (path order, or newest first); find's plain
 * list is sorted by path here, its `MTIME PATH` records newest first.
 */
export function parseFileList(body: string, engine: string): string[] {
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
export function parseCounts(body: string): [string, number][] {
  const counts: [string, number][] = [];
  for (const raw of body.split('\n')) {
    const nul = raw.indexOf('\0');
    if (nul <= 0) continue;
    const count = Number.parseInt(raw.slice(nul + 1), 10);
    if (Number.isFinite(count) && count > 0) counts.push([raw.slice(0, nul), count]);
  }
  return counts;
}

export interface ContentRecord {
  readonly path: string;
  readonly line: number;
  readonly text: string;
  readonly isMatch: boolean;
}

export function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
