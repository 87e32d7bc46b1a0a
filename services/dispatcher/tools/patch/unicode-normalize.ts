/**
 * Typographic characters (smart quotes, dashes, odd spaces) read as the ASCII
 * a model types for them, with a map back to the original text's offsets.
 */
import type { Span } from './span.js';

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
export function unicodeIndexMap(text: string): Int32Array {
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
export function unicodeSpanToOriginal(map: Int32Array, [start, end]: Span): Span | undefined {
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
