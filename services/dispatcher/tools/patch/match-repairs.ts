/**
 * Guards and repairs after a non-exact match: refusals for drift that would
 * write something the model did not mean (escaped quotes, rogue indentation),
 * and repairs that keep the file's own indentation, control characters and
 * typography.
 */
import { pythonRepr } from './python-repr.js';
import type { Span } from './span.js';
import { editOps } from './sequence-similarity.js';
import { unicodeIndexMap, unicodeNormalize, unicodeSpanToOriginal } from './unicode-normalize.js';

export function regionsText(content: string, matches: readonly Span[]): string {
  return matches.map(([start, end]) => content.slice(start, end)).join('');
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

export function leadingWhitespace(line: string): string {
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
export function preserveUnicode(content: string, matches: readonly Span[], oldString: string, newString: string): string {
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

export function applySpans(content: string, matches: readonly Span[], replacement: string, reindentFrom?: string): string {
  let out = '';
  let copied = 0;
  for (const [start, end] of [...matches].sort((a, b) => a[0] - b[0])) {
    const text = reindentFrom === undefined ? replacement : reindent(content.slice(start, end), reindentFrom, replacement);
    out += content.slice(copied, start) + text;
    copied = end;
  }
  return out + content.slice(copied);
}
