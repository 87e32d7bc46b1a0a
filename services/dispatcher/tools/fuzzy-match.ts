/**
 * Finding `old_string` in a file the way Hermes' `patch` tool does: nine
 * matching strategies, strictest first, with the guards and repairs that
 * run after a non-exact match. Pure, so every rule is unit-tested without a
 * task environment.
 *
 * Models copy text from memory and through JSON, so their `old_string`
 * drifts from the file in predictable ways: indentation, runs of spaces,
 * escaped newlines, typographic quotes. Each strategy forgives one kind of
 * drift. The first strategy that finds anything decides; its matches are
 * spans of the original text, so what is replaced is exactly the file's own
 * region.
 *
 * Error texts are the upstream ones (they are interface: models and client
 * code react to them).
 */

/** The strategies in the order they are tried. */
export const MATCH_STRATEGIES = [
  'exact',
  'line_trimmed',
  'whitespace_normalized',
  'indentation_flexible',
  'escape_normalized',
  'trimmed_boundary',
  'unicode_normalized',
  'block_anchor',
  'context_aware',
] as const;

export type MatchStrategy = (typeof MATCH_STRATEGIES)[number];

/** A matched region of the searched text: `[start, end)` in UTF-16 code units. */
export type Span = readonly [start: number, end: number];

/** The result of {@link fuzzyFindAndReplace}; `error` set means nothing was replaced. */
export interface FuzzyReplaceResult {
  readonly content: string;
  readonly count: number;
  readonly strategy?: MatchStrategy;
  readonly error?: string;
}

/** Options of {@link fuzzyFindAndReplace}. */
export interface FuzzyOptions {
  /**
   * false skips `block_anchor` and `context_aware`, which accept text that
   * only resembles old_string; the normalizing strategies still run.
   * Default true (upstream's replace mode).
   */
  readonly similarity?: boolean;
}

export const NO_MATCH_ERROR = 'Could not find a match for old_string in the file';

/** Strategies that accept a region only resembling old_string: never used to replace several places at once. */
const SIMILARITY_STRATEGIES: ReadonlySet<MatchStrategy> = new Set(['block_anchor', 'context_aware']);

/** Rows of match locations shown for an ambiguous old_string. */
const MAX_LOCATION_ROWS = 5;

/**
 * Replaces `oldString` in `content`, trying each strategy in order.
 * Without `replaceAll` the match must be unique.
 */
export function fuzzyFindAndReplace(
  content: string,
  oldString: string,
  newString: string,
  replaceAll: boolean,
  options: FuzzyOptions = {},
): FuzzyReplaceResult {
  const fail = (error: string): FuzzyReplaceResult => ({ content, count: 0, error });
  if (oldString === '') return fail('old_string cannot be empty');
  if (oldString.trim() === '') return fail('old_string is only whitespace — provide non-blank text to match');
  if (oldString === newString) return fail('old_string and new_string are identical');

  for (const strategy of MATCH_STRATEGIES) {
    if (options.similarity === false && SIMILARITY_STRATEGIES.has(strategy)) continue;
    const matches = findMatches(strategy, content, oldString);
    if (matches.length === 0) continue;
    if (matches.length > 1 && !replaceAll) {
      return fail(
        `Found ${matches.length} matches for old_string. Provide more context to make it unique, ` +
          `or use replace_all=True. Matches:\n${formatMatchLocations(content, matches)}`,
      );
    }
    if (matches.length > 1 && SIMILARITY_STRATEGIES.has(strategy)) {
      return fail(
        `Found ${matches.length} approximate matches via the '${strategy}' strategy; replace_all only applies to ` +
          'exact matches. Provide the precise text (whitespace included) so an exact/line-trimmed match can be made.',
      );
    }
    if (strategy !== 'exact') {
      const guard = escapeDriftError(content, matches, oldString, newString) ?? rogueIndentError(oldString, newString);
      if (guard !== undefined) return fail(guard);
    }
    let replacement = unescapeControls(newString, regionsText(content, matches));
    if (strategy === 'unicode_normalized') replacement = preserveUnicode(content, matches, oldString, replacement);
    const reindentFrom = strategy === 'exact' ? undefined : oldString;
    return { content: applySpans(content, matches, replacement, reindentFrom), count: matches.length, strategy };
  }
  return fail(NO_MATCH_ERROR);
}

