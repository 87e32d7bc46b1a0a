/**
 * Input to a process under a pseudo-terminal. A terminal has no half-close:
 * input is typed, and the end of it is ^D, which ends input only at the start
 * of a line; after an unterminated line a first ^D hands the line over and a
 * second ends the input.
 */

/** Whether typing `bytes` leaves the terminal at the start of a line (`before` when there are none). */
export function endsLine(bytes: Uint8Array, before = true): boolean {
  return bytes.length === 0 ? before : bytes[bytes.length - 1] === 0x0a;
}

/** What to type to end a terminal's input, standing at the start of a line or not. */
export function ptyEof(atLineStart: boolean): string {
  return atLineStart ? '\x04' : '\x04\x04';
}
