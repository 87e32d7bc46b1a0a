/**
 * Places one file's hunks by line matching (exact, then ignoring trailing,
 * then surrounding whitespace) and splices them in, keeping the file's line
 * endings and final newline.
 */
import { PatchError, quoteLine, type HunkLine, type PatchHunk } from './patch-types.js';

/** A file as lines, remembering what to restore when joining. */
interface LineDocument {
  readonly lines: string[];
  readonly finalNewline: boolean;
  readonly crlf: boolean;
}

export function toDocument(text: string): LineDocument {
  const newlineCount = text.split('\n').length - 1;
  // Only a file that is CRLF throughout is treated as CRLF; mixed files keep
  // their `\r` as line content so nothing is silently converted.
  const crlf = newlineCount > 0 && text.split('\r\n').length - 1 === newlineCount;
  const lines = (crlf ? text.replaceAll('\r\n', '\n') : text).split('\n');
  let finalNewline = true;
  if (lines[lines.length - 1] === '') {
    lines.pop();
  } else {
    finalNewline = false;
  }
  return { lines, finalNewline, crlf };
}

function fromDocument(lines: readonly string[], finalNewline: boolean, crlf: boolean): string {
  if (lines.length === 0) return '';
  const eol = crlf ? '\r\n' : '\n';
  return lines.join(eol) + (finalNewline ? eol : '');
}

type MatchLevel = 'exact' | 'trim-end' | 'trim';

const MATCH_LEVELS: readonly MatchLevel[] = ['exact', 'trim-end', 'trim'];

function normalizeFor(level: MatchLevel, line: string): string {
  if (level === 'exact') return line;
  return level === 'trim-end' ? line.trimEnd() : line.trim();
}

interface Placement {
  readonly start: number;
  readonly oldLength: number;
  readonly newLines: readonly string[];
  readonly hunkIndex: number;
}

export function applyHunks(
  text: string,
  hunks: readonly PatchHunk[],
  path: string,
): { text: string; notes: string[] } {
  const doc = toDocument(text);
  const notes: string[] = [];
  const placements: Placement[] = [];
  let finalNewline = doc.finalNewline;
  let cursor = 0;
  hunks.forEach((hunk, hunkIndex) => {
    const label = `hunk ${hunkIndex + 1} of ${path} (patch line ${hunk.patchLine})`;
    let searchFrom = cursor;
    let hintFound = false;
    for (const hint of hunk.contextHints) {
      const at = findLine(doc.lines, hint, searchFrom);
      if (at >= 0) {
        searchFrom = at + 1;
        hintFound = true;
      }
    }
    let placed: { start: number; level: MatchLevel; lines: readonly HunkLine[] } | undefined;
    for (const variant of hunkVariants(hunk.lines)) {
      const oldLines = variant.filter((line) => line.kind !== '+').map((line) => line.text);
      if (oldLines.length === 0) {
        const hinted = hunk.hint === undefined ? -1 : lineContaining(doc.lines, hunk.hint);
        const start = hinted >= 0
          ? hinted + 1
          : hunk.atEndOfFile
          ? doc.lines.length
          : hintFound
            ? searchFrom
            : hunk.oldStart !== undefined
              ? Math.min(Math.max(hunk.oldStart, 0), doc.lines.length)
              : doc.lines.length;
        placed = { start, level: 'exact', lines: variant };
        break;
      }
      const found = locate(doc.lines, oldLines, {
        from: searchFrom,
        ...(hunk.oldStart !== undefined ? { expected: hunk.oldStart - 1 } : {}),
        atEndOfFile: hunk.atEndOfFile,
      });
      if (found !== undefined) {
        placed = { start: found.start, level: found.level, lines: variant };
        break;
      }
    }
    if (placed === undefined) {
      const oldLines = hunk.lines.filter((line) => line.kind !== '+').map((line) => line.text);
      throw new PatchError(describeMissing(`Could not apply ${label}`, doc.lines, oldLines));
    }
    // Context lines keep the file's own text: after a whitespace-tolerant
    // match the patch's copy of them may differ in indentation.
    const newLines: string[] = [];
    let offset = 0;
    for (const line of placed.lines) {
      if (line.kind === ' ') {
        newLines.push(doc.lines[placed.start + offset] ?? line.text);
        offset++;
      } else if (line.kind === '-') {
        offset++;
      } else {
        newLines.push(line.text);
      }
    }
    const placement: Placement = { start: placed.start, oldLength: offset, newLines, hunkIndex };
    const overlapping = placements.find(
      (other) =>
        placement.start < other.start + other.oldLength && other.start < placement.start + placement.oldLength,
    );
    if (overlapping !== undefined) {
      throw new PatchError(
        `Could not apply ${label}: it overlaps hunk ${overlapping.hunkIndex + 1} ` +
          `(both change line ${placement.start + 1}). Merge them into one hunk.`,
      );
    }
    if (placed.level !== 'exact') {
      notes.push(`${label} matched only after ignoring whitespace differences; check indentation in the diff.`);
    }
    if (
      (hunk.oldMissingFinalNewline || hunk.newMissingFinalNewline) &&
      placement.start + placement.oldLength === doc.lines.length
    ) {
      finalNewline = !hunk.newMissingFinalNewline;
    }
    placements.push(placement);
    cursor = placement.start + placement.oldLength;
  });

  placements.sort((a, b) => a.start - b.start || a.hunkIndex - b.hunkIndex);
  const out: string[] = [];
  let next = 0;
  for (const placement of placements) {
    out.push(...doc.lines.slice(next, placement.start), ...placement.newLines);
    next = placement.start + placement.oldLength;
  }
  out.push(...doc.lines.slice(next));
  // An emptied file loses its last newline too; a file that was empty gets one.
  return { text: fromDocument(out, doc.lines.length === 0 ? true : finalNewline, doc.crlf), notes };
}

