/**
 * A command's output as the terminal tool returns it: the head and tail kept
 * within bounds whatever the command prints, live text handed on as it
 * comes, and at the end the text the model reads (ANSI stripped, PTY line
 * endings normalised, head/tail-truncated with the spec's notice).
 */
import { StringDecoder } from 'node:string_decoder';
import { HeadTailBuffer, stripAnsi, truncateHeadTail, truncateOutput } from './output.js';

export class CommandOutput {
  readonly #buffer: HeadTailBuffer;
  readonly #maxChars: number;
  readonly #live: ((text: string) => void) | undefined;
  readonly #decoder: StringDecoder | undefined;

  /** Keeps at most `maxChars` of output; `live` gets the raw text as produced. */
  constructor(maxChars: number, live?: (text: string) => void) {
    this.#maxChars = maxChars;
    this.#buffer = HeadTailBuffer.forMaxChars(maxChars);
    this.#live = live;
    this.#decoder = live ? new StringDecoder('utf8') : undefined;
  }

  push(chunk: Buffer): void {
    this.#buffer.push(chunk);
    if (this.#live && this.#decoder) {
      const text = this.#decoder.write(chunk);
      if (text) this.#live(text);
    }
  }

  /** The command ended: hands on what the live decoder still held. */
  end(): void {
    if (this.#live && this.#decoder) {
      const rest = this.#decoder.end();
      if (rest) this.#live(rest);
    }
  }

  /** The model's text. When we killed the command (`killed`), bash's own report of that kill is noise, not output. */
  render(pty: boolean, killed: boolean): string {
    const clean = (text: string) => {
      const stripped = stripAnsi(text);
      return pty ? stripped.replaceAll('\r\n', '\n') : stripped;
    };
    const { head, tail, omittedChars } = this.#buffer.text();
    const rendered =
      omittedChars === 0 && tail === ''
        ? truncateOutput(clean(head), this.#maxChars)
        : truncateHeadTail(clean(head), clean(tail), omittedChars, this.#maxChars);
    return killed ? dropKillReport(rendered) : rendered;
  }
}

/**
 * bash prints `Terminated` (or `bash: line 3:  1234 Killed  sleep 30`) when a
 * job it waits for dies by the signal we sent on timeout or interrupt. Drop
 * that last line so the output is what the command printed.
 */
export function dropKillReport(output: string): string {
  return output.replace(/(^|\n)(?:bash: line \d+: +\d+ )?(?:Terminated|Killed)(?: +[^\n]*)?\n?$/, '$1');
}