/**
 * Whether the edit is already in the file, so a re-sent patch can be
 * answered with a success-shaped no-op. Conservative: `newString` must be
 * substantial (8+ characters without surrounding whitespace), present
 * verbatim, and `oldString` gone (unless the two are equal).
 */
export function isAlreadyApplied(content: string, oldString: string, newString: string): boolean {
  if (newString.trim().length < 8 || !content.includes(newString)) return false;
  return oldString === newString || !content.includes(oldString);
}

/** The spans one strategy finds for `pattern` in `content` (empty when it finds none). */
export function findMatches(strategy: MatchStrategy, content: string, pattern: string): Span[] {
  switch (strategy) {
    case 'exact':
      return exactMatches(content, pattern);
    case 'line_trimmed':
      return lineWindowMatches(content, pattern, (line) => line.trim());
    case 'whitespace_normalized':
      return whitespaceNormalizedMatches(content, pattern);
    case 'indentation_flexible':
      return lineWindowMatches(content, pattern, (line) => line.trimStart());
    case 'escape_normalized':
      return escapeNormalizedMatches(content, pattern);
    case 'trimmed_boundary':
      return trimmedBoundaryMatches(content, pattern);
    case 'unicode_normalized':
      return unicodeNormalizedMatches(content, pattern);
    case 'block_anchor':
      return blockAnchorMatches(content, pattern);
    case 'context_aware':
      return contextAwareMatches(content, pattern);
  }
}

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

/** Non-overlapping occurrences, scanning on past each one (what a global replace would touch). */
function exactMatches(content: string, pattern: string): Span[] {
  const spans: Span[] = [];
  if (pattern === '') return spans;
  for (let at = content.indexOf(pattern); at >= 0; at = content.indexOf(pattern, at + pattern.length)) {
    spans.push([at, at + pattern.length]);
  }
  return spans;
}

/** Line offsets of `content` split on `\n`, so a window of lines maps back to a character span. */
class LineTable {
  readonly lines: string[];
  private readonly starts: number[];

  constructor(readonly content: string) {
    this.lines = content.split('\n');
    this.starts = [];
    let position = 0;
    for (const line of this.lines) {
      this.starts.push(position);
      position += line.length + 1;
    }
  }

  /** Lines `[first, first + count)` without the newline after the last one. */
  span(first: number, count: number): Span {
    const last = first + count - 1;
    const start = this.starts[first] ?? 0;
    const end = Math.min(this.content.length, (this.starts[last] ?? 0) + (this.lines[last] ?? '').length);
    return [start, end];
  }
}

/** Windows of whole lines whose normalized text equals the normalized pattern, line by line. */
function lineWindowMatches(content: string, pattern: string, normalize: (line: string) => string): Span[] {
  const table = new LineTable(content);
  const wanted = pattern.split('\n').map(normalize);
  const have = table.lines.map(normalize);
  const spans: Span[] = [];
  for (let first = 0; first + wanted.length <= have.length; first++) {
    if (wanted.every((line, j) => have[first + j] === line)) spans.push(table.span(first, wanted.length));
  }
  return spans;
}

