/**
 * Finds the "process group id" line a wrapped command prints first and
 * removes it from the output. Shared by the backends that run commands under
 * `setsid` in an environment they reach through a channel (ssh, singularity);
 * it depends on nothing backend-specific.
 */

/**
 * Removes the group-id line from a foreground command's stdout. Whatever the
 * login shell prints before it (a chatty ~/.bashrc) is dropped too.
 */
export class PgidLineFilter {
  readonly #prefix: Buffer;
  #pending: Buffer = Buffer.alloc(0);
  #pgid: number | undefined;

  constructor(prefix: string) {
    this.#prefix = Buffer.from(prefix);
  }

  get pgid(): number | undefined {
    return this.#pgid;
  }

  /** Returns what to forward; `onPgid` runs once when the line is complete. */
  push(chunk: Buffer, onPgid: (pgid: number) => void): Buffer {
    if (this.#pgid !== undefined) return chunk;
    const data = this.#pending.length > 0 ? Buffer.concat([this.#pending, chunk]) : chunk;
    const at = data.indexOf(this.#prefix);
    if (at < 0) {
      // Keep only what could be the start of the prefix.
      this.#pending = Buffer.from(data.subarray(Math.max(0, data.length - this.#prefix.length)));
      return Buffer.alloc(0);
    }
    const eol = data.indexOf(0x0a, at);
    if (eol < 0) {
      this.#pending = Buffer.from(data.subarray(at));
      return Buffer.alloc(0);
    }
    const digits = data.subarray(at + this.#prefix.length, eol).toString('latin1').replace(/\r$/, '');
    this.#pending = Buffer.alloc(0);
    this.#pgid = Number(digits);
    onPgid(this.#pgid);
    return data.subarray(eol + 1);
  }
}
