/**
 * A sequence matcher for the similarity strategies and the "did you mean"
 * hint: the ratio Python's `difflib.SequenceMatcher` reports, and the equal
 * and changed stretches between two texts.
 */

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
export function editOps(a: string, b: string): EditOp[] {
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
