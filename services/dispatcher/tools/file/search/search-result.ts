/** The search_files result: upstream's SearchResult fields, key order and densified match rows. */
import type { JsonObject } from '../common.js';
import type { ContentRecord } from './search-output.js';

/** Match content is cut to this many characters (upstream `content[:500]`). */
const SEARCH_MAX_CONTENT_CHARS = 500;
/** From this many matches on a page, matches are sent path-grouped as text (upstream `_DENSIFY_MIN_MATCHES`). */
const DENSIFY_MIN_MATCHES = 5;
const MATCHES_FORMAT =
  "path-grouped: each file path on its own line, followed by indented '<line>: <content>' rows for matches in that file";

/** The fields of upstream's SearchResult; {@link toWire} gives them upstream's key order and omission rules. */
export interface SearchOutcome {
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

export function emptyOutcome(): SearchOutcome {
  return { totalCount: 0, matches: [], files: [], counts: [], truncated: false, warnings: [] };
}

export function toWire(outcome: SearchOutcome): JsonObject {
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

export function errorOutcome(message: string): JsonObject {
  return toWire({ ...emptyOutcome(), error: message });
}

/**
 * The `_hint` of a truncated result. Upstream moved it inside the JSON object
 * (#90322: text after the JSON broke every json.loads consumer).
 */
export function truncationHint(offset: number, limit: number): string {
  return `Results truncated. Use offset=${offset + limit} to see more, or narrow with a more specific pattern or file_glob.`;
}

export function fillContentMatches(
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

/** The first 500 characters (code points, as Python slices). */
function cutContent(text: string): string {
  if (text.length <= SEARCH_MAX_CONTENT_CHARS) return text;
  return Array.from(text).slice(0, SEARCH_MAX_CONTENT_CHARS).join('');
}
