/**
 * Unified diffs of two texts, for showing the model what an edit changed.
 * Pure: the file tools hand in old and new contents and get diff text back.
 *
 * Lines are compared with their terminators, so a change that only adds or
 * removes the final newline shows up (with git's `\ No newline at end of
 * file` marker) instead of producing an empty diff.
 */

/** Options of {@link unifiedDiff}. */
export interface UnifiedDiffOptions {
  /** Label of the `---` line, e.g. `a/src/x.ts` or `/dev/null`. */
  readonly oldLabel: string;
  /** Label of the `+++` line, e.g. `b/src/x.ts` or `/dev/null`. */
  readonly newLabel: string;
  /** Unchanged lines shown around each change; default 3. */
  readonly contextLines?: number;
}

/**
 * Above this many differences the exact (Myers) diff is abandoned and the
 * changed middle is shown as one removal plus one addition. Memory of the
 * exact diff grows with the square of the difference count; past this point
 * the change is a rewrite and a minimal diff would not help the reader.
 */
const MAX_EDIT_DISTANCE = 2000;

const NO_NEWLINE_MARKER = '\\ No newline at end of file';

type EditKind = ' ' | '-' | '+';

interface Edit {
  readonly kind: EditKind;
  /** The line with its terminator, if any. */
  readonly token: string;
}

/**
 * Returns a unified diff of `oldText` → `newText` with `---`/`+++` headers and
 * `@@ -l,n +l,n @@` hunks, or the empty string when the texts are equal.
 */
export function unifiedDiff(oldText: string, newText: string, options: UnifiedDiffOptions): string {
  if (oldText === newText) return '';
  const contextLines = Math.max(0, Math.floor(options.contextLines ?? 3));
  const edits = diffLines(splitLinesKeepingEnds(oldText), splitLinesKeepingEnds(newText));
  const out: string[] = [`--- ${options.oldLabel}`, `+++ ${options.newLabel}`];
  for (const hunk of groupIntoHunks(edits, contextLines)) out.push(...hunk);
  return `${out.join('\n')}\n`;
}

/** Splits text into lines that keep their `\n`; a last line without one stays bare. */
function splitLinesKeepingEnds(text: string): string[] {
  return text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
}

function diffLines(a: readonly string[], b: readonly string[]): Edit[] {
  // Edits are usually small against large files: peel off the common ends
  // first so the quadratic part only sees the region that changed.
  let prefix = 0;
  while (prefix < a.length && prefix < b.length && a[prefix] === b[prefix]) prefix++;
  let suffix = 0;
  while (
    suffix < a.length - prefix &&
    suffix < b.length - prefix &&
    a[a.length - 1 - suffix] === b[b.length - 1 - suffix]
  ) {
    suffix++;
  }
  const aMid = a.slice(prefix, a.length - suffix);
  const bMid = b.slice(prefix, b.length - suffix);
  const middle = myers(aMid, bMid) ?? [
    ...aMid.map((token): Edit => ({ kind: '-', token })),
    ...bMid.map((token): Edit => ({ kind: '+', token })),
  ];
  return [
    ...a.slice(0, prefix).map((token): Edit => ({ kind: ' ', token })),
    ...middle,
    ...a.slice(a.length - suffix).map((token): Edit => ({ kind: ' ', token })),
  ];
}

/**
 * Myers' O((N+M)·D) shortest edit script. Keeps one snapshot of the frontier
 * per step (only the 2d+1 diagonals reachable at step d) for backtracking.
 * Returns undefined when the edit distance exceeds {@link MAX_EDIT_DISTANCE}.
 */
function myers(a: readonly string[], b: readonly string[]): Edit[] | undefined {
  const n = a.length;
  const m = b.length;
  const max = n + m;
  if (max === 0) return [];
  const offset = max + 1;
  const v = new Int32Array(2 * max + 3);
  const trace: Int32Array[] = [];
  const limit = Math.min(max, MAX_EDIT_DISTANCE);
  for (let d = 0; d <= limit; d++) {
    for (let k = -d; k <= d; k += 2) {
      let x =
        k === -d || (k !== d && at(v, offset + k - 1) < at(v, offset + k + 1))
          ? at(v, offset + k + 1)
          : at(v, offset + k - 1) + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) {
        x++;
        y++;
      }
      v[offset + k] = x;
      if (x >= n && y >= m) {
        trace.push(v.slice(offset - d, offset + d + 1));
        return backtrack(a, b, trace);
      }
    }
    trace.push(v.slice(offset - d, offset + d + 1));
  }
  return undefined;
}

