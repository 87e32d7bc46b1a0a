/**
 * Pseudo-terminals on this host: node-pty, loaded once and only when a PTY
 * is asked for, and the wrapper that lets the end of a PTY's output be told
 * apart.
 */
import { createRequire } from 'node:module';
import type * as NodePty from 'node-pty';
import { FailedPreconditionError } from '../../../common/errors.js';
import { partialPrefixLength } from '../shared/partial-prefix.js';

type NodePtyModule = typeof NodePty;
let ptyModule: { module?: NodePtyModule; error?: string } | undefined;

/** Loads node-pty once; a failure is remembered and reported, never silently ignored. */
export function loadNodePty(): { module?: NodePtyModule; error?: string } {
  if (!ptyModule) {
    try {
      // node-pty is CommonJS with a native addon; require keeps its load synchronous and lazy.
      ptyModule = { module: createRequire(import.meta.url)('node-pty') as NodePtyModule };
    } catch (err) {
      ptyModule = { error: err instanceof Error ? err.message : String(err) };
    }
  }
  return ptyModule;
}

export function requireNodePty(): NodePtyModule {
  const loaded = loadNodePty();
  if (!loaded.module) {
    throw new FailedPreconditionError(
      `PTY mode is unavailable on this executor: node-pty could not be loaded (${loaded.error ?? 'unknown error'}). ` +
        'Run the command without pty=true.',
    );
  }
  return loaded.module;
}

/**
 * A PTY child is wrapped so that, after the script ends, it prints a done
 * token and waits (up to 5 s) for an acknowledgement before exiting. Without
 * this, Linux may discard what is still queued in the terminal when the last
 * process closes it, and the end of the output would be lost.
 */
export const PTY_WRAPPER =
  '"$BASH" -c "$1"; __berth_rc=$?; printf "%s" "$2"; __berth_end=$((SECONDS + 5)); ' +
  'while [ "$SECONDS" -lt "$__berth_end" ]; do IFS= read -r -t 1 __berth_l && [ "$__berth_l" = "$3" ] && break; done; ' +
  'exit "$__berth_rc"';

/**
 * Forwards PTY output up to the done token, then acknowledges it and drops
 * the rest. Holds back only bytes that could begin the token.
 */
export class PtyDoneFilter {
  readonly #token: Buffer;
  #pending: Buffer = Buffer.alloc(0);
  #done = false;

  constructor(token: string) {
    this.#token = Buffer.from(token);
  }

  get done(): boolean {
    return this.#done;
  }

  /** Returns the bytes to forward; `onDone` runs once when the token arrives. */
  push(chunk: Buffer, onDone: () => void): Buffer {
    if (this.#done) return Buffer.alloc(0);
    const data = this.#pending.length > 0 ? Buffer.concat([this.#pending, chunk]) : chunk;
    const at = data.indexOf(this.#token);
    if (at >= 0) {
      this.#done = true;
      this.#pending = Buffer.alloc(0);
      onDone();
      return data.subarray(0, at);
    }
    const hold = partialPrefixLength(data, [this.#token]);
    this.#pending = Buffer.from(data.subarray(data.length - hold));
    return data.subarray(0, data.length - hold);
  }

  /** Whatever is still held (the process ended without printing the token). */
  flush(): Buffer {
    const rest = this.#done ? Buffer.alloc(0) : this.#pending;
    this.#pending = Buffer.alloc(0);
    return rest;
  }
}