/** Runs of spaces and tabs count as one space; newlines stay significant. */
function whitespaceNormalizedMatches(content: string, pattern: string): Span[] {
  const collapse = (text: string): string => text.replace(/[ \t]+/g, ' ');
  // Every normalized character remembers the original range it stands for
  // (a collapsed run stands for the whole run), so a match maps back exactly.
  const origStart = new Int32Array(content.length + 1);
  const origEnd = new Int32Array(content.length + 1);
  let k = 0;
  let copied = 0;
  const keep = (upTo: number): void => {
    for (let i = copied; i < upTo; i++, k++) {
      origStart[k] = i;
      origEnd[k] = i + 1;
    }
  };
  for (const run of content.matchAll(/[ \t]+/g)) {
    keep(run.index);
    origStart[k] = run.index;
    origEnd[k] = run.index + run[0].length;
    k++;
    copied = run.index + run[0].length;
  }
  keep(content.length);
  return exactMatches(collapse(content), collapse(pattern)).map(
    ([start, end]): Span => [origStart[start] ?? 0, origEnd[end - 1] ?? content.length],
  );
}

/** `\n`, `\t` and `\r` typed as two characters in old_string, read as the real characters. */
function escapeNormalizedMatches(content: string, pattern: string): Span[] {
  const unescaped = pattern.replaceAll('\\n', '\n').replaceAll('\\t', '\t').replaceAll('\\r', '\r');
  return unescaped === pattern ? [] : exactMatches(content, unescaped);
}

/** Only the first and last lines of the block may differ in surrounding whitespace. */
function trimmedBoundaryMatches(content: string, pattern: string): Span[] {
  const trimEnds = (lines: string[]): string[] =>
    lines.map((line, j) => (j === 0 || j === lines.length - 1 ? line.trim() : line));
  const wanted = trimEnds(pattern.split('\n'));
  const table = new LineTable(content);
  const spans: Span[] = [];
  for (let first = 0; first + wanted.length <= table.lines.length; first++) {
    const block = trimEnds(table.lines.slice(first, first + wanted.length));
    if (block.every((line, j) => line === wanted[j])) spans.push(table.span(first, wanted.length));
  }
  return spans;
}

/** Typographic characters and the ASCII a model types for them. */
const UNICODE_EQUIVALENTS: ReadonlyMap<string, string> = new Map([
  ['\u201c', '"'],
  ['\u201d', '"'],
  ['\u2018', "'"],
  ['\u2019', "'"],
  ['\u2014', '--'],
  ['\u2013', '-'],
  ['\u2026', '...'],
  ['\u00a0', ' '],
  ['\u2212', '-'],
  ...['\u2000', '\u2001', '\u2002', '\u2003', '\u2004', '\u2005', '\u2006', '\u2007', '\u2008', '\u2009', '\u200a'].map(
    (space): [string, string] => [space, ' '],
  ),
  ['\u202f', ' '],
  ['\u205f', ' '],
  ['\u3000', ' '],
]);

const UNICODE_CHARACTERS = new RegExp(`[${[...UNICODE_EQUIVALENTS.keys()].join('')}]`, 'g');

/** The text with typographic characters replaced by their ASCII spelling. */
export function unicodeNormalize(text: string): string {
  return text.replace(UNICODE_CHARACTERS, (ch) => UNICODE_EQUIVALENTS.get(ch) ?? ch);
}

/** For each original index (plus one past the end), its index in {@link unicodeNormalize}'s output. */
function unicodeIndexMap(text: string): Int32Array {
  const map = new Int32Array(text.length + 1);
  let position = 0;
  for (let i = 0; i < text.length; i++) {
    map[i] = position;
    position += UNICODE_EQUIVALENTS.get(text[i] ?? '')?.length ?? 1;
  }
  map[text.length] = position;
  return map;
}

/** Maps a span of the normalized text back to the original; undefined when it starts inside an expansion. */
function unicodeSpanToOriginal(map: Int32Array, [start, end]: Span): Span | undefined {
  const length = map.length - 1;
  // The map never decreases: binary search for the first index at or past `start`.
  let low = 0;
  let high = length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if ((map[middle] ?? 0) < start) low = middle + 1;
    else high = middle;
  }
  const from = low;
  if (from >= length || map[from] !== start) return undefined;
  let to = from;
  while (to < length && (map[to] ?? 0) < end) to++;
  return [from, to];
}