function backtrack(a: readonly string[], b: readonly string[], trace: readonly Int32Array[]): Edit[] {
  const reversed: Edit[] = [];
  let x = a.length;
  let y = b.length;
  for (let d = trace.length - 1; d > 0; d--) {
    // trace[d - 1] covers diagonals -(d-1)..(d-1), stored from index 0.
    const prev = trace[d - 1];
    if (prev === undefined) break;
    const frontier = (k: number): number => at(prev, k + d - 1);
    const k = x - y;
    const prevK = k === -d || (k !== d && frontier(k - 1) < frontier(k + 1)) ? k + 1 : k - 1;
    const prevX = frontier(prevK);
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      reversed.push({ kind: ' ', token: at(a, x - 1) });
      x--;
      y--;
    }
    if (x === prevX) {
      reversed.push({ kind: '+', token: at(b, y - 1) });
    } else {
      reversed.push({ kind: '-', token: at(a, x - 1) });
    }
    x = prevX;
    y = prevY;
  }
  while (x > 0 && y > 0) {
    reversed.push({ kind: ' ', token: at(a, x - 1) });
    x--;
    y--;
  }
  return reversed.reverse();
}

/** Indexed read for arrays whose bounds the algorithm guarantees. */
function at<T>(items: ArrayLike<T>, index: number): T {
  return items[index] as T;
}

function groupIntoHunks(edits: readonly Edit[], contextLines: number): string[][] {
  const changeIndexes: number[] = [];
  edits.forEach((edit, index) => {
    if (edit.kind !== ' ') changeIndexes.push(index);
  });
  // Line numbers before each edit, so hunk headers need no second pass.
  const oldLineBefore: number[] = [];
  const newLineBefore: number[] = [];
  let oldLine = 0;
  let newLine = 0;
  for (const edit of edits) {
    oldLineBefore.push(oldLine);
    newLineBefore.push(newLine);
    if (edit.kind !== '+') oldLine++;
    if (edit.kind !== '-') newLine++;
  }

  const hunks: string[][] = [];
  let groupStart = 0;
  while (groupStart < changeIndexes.length) {
    let groupEnd = groupStart;
    // Changes closer than two contexts apart share a hunk, as diff(1) does.
    while (
      groupEnd + 1 < changeIndexes.length &&
      at(changeIndexes, groupEnd + 1) - at(changeIndexes, groupEnd) - 1 <= 2 * contextLines
    ) {
      groupEnd++;
    }
    const from = Math.max(0, at(changeIndexes, groupStart) - contextLines);
    const to = Math.min(edits.length - 1, at(changeIndexes, groupEnd) + contextLines);
    const body: string[] = [];
    let oldCount = 0;
    let newCount = 0;
    for (let i = from; i <= to; i++) {
      const edit = at(edits, i);
      if (edit.kind !== '+') oldCount++;
      if (edit.kind !== '-') newCount++;
      const endsWithNewline = edit.token.endsWith('\n');
      body.push(edit.kind + (endsWithNewline ? edit.token.slice(0, -1) : edit.token));
      if (!endsWithNewline) body.push(NO_NEWLINE_MARKER);
    }
    const header = `@@ -${range(at(oldLineBefore, from), oldCount)} +${range(at(newLineBefore, from), newCount)} @@`;
    hunks.push([header, ...body]);
    groupStart = groupEnd + 1;
  }
  return hunks;
}

/** `start,count` as diff(1) writes it: 1-based, `,1` omitted, empty ranges name the line before. */
function range(linesBefore: number, count: number): string {
  if (count === 0) return `${linesBefore},0`;
  const start = linesBefore + 1;
  return count === 1 ? `${start}` : `${start},${count}`;
}
