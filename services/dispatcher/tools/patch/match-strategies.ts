/**
 * The nine ways of finding `old_string` in a file, strictest first. Each
 * forgives one kind of drift a model's copy has from the file, and returns
 * spans of the original text, so what is replaced is the file's own region.
 */
import { isSimilar } from './sequence-similarity.js';
import type { Span } from './span.js';
import { unicodeIndexMap, unicodeNormalize, unicodeSpanToOriginal } from './unicode-normalize.js';

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