function unicodeNormalizedMatches(content: string, pattern: string): Span[] {
  const normalizedContent = unicodeNormalize(content);
  const normalizedPattern = unicodeNormalize(pattern);
  if (normalizedContent === content && normalizedPattern === pattern) return [];
  let matches = exactMatches(normalizedContent, normalizedPattern);
  if (matches.length === 0) matches = lineWindowMatches(normalizedContent, normalizedPattern, (line) => line.trim());
  if (matches.length === 0) return [];
  const map = unicodeIndexMap(content);
  return matches.flatMap((span) => {
    const original = unicodeSpanToOriginal(map, span);
    return original === undefined ? [] : [original];
  });
}

/**
 * First and last lines equal after trimming (and unicode normalization); the
 * lines between must be similar: 50% when one block qualifies, 70% when
 * several compete.
 */
function blockAnchorMatches(content: string, pattern: string): Span[] {
  const patternLines = unicodeNormalize(pattern).split('\n');
  if (patternLines.length < 2) return [];
  const first = (patternLines[0] ?? '').trim();
  const last = (patternLines[patternLines.length - 1] ?? '').trim();
  const table = new LineTable(content);
  // The map adds no newlines, so normalized lines line up with the original ones.
  const lines = unicodeNormalize(content).split('\n');
  const count = patternLines.length;
  const candidates: number[] = [];
  for (let i = 0; i + count <= lines.length; i++) {
    if ((lines[i] ?? '').trim() === first && (lines[i + count - 1] ?? '').trim() === last) candidates.push(i);
  }
  const threshold = candidates.length === 1 ? 0.5 : 0.7;
  const patternMiddle = patternLines.slice(1, -1).join('\n');
  return candidates
    .filter((i) => count <= 2 || isSimilar(lines.slice(i + 1, i + count - 1).join('\n'), patternMiddle, threshold))
    .map((i) => table.span(i, count));
}

/**
 * Last resort: first and last lines at least 80% similar to the pattern's,
 * and every non-blank pattern line at least 80% similar to the line beside
 * it in the block.
 */
function contextAwareMatches(content: string, pattern: string): Span[] {
  const patternLines = pattern.split('\n');
  const table = new LineTable(content);
  const count = patternLines.length;
  if (count > table.lines.length) return [];
  const close = (a: string, b: string): boolean => isSimilar(a, b, 0.8);
  const first = (patternLines[0] ?? '').trim();
  const last = (patternLines[count - 1] ?? '').trim();
  const spans: Span[] = [];
  for (let i = 0; i + count <= table.lines.length; i++) {
    if (!close(first, (table.lines[i] ?? '').trim())) continue;
    if (!close(last, (table.lines[i + count - 1] ?? '').trim())) continue;
    const all = patternLines.every((line, j) => line.trim() === '' || close(line.trim(), (table.lines[i + j] ?? '').trim()));
    if (all) spans.push(table.span(i, count));
  }
  return spans;
}

// ---------------------------------------------------------------------------
// Guards and repairs after a non-exact match
// ---------------------------------------------------------------------------

function regionsText(content: string, matches: readonly Span[]): string {
  return matches.map(([start, end]) => content.slice(start, end)).join('');
}

/** Python's `repr()` of a string, as upstream's messages quote paths and samples with `{x!r}`. */
export function pythonRepr(text: string): string {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let body = '';
  for (const ch of text) {
    const code = ch.codePointAt(0) ?? 0;
    if (ch === '\\' || ch === quote) body += `\\${ch}`;
    else if (ch === '\n') body += '\\n';
    else if (ch === '\t') body += '\\t';
    else if (ch === '\r') body += '\\r';
    else if (code < 0x20 || code === 0x7f) body += `\\x${code.toString(16).padStart(2, '0')}`;
    else body += ch;
  }
  return `${quote}${body}${quote}`;
}

/**
 * A `\'` or `\"` in both strings that the matched file text lacks: the
 * transport escaped a quote, and writing new_string would put the backslash
 * into the file.
 */
