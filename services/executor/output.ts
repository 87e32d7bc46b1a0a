/**
 * Pure helpers that shape command output for the model: ANSI stripping, the
 * terminal tool's head/tail truncation (spec §3), and a bounded buffer that
 * keeps only the head and tail of an arbitrarily long byte stream.
 */

/**
 * ANSI/VT escape sequences: CSI (`ESC [ ... final`), OSC (`ESC ] ... BEL|ST`),
 * other two-byte and charset escapes, and the 8-bit C1 CSI form.
 */
const ANSI_PATTERN = new RegExp(
  [
    // OSC ... terminated by BEL or ST (ESC \); DCS/SOS/PM/APC ... ST.
    '\\u001b\\][^\\u0007\\u001b]*(?:\\u0007|\\u001b\\\\)',
    '\\u001b[P^_X][^\\u001b]*\\u001b\\\\',
    // CSI: parameters, intermediates, final byte.
    '(?:\\u001b\\[|\\u009b)[0-?]*[ -/]*[@-~]',
    // Charset designations and other ESC + intermediate(s) + final.
    '\\u001b[ -/]+[0-~]',
    // Two-byte escapes (ESC 7, ESC =, ESC M, ...).
    '\\u001b[0-~]',
  ].join('|'),
  'g',
);

/** Removes ANSI escape sequences (colours, cursor movement, titles) from `text`. */
export function stripAnsi(text: string): string {
  // Fast path: most output has no escapes at all.
  if (!text.includes('\u001b') && !text.includes('\u009b')) return text;
  return text.replace(ANSI_PATTERN, '');
}

/** Share of the cap given to the start of the output; the rest goes to the end (errors usually come last). */
const HEAD_SHARE = 0.4;

/** The exact notice the terminal tool inserts where output was cut (spec §3): plain numbers, no separators. */
export function truncationNotice(omittedChars: number, totalChars: number): string {
  return `\n\n... [OUTPUT TRUNCATED - ${omittedChars} chars omitted out of ${totalChars} total] ...\n\n`;
}

function headTailSplit(maxChars: number): { headChars: number; tailChars: number } {
  const cap = Math.max(0, Math.floor(maxChars));
  const headChars = Math.floor(cap * HEAD_SHARE);
  return { headChars, tailChars: cap - headChars };
}

/** `text`'s last `n` characters; `slice(-0)` would return everything. */
function lastChars(text: string, n: number): string {
  return n <= 0 ? '' : text.slice(-n);
}

/**
 * Caps `text` at `maxChars` the way the terminal tool does: keep the first
 * 40% and the last 60% of the cap and put {@link truncationNotice} between
 * them. Text within the cap is returned unchanged.
 */
export function truncateOutput(text: string, maxChars: number): string {
  if (text.length <= maxChars) return text;
  const { headChars, tailChars } = headTailSplit(maxChars);
  const omitted = text.length - headChars - tailChars;
  return text.slice(0, headChars) + truncationNotice(omitted, text.length) + lastChars(text, tailChars);
}

/**
 * {@link truncateOutput} for output whose middle was never kept: `head` and
 * `tail` are the retained ends and `middleChars` how many characters were
 * dropped between them. Produces the same string as `truncateOutput` on the
 * whole text whenever the retained ends cover the cap.
 */
export function truncateHeadTail(head: string, tail: string, middleChars: number, maxChars: number): string {
  if (middleChars <= 0) return truncateOutput(head + tail, maxChars);
  const total = head.length + middleChars + tail.length;
  const { headChars, tailChars } = headTailSplit(maxChars);
  const headPart = head.slice(0, headChars);
  const tailPart = lastChars(tail, tailChars);
  return headPart + truncationNotice(total - headPart.length - tailPart.length, total) + tailPart;
}

/**
 * UTF-16 code units that `bytes` decode to, assuming valid UTF-8: one per
 * sequence start, two for 4-byte sequences (surrogate pairs). Lets the buffer
 * count characters it never keeps.
 */
export function utf16Length(bytes: Uint8Array): number {
  let units = 0;
  for (const b of bytes) {
    if ((b & 0xc0) !== 0x80) units += b >= 0xf0 ? 2 : 1;
  }
  return units;
}

