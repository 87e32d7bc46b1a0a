/**
 * What read_file does with a page once it is built, as upstream's
 * `file_tools.py` does today: a page over the character budget is cut on a
 * line boundary and says where to continue (`truncated_by`, `next_offset`,
 * `hint`) instead of being refused, and unresolved git merge-conflict blocks
 * in the page are counted and flagged. Lengths are Python's (code points).
 */
import type { JsonObject } from './common.js';

const codePoints = (text: string) => {
  let n = 0;
  for (const _ of text) n += 1;
  return n;
};

/** The first `n` code points of `text`. */
function headCodePoints(text: string, n: number): string {
  let out = '';
  let count = 0;
  for (const ch of text) {
    if (count >= n) break;
    out += ch;
    count += 1;
  }
  return out;
}

/**
 * Whole lines of a `LINE|CONTENT` page while they fit in `maxChars` (the
 * joining newlines counted); when not even the first fits, that line cut
 * to `maxChars` (upstream `_truncate_to_char_budget`).
 */
export function truncateToCharBudget(content: string, maxChars: number): { trimmed: string; linesKept: number } {
  const lines = content.split('\n');
  const kept: string[] = [];
  let running = 0;
  for (const line of lines) {
    const add = codePoints(line) + (kept.length > 0 ? 1 : 0);
    if (running + add > maxChars) break;
    kept.push(line);
    running += add;
  }
  if (kept.length === 0) return { trimmed: headCodePoints(lines[0] ?? '', maxChars), linesKept: 1 };
  return { trimmed: kept.join('\n'), linesKept: kept.length };
}

/**
 * Cuts a read result whose `content` is over `maxChars` (upstream
 * `_apply_char_budget`). Keys the result has keep their place; new ones
 * follow, as a Python dict takes them: `truncated_by`, `next_offset`, then
 * `hint` if the page had none, and `truncated_lines` when the first line
 * alone was over the budget. Returns whether it cut anything.
 */
export function applyCharBudget(result: JsonObject, offset: number, maxChars: number): boolean {
  const content = typeof result.content === 'string' ? result.content : '';
  if (codePoints(content) <= maxChars) return false;
  const { trimmed, linesKept } = truncateToCharBudget(content, maxChars);
  const nextOffset = offset + linesKept;
  const totalLines = result.total_lines ?? 'unknown';
  result.content = trimmed;
  result.truncated = true;
  result.truncated_by = 'bytes';
  result.next_offset = nextOffset;
  result.hint =
    `Output truncated at the ${maxChars.toLocaleString('en-US')}-char read budget after ${linesKept} line(s) ` +
    `(showing lines ${offset}-${nextOffset - 1} of ${String(totalLines)}). Use offset=${nextOffset} to continue.`;
  if (codePoints(trimmed.split('\n', 1)[0] ?? '') >= maxChars) {
    result.truncated_lines = true;
    result.hint +=
      ' Note: the first line alone exceeded the budget and was clamped mid-line; its remainder is not retrievable via offset.';
  }
  return true;
}

const CONFLICT_OPEN = /^\s*\d+\|<<<<<<< /gm;
const CONFLICT_CLOSE = /^\s*\d+\|>>>>>>> /gm;

/**
 * Unresolved merge-conflict blocks in a `LINE|CONTENT` page: balanced pairs
 * of `<<<<<<< ` and `>>>>>>> ` lines (upstream `count_conflict_blocks`), so
 * a block cut by paging counts only when both ends are in the page.
 */
export function countConflictBlocks(formatted: string): number {
  const opens = formatted.match(CONFLICT_OPEN)?.length ?? 0;
  return opens === 0 ? 0 : Math.min(opens, formatted.match(CONFLICT_CLOSE)?.length ?? 0);
}

/** The `_hint` upstream gives with `conflict_blocks`. */
export function conflictHint(blocks: number): string {
  return (
    `${blocks} unresolved git merge-conflict block(s) (<<<<<<< / ======= / >>>>>>>) in this range. ` +
    'Resolve them (keep one side or combine, delete the markers) before editing around them.'
  );
}