/**
 * The hunk as written, then without blank context lines at its ends: models
 * and mail clients add or drop those, and they carry no position information.
 */
function hunkVariants(lines: readonly HunkLine[]): (readonly HunkLine[])[] {
  let start = 0;
  let end = lines.length;
  const blankContext = (line: HunkLine | undefined): boolean => line?.kind === ' ' && line.text.trim() === '';
  while (start < end && blankContext(lines[start])) start++;
  while (end > start && blankContext(lines[end - 1])) end--;
  const trimmed = lines.slice(start, end);
  return trimmed.length === lines.length || trimmed.length === 0 ? [lines] : [lines, trimmed];
}

/** The line where `wanted` first occurs (it may span lines: the line it starts on), or -1. */
function lineContaining(lines: readonly string[], wanted: string): number {
  const joined = lines.join('\n');
  const at = joined.indexOf(wanted);
  if (at < 0) return -1;
  return joined.slice(0, at).split('\n').length - 1;
}

function findLine(lines: readonly string[], wanted: string, from: number): number {
  for (const level of MATCH_LEVELS) {
    const target = normalizeFor(level, wanted);
    for (let i = from; i < lines.length; i++) {
      if (normalizeFor(level, lines[i] ?? '') === target) return i;
    }
  }
  return -1;
}

/**
 * Finds `needle` in `lines`, strictest comparison first. Within a level it
 * prefers the end of the file for `*** End of File` hunks, then the position
 * nearest the unified header's line number, then the first match at or after
 * the previous hunk, then (hunks given out of order) anywhere.
 */
function locate(
  lines: readonly string[],
  needle: readonly string[],
  options: { from: number; expected?: number; atEndOfFile: boolean },
): { start: number; level: MatchLevel } | undefined {
  const last = lines.length - needle.length;
  if (last < 0) return undefined;
  for (const level of MATCH_LEVELS) {
    if (level !== 'exact' && needle.every((line) => line.trim() === '')) continue;
    const haystack = level === 'exact' ? lines : lines.map((line) => normalizeFor(level, line));
    const wanted = needle.map((line) => normalizeFor(level, line));
    const matchesAt = (start: number): boolean => wanted.every((line, j) => haystack[start + j] === line);
    if (options.atEndOfFile && matchesAt(last)) return { start: last, level };
    // Positions after the previous hunk win over earlier ones (hunks come in
    // file order); then nearness to the header's line number, else the first.
    const rank = (start: number): [number, number] => [
      start >= options.from ? 0 : 1,
      options.expected === undefined
        ? start >= options.from
          ? start
          : start + lines.length
        : Math.abs(start - options.expected),
    ];
    let best: number | undefined;
    let bestRank: [number, number] | undefined;
    for (let start = 0; start <= last; start++) {
      if (!matchesAt(start)) continue;
      const candidate = rank(start);
      if (bestRank === undefined || candidate[0] < bestRank[0] || (candidate[0] === bestRank[0] && candidate[1] < bestRank[1])) {
        best = start;
        bestRank = candidate;
      }
    }
    if (best !== undefined) return { start: best, level };
  }
  return undefined;
}

/** An error message that shows what was expected and where the file diverges from it. */
function describeMissing(
  prefix: string,
  lines: readonly string[],
  needle: readonly string[],
  advice = 'Re-read the file with read_file and copy the context and removed lines exactly.',
): string {
  const shown = needle.slice(0, 12).map((line) => `  |${line}`);
  if (needle.length > shown.length) shown.push(`  ... (${needle.length - shown.length} more lines)`);
  let message = `${prefix}: these lines were not found in the file:\n${shown.join('\n')}`;
  const divergence = closestPartialMatch(lines, needle);
  if (divergence !== undefined) {
    message +=
      `\nClosest match starts at line ${divergence.start + 1}; the first difference is at line ${divergence.line + 1}: ` +
      `expected ${quoteLine(divergence.expected)} but the file has ${quoteLine(divergence.actual)}.`;
  }
  return `${message}\n${advice}`;
}

function closestPartialMatch(
  lines: readonly string[],
  needle: readonly string[],
): { start: number; line: number; expected: string; actual: string } | undefined {
  const anchor = needle.findIndex((line) => line.trim() !== '');
  if (anchor < 0) return undefined;
  const anchorText = (needle[anchor] ?? '').trim();
  let best: { start: number; matched: number } | undefined;
  let candidates = 0;
  for (let i = 0; i < lines.length && candidates < 200; i++) {
    if ((lines[i] ?? '').trim() !== anchorText) continue;
    candidates++;
    const start = i - anchor;
    if (start < 0) continue;
    let matched = 0;
    while (matched < needle.length && (lines[start + matched] ?? '').trim() === (needle[matched] ?? '').trim()) {
      matched++;
    }
    if (best === undefined || matched > best.matched) best = { start, matched };
  }
  if (best === undefined || best.matched >= needle.length) return undefined;
  const line = best.start + best.matched;
  return {
    start: best.start,
    line,
    expected: needle[best.matched] ?? '',
    actual: line < lines.length ? (lines[line] ?? '') : '<end of file>',
  };
}
