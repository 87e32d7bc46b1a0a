/** The texts a failed match answers with: where an ambiguous old_string matched, and what a missed one resembles. */
import type { Span } from './span.js';
import { leadingWhitespace } from './match-repairs.js';
import { isSimilar, similarity } from './sequence-similarity.js';

/** Rows of match locations shown for an ambiguous old_string. */
const MAX_LOCATION_ROWS = 5;

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