export function escapeDriftError(
  content: string,
  matches: readonly Span[],
  oldString: string,
  newString: string,
): string | undefined {
  const region = regionsText(content, matches);
  for (const sequence of ["\\'", '\\"']) {
    if (newString.includes(sequence) && oldString.includes(sequence) && !region.includes(sequence)) {
      return (
        `Escape-drift detected: old_string and new_string contain the literal sequence ${pythonRepr(sequence)} but the ` +
        'matched region of the file does not. This is almost always a tool-call serialization artifact where an ' +
        'apostrophe or quote got prefixed with a spurious backslash. Re-read the file with read_file and pass ' +
        `old_string/new_string without backslash-escaping ${pythonRepr(sequence.slice(1))} characters.`
      );
    }
  }
  return undefined;
}

function leadingWhitespace(line: string): string {
  return /^[ \t]*/.exec(line)?.[0] ?? '';
}

/**
 * new_string lines indented deeper than anything in old_string while
 * neither string opens a block (`:`, `{`, `(` at a line end): a model
 * indentation typo that re-indenting would otherwise write verbatim.
 */
export function rogueIndentError(oldString: string, newString: string): string | undefined {
  const oldLines = oldString.split('\n').filter((line) => line.trim() !== '');
  const newLines = newString.split('\n').filter((line) => line.trim() !== '');
  if (oldLines.length === 0 || newLines.length === 0) return undefined;
  const opensBlock = (line: string): boolean => /[:{(]$/.test(line.trimEnd());
  if (oldLines.some(opensBlock) || newLines.some(opensBlock)) return undefined;
  const maxOld = Math.max(...oldLines.map((line) => leadingWhitespace(line).length));
  const deeper = newLines.filter((line) => leadingWhitespace(line).length > maxOld);
  const sample = deeper[0];
  if (sample === undefined) return undefined;
  return (
    `Suspicious indentation in new_string: ${deeper.length} line(s) indented deeper than old_string's max indent ` +
    `(${maxOld} spaces), but neither old_string nor new_string opens a nesting block (':', '{', '('). ` +
    `Likely a model indent typo — check the indentation of: ${pythonRepr(sample.trim().slice(0, 60))}`
  );
}

/**
 * `\t` and `\r` typed as two characters become real ones, but only when the
 * replaced file text has that real character (a file holding the literal
 * `"\t"` keeps it). `\n` is never rewritten: it survives JSON intact, and
 * rewriting it would break escape sequences in string literals.
 */
export function unescapeControls(newString: string, region: string): string {
  let out = newString;
  if (out.includes('\\t') && region.includes('\t')) out = out.replaceAll('\\t', '\t');
  if (out.includes('\\r') && region.includes('\r')) out = out.replaceAll('\\r', '\r');
  return out;
}

/**
 * After a unicode-normalized match, applies only the edits between
 * old_string and new_string to the file's own text, so the em dashes and
 * smart quotes the edit did not touch stay as they were.
 */
function preserveUnicode(content: string, matches: readonly Span[], oldString: string, newString: string): string {
  const region = regionsText(content, matches);
  const normalizedOld = unicodeNormalize(oldString);
  if (unicodeNormalize(region) !== normalizedOld) return newString;
  const map = unicodeIndexMap(region);
  let out = '';
  for (const op of editOps(normalizedOld, newString)) {
    if (op.kind === 'equal') {
      const original = unicodeSpanToOriginal(map, [op.aStart, op.aEnd]);
      out += original === undefined ? newString.slice(op.bStart, op.bEnd) : region.slice(original[0], original[1]);
    } else {
      out += newString.slice(op.bStart, op.bEnd);
    }
  }
  return out;
}

/**
 * Shifts new_string from the model's base indentation (first non-blank line
 * of old_string) to the file's (first non-blank line of the matched region),
 * keeping the model's relative nesting. Lines indented less than the model's
 * base are anchored at the file's base; blank lines are left alone.
 */
export function reindent(region: string, oldString: string, newString: string): string {
  if (newString === '') return newString;
  const firstMeaningful = (text: string): string | undefined => text.split('\n').find((line) => line.trim() !== '');
  const oldFirst = firstMeaningful(oldString);
  const fileFirst = firstMeaningful(region);
  if (oldFirst === undefined || fileFirst === undefined) return newString;
  const modelBase = leadingWhitespace(oldFirst);
  const fileBase = leadingWhitespace(fileFirst);
  if (modelBase === fileBase) return newString;
  return newString
    .split('\n')
    .map((line) => {
      if (line.trim() === '') return line;
      if (leadingWhitespace(line).startsWith(modelBase)) return fileBase + line.slice(modelBase.length);
      return fileBase + line.replace(/^[ \t]+/, '');
    })
    .join('\n');
}

function applySpans(content: string, matches: readonly Span[], replacement: string, reindentFrom?: string): string {
  let out = '';
  let copied = 0;
  for (const [start, end] of [...matches].sort((a, b) => a[0] - b[0])) {
    const text = reindentFrom === undefined ? replacement : reindent(content.slice(start, end), reindentFrom, replacement);
    out += content.slice(copied, start) + text;
    copied = end;
  }
  return out + content.slice(copied);
}

// ---------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------

/** `  L{line}: {snippet}` rows for the first matches, then how many more there are. */
export function formatMatchLocations(content: string, matches: readonly Span[]): string {
  const rows = matches.slice(0, MAX_LOCATION_ROWS).map(([start]) => {
    const lineNumber = countNewlines(content, start) + 1;
    const lineStart = content.lastIndexOf('\n', start - 1) + 1;
    const newline = content.indexOf('\n', lineStart);
    let snippet = content.slice(lineStart, newline < 0 ? content.length : newline).trim();
    if (snippet.length > 80) snippet = `${snippet.slice(0, 77)}...`;
    return `  L${lineNumber}: ${snippet}`;
  });
  if (matches.length > MAX_LOCATION_ROWS) rows.push(`  ... and ${matches.length - MAX_LOCATION_ROWS} more`);
  return rows.join('\n');
}

function countNewlines(text: string, end: number): number {
  let count = 0;
  for (let at = text.indexOf('\n'); at >= 0 && at < end; at = text.indexOf('\n', at + 1)) count++;
  return count;
}

/**
 * The `\n\nDid you mean one of these sections?` snippet for a plain miss
 * (empty for other errors, or when nothing in the file resembles the first
 * line of old_string): up to three numbered excerpts around the lines most
 * similar to it, plus a whitespace diagnosis when the best line differs only
 * in whitespace.
 */
export function noMatchHint(error: string, oldString: string, content: string): string {
  if (!error.startsWith('Could not find') || oldString === '' || content === '') return '';
  const oldLines = splitLines(oldString);
  const contentLines = splitLines(content);
  if (oldLines.length === 0 || contentLines.length === 0) return '';
  const anchor = oldLines.map((line) => line.trim()).find((line) => line !== '');
  if (anchor === undefined) return '';
  const scored: { ratio: number; index: number }[] = [];
  contentLines.forEach((line, index) => {
    const stripped = line.trim();
    if (stripped === '') return;
    if (!isSimilar(anchor, stripped, 0.3)) return;
    const ratio = similarity(anchor, stripped);
    if (ratio > 0.3) scored.push({ ratio, index });
  });
  if (scored.length === 0) return '';
  // Stable sort: equal scores keep file order.
  const top = scored.sort((a, b) => b.ratio - a.ratio).slice(0, 3);
  const seen = new Set<string>();
  const parts: string[] = [];
  for (const { index } of top) {
    const start = Math.max(0, index - 2);
    const end = Math.min(contentLines.length, index + oldLines.length + 2);
    if (seen.has(`${start}:${end}`)) continue;
    seen.add(`${start}:${end}`);
    const rows: string[] = [];
    for (let i = start; i < end; i++) rows.push(`${String(i + 1).padStart(4)}| ${contentLines[i] ?? ''}`);
    parts.push(rows.join('\n'));
  }
  let hint = parts.join('\n---\n');
  const best = contentLines[top[0]?.index ?? 0] ?? '';
  const sent = oldLines[0] ?? '';
  if (best.trim() === anchor && best !== sent) {
    hint +=
      '\n\nWhitespace difference detected (→ = tab, · = space):\n' +
      `  file has: ${showIndent(best)}\n` +
      `  you sent: ${showIndent(sent)}\n` +
      "Use the exact whitespace shown in 'file has'.";
  }
  return `\n\nDid you mean one of these sections?\n${hint}`;
}

/** Lines as Python's `splitlines()` gives them for ordinary text: no empty last line after a final newline. */
function splitLines(text: string): string[] {
  const lines = text.split(/\r\n|\r|\n/);
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

function showIndent(line: string): string {
  const indent = leadingWhitespace(line);
  return [...indent].map((ch) => (ch === '\t' ? '→' : '·')).join('') + line.slice(indent.length);
}

// ---------------------------------------------------------------------------
// Similarity
// ---------------------------------------------------------------------------

/**
 * Above this many cell comparisons the middle of two texts is compared line
 * by line instead of character by character, so a large block costs
 * milliseconds, not seconds.
 */
const MAX_CHAR_CELLS = 2_500_000;

/**
 * Similarity in [0, 1]: twice the characters in common (longest common
 * block first, then recursively on each side) over the total length — the
 * measure Python's `difflib.SequenceMatcher.ratio()` reports, without its
 * junk heuristics.
 */
export function similarity(a: string, b: string): number {
  const total = a.length + b.length;
  return total === 0 ? 1 : (2 * matchedLength(a, b)) / total;
}

/** `similarity(a, b) >= threshold`, skipping the comparison when the lengths alone rule it out. */
export function isSimilar(a: string, b: string, threshold: number): boolean {
  if (a === b) return true;
  const total = a.length + b.length;
  if ((2 * Math.min(a.length, b.length)) / total < threshold) return false;
  if ((2 * commonCharacters(a, b)) / total < threshold) return false;
  return similarity(a, b) >= threshold;
}

/** Characters the two texts share as multisets: an upper bound of what any alignment can match. */
function commonCharacters(a: string, b: string): number {
  const counts = new Map<string, number>();
  for (let i = 0; i < b.length; i++) counts.set(b[i] ?? '', (counts.get(b[i] ?? '') ?? 0) + 1);
  let common = 0;
  for (let i = 0; i < a.length; i++) {
    const left = counts.get(a[i] ?? '') ?? 0;
    if (left > 0) {
      counts.set(a[i] ?? '', left - 1);
      common++;
    }
  }
  return common;
}

function matchedLength(a: string, b: string): number {
  let matched = 0;
  for (const op of editOps(a, b)) if (op.kind === 'equal') matched += op.aEnd - op.aStart;
  return matched;
}

interface EditOp {
  readonly kind: 'equal' | 'change';
  readonly aStart: number;
  readonly aEnd: number;
  readonly bStart: number;
  readonly bEnd: number;
}

/** Equal and changed stretches turning `a` into `b`, in order. */
function editOps(a: string, b: string): EditOp[] {
  let prefix = 0;
  while (prefix < a.length && prefix < b.length && a[prefix] === b[prefix]) prefix++;
  let suffix = 0;
  while (suffix < a.length - prefix && suffix < b.length - prefix && a[a.length - 1 - suffix] === b[b.length - 1 - suffix]) {
    suffix++;
  }
  const blocks: { a: number; b: number; size: number }[] = [];
  if (prefix > 0) blocks.push({ a: 0, b: 0, size: prefix });
  const aMid = a.slice(prefix, a.length - suffix);
  const bMid = b.slice(prefix, b.length - suffix);
  if (aMid.length > 0 && bMid.length > 0) {
    if (aMid.length * bMid.length <= MAX_CHAR_CELLS) {
      // UTF-16 code units as tokens: offsets stay string offsets, and a pair's halves match halves.
      for (const block of matchingBlocks(aMid.split(''), bMid.split(''))) {
        blocks.push({ a: block.a + prefix, b: block.b + prefix, size: block.size });
      }
    } else {
      // Line tokens: a block of k equal lines counts as their characters.
      const aLines = aMid.match(/[^\n]*\n|[^\n]+$/g) ?? [];
      const bLines = bMid.match(/[^\n]*\n|[^\n]+$/g) ?? [];
      const aOffsets = offsets(aLines);
      const bOffsets = offsets(bLines);
      for (const block of matchingBlocks(aLines, bLines)) {
        const size = (aOffsets[block.a + block.size] ?? 0) - (aOffsets[block.a] ?? 0);
        blocks.push({ a: (aOffsets[block.a] ?? 0) + prefix, b: (bOffsets[block.b] ?? 0) + prefix, size });
      }
    }
  }
  if (suffix > 0) blocks.push({ a: a.length - suffix, b: b.length - suffix, size: suffix });

  const ops: EditOp[] = [];
  let i = 0;
  let j = 0;
  for (const block of blocks) {
    if (block.size === 0) continue;
    if (i < block.a || j < block.b) ops.push({ kind: 'change', aStart: i, aEnd: block.a, bStart: j, bEnd: block.b });
    ops.push({ kind: 'equal', aStart: block.a, aEnd: block.a + block.size, bStart: block.b, bEnd: block.b + block.size });
    i = block.a + block.size;
    j = block.b + block.size;
  }
  if (i < a.length || j < b.length) ops.push({ kind: 'change', aStart: i, aEnd: a.length, bStart: j, bEnd: b.length });
  return ops;
}

function offsets(parts: readonly string[]): number[] {
  const out = [0];
  for (const part of parts) out.push((out[out.length - 1] ?? 0) + part.length);
  return out;
}

/** Matching blocks of two token lists: the longest common run, then the same on both sides of it, in order. */
function matchingBlocks(a: readonly string[], b: readonly string[]): { a: number; b: number; size: number }[] {
  const positions = new Map<string, number[]>();
  b.forEach((token, j) => {
    const list = positions.get(token);
    if (list === undefined) positions.set(token, [j]);
    else list.push(j);
  });
  const found: { a: number; b: number; size: number }[] = [];
  const stack: [number, number, number, number][] = [[0, a.length, 0, b.length]];
  while (stack.length > 0) {
    const [aLo, aHi, bLo, bHi] = stack.pop() ?? [0, 0, 0, 0];
    let best = { a: aLo, b: bLo, size: 0 };
    // Length of the common run ending at (i - 1, j), per j, for the previous row.
    let runs = new Map<number, number>();
    for (let i = aLo; i < aHi; i++) {
      const next = new Map<number, number>();
      const list = positions.get(a[i] ?? '') ?? [];
      for (let k = lowerBound(list, bLo); k < list.length; k++) {
        const j = list[k] ?? 0;
        if (j >= bHi) break;
        const length = (runs.get(j - 1) ?? 0) + 1;
        next.set(j, length);
        if (length > best.size) best = { a: i - length + 1, b: j - length + 1, size: length };
      }
      runs = next;
    }
    if (best.size === 0) continue;
    found.push(best);
    if (best.a + best.size < aHi && best.b + best.size < bHi) stack.push([best.a + best.size, aHi, best.b + best.size, bHi]);
    if (aLo < best.a && bLo < best.b) stack.push([aLo, best.a, bLo, best.b]);
  }
  return found.sort((x, y) => x.a - y.a);
}

/** Index of the first element of the ascending `list` that is at least `value`. */
function lowerBound(list: readonly number[], value: number): number {
  let low = 0;
  let high = list.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if ((list[middle] ?? 0) < value) low = middle + 1;
    else high = middle;
  }
  return low;
}