/** Bytes at the end of `bytes` that start a UTF-8 sequence the buffer does not complete. */
export function incompleteTailBytes(bytes: Uint8Array): number {
  // A sequence is at most 4 bytes; look back over up to 3 continuation bytes.
  for (let back = 1; back <= Math.min(4, bytes.length); back++) {
    const b = bytes[bytes.length - back] ?? 0;
    if ((b & 0xc0) === 0x80) continue;
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

/** Continuation bytes at the start of `bytes` (the rest of a character that was cut off). */
export function leadingContinuationBytes(bytes: Uint8Array): number {
  let n = 0;
  while (n < Math.min(3, bytes.length) && ((bytes[n] ?? 0) & 0xc0) === 0x80) n++;
  return n;
}

/** What a {@link HeadTailBuffer} kept, decoded. */
export interface HeadTailText {
  /** Whole output when nothing was dropped; otherwise its start. */
  readonly head: string;
  /** Empty when nothing was dropped; otherwise the end of the output. */
  readonly tail: string;
  /** Characters (UTF-16 units) dropped between head and tail. */
  readonly omittedChars: number;
}

/**
 * Accumulates a byte stream keeping only its first `headBytes` and last
 * `tailBytes`, so a command that floods gigabytes never sits in memory. Knows
 * the total length of what passed through.
 */
export class HeadTailBuffer {
  readonly #headBytes: number;
  readonly #tailBytes: number;
  readonly #head: Buffer[] = [];
  #headLength = 0;
  /** Consecutive chunks; only the first may be a partial (copied) chunk. */
  #tail: Buffer[] = [];
  #tailLength = 0;
  #totalBytes = 0;
  #droppedBytes = 0;
  #droppedChars = 0;

  constructor(headBytes: number, tailBytes: number) {
    this.#headBytes = Math.max(0, Math.floor(headBytes));
    this.#tailBytes = Math.max(0, Math.floor(tailBytes));
  }

  /** Sizes a buffer so that {@link truncateHeadTail} with `maxChars` always has enough of each end (4 bytes per char, plus slack for escapes). */
  static forMaxChars(maxChars: number, slackBytes = 16 * 1024): HeadTailBuffer {
    const { headChars, tailChars } = headTailSplit(maxChars);
    return new HeadTailBuffer(headChars * 4 + slackBytes, tailChars * 4 + slackBytes);
  }

  /** Bytes pushed so far, kept or not. */
  get totalBytes(): number {
    return this.#totalBytes;
  }

  /** Bytes dropped between head and tail. */
  get droppedBytes(): number {
    return this.#droppedBytes;
  }

  /** True once anything was dropped. */
  get truncated(): boolean {
    return this.#droppedBytes > 0;
  }

  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    this.#totalBytes += chunk.length;
    let rest = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    const headRoom = this.#headBytes - this.#headLength;
    if (headRoom > 0) {
      const take = Math.min(headRoom, rest.length);
      // Copy: the caller may reuse its buffer, and a small slice must not pin a large one.
      this.#head.push(Buffer.from(rest.subarray(0, take)));
      this.#headLength += take;
      rest = rest.subarray(take);
      if (rest.length === 0) return;
    }
    this.#pushTail(rest);
  }

  #pushTail(bytes: Buffer): void {
    if (bytes.length >= this.#tailBytes) {
      this.#drop(this.#tail);
      this.#drop([bytes.subarray(0, bytes.length - this.#tailBytes)]);
      this.#tail = this.#tailBytes > 0 ? [Buffer.from(bytes.subarray(bytes.length - this.#tailBytes))] : [];
      this.#tailLength = this.#tailBytes;
      return;
    }
    this.#tail.push(Buffer.from(bytes));
    this.#tailLength += bytes.length;
    while (this.#tailLength > this.#tailBytes) {
      const first = this.#tail[0];
      if (!first) break;
      const excess = this.#tailLength - this.#tailBytes;
      if (first.length <= excess) {
        this.#tail.shift();
        this.#drop([first]);
        this.#tailLength -= first.length;
      } else {
        this.#drop([first.subarray(0, excess)]);
        this.#tail[0] = Buffer.from(first.subarray(excess));
        this.#tailLength -= excess;
      }
    }
  }

  #drop(chunks: readonly Buffer[]): void {
    for (const c of chunks) {
      this.#droppedBytes += c.length;
      this.#droppedChars += utf16Length(c);
    }
  }

  /** Kept bytes: everything when not truncated. */
  bytes(): { head: Buffer; tail: Buffer } {
    return { head: Buffer.concat(this.#head), tail: Buffer.concat(this.#tail) };
  }

  /**
   * Decodes what was kept. When truncated, characters cut in half at either
   * edge of the gap are counted as omitted rather than decoded as U+FFFD.
   */
  text(): HeadTailText {
    const { head, tail } = this.bytes();
    if (!this.truncated) return { head: Buffer.concat([head, tail]).toString('utf8'), tail: '', omittedChars: 0 };
    const headCut = incompleteTailBytes(head);
    const tailCut = leadingContinuationBytes(tail);
    const headKept = head.subarray(0, head.length - headCut);
    const tailKept = tail.subarray(tailCut);
    const edgeChars = utf16Length(head.subarray(head.length - headCut)) + utf16Length(tail.subarray(0, tailCut));
    return {
      head: headKept.toString('utf8'),
      tail: tailKept.toString('utf8'),
      omittedChars: this.#droppedChars + edgeChars,
    };
  }
}
