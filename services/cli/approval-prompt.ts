/**
 * Asks the person at the terminal about a command that needs approval: one
 * key, o(nce) / s(ession) / a(lways) / d(eny), with a countdown. Without a
 * terminal to ask on it denies at once: nobody is there, and silence is not
 * consent.
 */
import type { ApprovalRequest } from '../gen/berth/v1/dispatcher.js';

/** The slice of a TTY read stream the prompt uses (process.stdin in practice). */
export interface PromptInput {
  readonly isTTY?: boolean;
  setRawMode?(mode: boolean): unknown;
  on(event: 'data', listener: (chunk: Buffer | string) => void): unknown;
  off(event: 'data', listener: (chunk: Buffer | string) => void): unknown;
  resume(): unknown;
  pause(): unknown;
}

export interface PromptOutput {
  write(text: string): unknown;
}

export interface PromptIo {
  readonly input: PromptInput;
  readonly output: PromptOutput;
  /** Said after the denial when there is no terminal: what would work instead. */
  readonly noTerminalHint?: string;
}

const KEYS: Readonly<Record<string, string>> = { o: 'once', s: 'session', a: 'always', d: 'deny', n: 'deny', '\u0003': 'deny' };

function countdownLine(choices: readonly string[], secondsLeft: number): string {
  const labels = choices.map((c) => `[${c[0]}]${c.slice(1)}`).join('  ');
  return `\r\x1b[K  ${labels}   (${secondsLeft}s left) `;
}

/**
 * Resolves with the choice, or undefined when the countdown ran out (send
 * nothing: the server's timeout denies) or `signal` aborted (the request was
 * settled some other way).
 */
export function promptApproval(request: ApprovalRequest, io: PromptIo, signal: AbortSignal): Promise<string | undefined> {
  const { input, output } = io;
  const choices = request.choices.length > 0 ? request.choices : ['once', 'session', 'always', 'deny'];
  output.write(`\n⚠  Approval needed: ${request.description}\n   ${request.command.replace(/\n/g, '\n   ')}\n`);
  if (input.isTTY !== true || typeof input.setRawMode !== 'function') {
    output.write(`   No terminal to ask on: denied${io.noTerminalHint ? `; ${io.noTerminalHint}` : ''}.\n`);
    return Promise.resolve('deny');
  }
  if (signal.aborted) return Promise.resolve(undefined);
  const setRawMode = input.setRawMode.bind(input);
  return new Promise((resolve) => {
    let secondsLeft = Math.max(1, request.timeoutSeconds);
    const finish = (choice: string | undefined, message: string) => {
      clearInterval(timer);
      signal.removeEventListener('abort', onAbort);
      input.off('data', onData);
      setRawMode(false);
      input.pause();
      output.write(`\r\x1b[K  ${message}\n`);
      resolve(choice);
    };
    const onData = (chunk: Buffer | string) => {
      for (const ch of chunk.toString().toLowerCase()) {
        const choice = KEYS[ch];
        if (choice !== undefined && choices.includes(choice)) return finish(choice, `→ ${choice}`);
      }
    };
    const onAbort = () => finish(undefined, '(answered elsewhere)');
    const timer = setInterval(() => {
      secondsLeft -= 1;
      if (secondsLeft <= 0) finish(undefined, '→ no answer in time: denied');
      else output.write(countdownLine(choices, secondsLeft));
    }, 1000);
    signal.addEventListener('abort', onAbort, { once: true });
    setRawMode(true);
    input.on('data', onData);
    input.resume();
    output.write(countdownLine(choices, secondsLeft));
  });
}
