/**
 * The cwd marker: the line each command's script prints last, carrying a
 * per-environment nonce, whether the state was saved, and the cwd; and the
 * streaming filter that takes it out of the output.
 */
import { partialPrefixLength } from '../backends/shared/partial-prefix.js';

/** The two halves of the cwd marker line for one environment. */
export interface CwdMarker {
  readonly start: string;
  readonly end: string;
}

/** Marker strings for `nonce`: unguessable, so command output cannot forge a cwd. */
export function cwdMarker(nonce: string): CwdMarker {
  return { start: `__berth_cwd_begin_${nonce}__`, end: `__berth_cwd_end_${nonce}__` };
}

const LF = 0x0a;
const CR = 0x0d;
/** A marker whose end has not appeared within this many bytes is not ours (paths are ≤ 4096 bytes). */
const MAX_MARKER_BODY_BYTES = 16 * 1024;

/**
 * Streaming filter that removes cwd marker lines from output and remembers
 * the last one seen. A marker is `\n`, start, `+` (state saved) or `-` (the
 * save failed), the cwd as `pwd` prints it (newline included), optionally the
 * directory the command started in, resolved (`pwd -P`) and followed by a
 * newline, then end, `\n`; `\r\n` is accepted too, for PTYs. Only bytes that
 * could begin a marker are held back, so live output keeps flowing.
 */
export class CwdMarkerFilter {
  readonly #start: Buffer;
  readonly #end: Buffer;
  readonly #prefixes: readonly Buffer[];
  #pending: Buffer = Buffer.alloc(0);
  #cwd: string | undefined;
  #startCwd: string | undefined;
  #saved: boolean | undefined;

  constructor(marker: CwdMarker) {
    this.#start = Buffer.from(marker.start);
    this.#end = Buffer.from(marker.end);
    this.#prefixes = [Buffer.concat([Buffer.from('\r\n'), this.#start]), Buffer.concat([Buffer.from('\n'), this.#start])];
  }

  /** The cwd carried by the last complete marker, if any. */
  get cwd(): string | undefined {
    return this.#cwd;
  }

  /** The resolved start directory carried by the marker that gave {@link cwd}, if it had one. */
  get startCwd(): string | undefined {
    return this.#startCwd;
  }

  /** Whether the last complete marker said the state was saved; undefined when none arrived. */
  get saved(): boolean | undefined {
    return this.#saved;
  }

  /** Feeds a chunk; returns the bytes that can be forwarded now. */
  push(chunk: Uint8Array): Buffer {
    const data = this.#pending.length > 0 ? Buffer.concat([this.#pending, chunk]) : Buffer.from(chunk);
    return this.#scan(data, false);
  }

  /** Ends the stream; returns what was held back, minus any marker (even a cut-off one). */
  end(): Buffer {
    const data = this.#pending;
    this.#pending = Buffer.alloc(0);
    return this.#scan(data, true);
  }

  #scan(input: Buffer, final: boolean): Buffer {
    const out: Buffer[] = [];
    let data = input;
    for (;;) {
      const s = data.indexOf(this.#start);
      if (s < 0) {
        const hold = final ? 0 : partialPrefixLength(data, this.#prefixes);
        out.push(data.subarray(0, data.length - hold));
        this.#pending = Buffer.from(data.subarray(data.length - hold));
        break;
      }
      // The marker line starts with the newline printed before it.
      let r = s;
      if (r > 0 && data[r - 1] === LF) {
        r--;
        if (r > 0 && data[r - 1] === CR) r--;
      }
      const bodyStart = s + this.#start.length;
      const e = data.indexOf(this.#end, bodyStart);
      if (e < 0) {
        if (data.length - bodyStart > MAX_MARKER_BODY_BYTES) {
          // Not a marker after all: release it as ordinary output and keep scanning.
          out.push(data.subarray(0, bodyStart));
          data = data.subarray(bodyStart);
          continue;
        }
        out.push(data.subarray(0, r));
        // At the end of the stream a cut-off marker is dropped, never shown.
        this.#pending = final ? Buffer.alloc(0) : Buffer.from(data.subarray(r));
        break;
      }
      let after = e + this.#end.length;
      if (!final && (after === data.length || (data[after] === CR && after + 1 === data.length))) {
        // The line's newline has not arrived yet.
        out.push(data.subarray(0, r));
        this.#pending = Buffer.from(data.subarray(r));
        break;
      }
      if (data[after] === CR && data[after + 1] === LF) after += 2;
      else if (data[after] === LF) after += 1;
      const body = parseMarkerBody(data.subarray(bodyStart, e));
      if (body.cwd !== undefined) {
        this.#cwd = body.cwd;
        this.#startCwd = body.startCwd;
      }
      this.#saved = body.saved;
      out.push(data.subarray(0, r));
      data = data.subarray(after);
    }
    return out.length === 1 && out[0] ? out[0] : Buffer.concat(out);
  }
}

/**
 * The marker body is the save flag, then `pwd`'s output: the path plus its
 * newline (`\r\n` under a PTY), then (from scripts that record it) the
 * resolved directory the command started in, on a line of its own, empty
 * when it could not be resolved. The cwd is undefined when the body is not
 * one or two lines of absolute paths: a process of the command that outlived
 * a kill (say `yes` on a timeout) can write into the middle of the marker,
 * and that text must not become the task's directory. A path with a newline
 * in it is not taken either.
 */
export function parseMarkerBody(body: Buffer): { saved: boolean; cwd: string | undefined; startCwd: string | undefined } {
  let text = body.toString('utf8');
  const saved = text.startsWith('+');
  if (text.startsWith('+') || text.startsWith('-')) text = text.slice(1);
  if (text.endsWith('\r\n')) text = text.slice(0, -2);
  else if (text.endsWith('\n')) text = text.slice(0, -1);
  const lines = text.split(/\r?\n/);
  if (lines.length > 2) return { saved, cwd: undefined, startCwd: undefined };
  const [end = '', start] = lines;
  const startCwd = start !== undefined && start.startsWith('/') ? start : undefined;
  // Empty: the directory was deleted under the shell (pwd failed and $PWD is unset).
  if (end === '') return { saved, cwd: '', startCwd };
  return end.startsWith('/') ? { saved, cwd: end, startCwd } : { saved, cwd: undefined, startCwd: undefined };
}
