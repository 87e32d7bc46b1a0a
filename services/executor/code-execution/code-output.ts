/**
 * Output caps of execute_code (spec §6): stdout keeps the first 40% and a
 * rolling last 60% of `maxBytes` with a notice between them, so a script that
 * prints gigabytes never sits in memory; stderr keeps its head only.
 */
import { HeadTailBuffer, incompleteTailBytes, leadingContinuationBytes } from '../output.js';

const HEAD_SHARE = 0.4;

/** 1234567 → "1,234,567". */
export function withThousandsSeparators(n: number): string {
  return String(Math.trunc(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/** The notice where stdout was cut; counts are bytes, as the reference reports them. */
export function stdoutTruncationNotice(omitted: number, total: number): string {
  return (
    `\n\n... [OUTPUT TRUNCATED - ${withThousandsSeparators(omitted)} chars omitted ` +
    `out of ${withThousandsSeparators(total)} total] ...\n\n`
  );
}

/** Collects a script's stdout within the cap. */
export class StdoutCapture {
  readonly #maxBytes: number;
  readonly #buffer: HeadTailBuffer;

  constructor(maxBytes: number) {
    this.#maxBytes = Math.max(0, Math.floor(maxBytes));
    const head = Math.floor(this.#maxBytes * HEAD_SHARE);
    this.#buffer = new HeadTailBuffer(head, this.#maxBytes - head);
  }

  push(chunk: Uint8Array): void {
    this.#buffer.push(chunk);
  }

  get totalBytes(): number {
    return this.#buffer.totalBytes;
  }

  /**
   * The text: everything when within the cap; otherwise head, notice, tail.
   * A character cut in half at either edge of the gap counts as omitted.
   */
  text(): string {
    const { head, tail } = this.#buffer.bytes();
    if (!this.#buffer.truncated) return Buffer.concat([head, tail]).toString('utf8');
    const headKept = head.subarray(0, head.length - incompleteTailBytes(head));
    const tailKept = tail.subarray(leadingContinuationBytes(tail));
    const total = this.#buffer.totalBytes;
    const omitted = total - headKept.length - tailKept.length;
    return headKept.toString('utf8') + stdoutTruncationNotice(omitted, total) + tailKept.toString('utf8');
  }
}

/** Decodes stderr that was cut at `maxBytes`, without a broken last character. */
export function decodeStderrHead(bytes: Uint8Array, maxBytes: number): string {
  const head = Buffer.from(bytes.buffer, bytes.byteOffset, Math.min(bytes.byteLength, maxBytes));
  const cut = head.length === maxBytes ? incompleteTailBytes(head) : 0;
  return head.subarray(0, head.length - cut).toString('utf8');
}
