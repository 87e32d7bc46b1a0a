/**
 * A flat view of a bash command line: words, control operators and
 * redirections with their offsets in the text, for checks that look at the
 * top-level shape of a command or rewrite it in place (the terminal tool's
 * guards). It does not execute or expand anything; it only knows enough
 * shell grammar to tell a background `&` from `&&`, `2>&1` or `&>`, to skip
 * quoted text, comments and heredoc bodies, and to find the words of each
 * simple command. Backquoted text and substitutions inside double quotes
 * stay part of their word; `$(...)`, `<(...)` and `>(...)` are lexed in
 * line, between a `$(` operator and its `)`.
 */
import {
  readHeredocBody,
  redirectOperatorAt,
  skipAnsiCString,
  skipBackquoted,
  skipBalanced,
  skipDoubleQuoted,
} from './scan.js';

export type OperatorText =
  | '&&'
  | '||'
  | ';'
  | ';;'
  | '|'
  | '|&'
  | '&'
  | '\n'
  | '('
  | ')'
  /** Opens a command or process substitution: `$(`, `<(`, `>(`. */
  | '$(';

export interface WordToken {
  readonly kind: 'word';
  /** The word after quote removal (substitutions inside quotes stay as written). */
  readonly value: string;
  readonly start: number;
  readonly end: number;
  /** The file name (or heredoc delimiter) of a redirection, never a command word. */
  readonly redirectTarget: boolean;
}

export interface OperatorToken {
  readonly kind: 'op';
  readonly op: OperatorText;
  readonly start: number;
  readonly end: number;
}

export interface RedirectToken {
  readonly kind: 'redirect';
  readonly start: number;
  readonly end: number;
}

export type ShellToken = WordToken | OperatorToken | RedirectToken;

const WORD_BREAK = new Set([' ', '\t', '\r', '\n', '|', '&', ';', '(', ')', '<', '>']);

/**
 * Splits a bash command line into words, control operators and redirections.
 * Unterminated quotes run to the end of the input rather than throwing: the
 * guards must give an answer for any string and bash will report the syntax
 * error itself.
 */
class ShellLexer {
  private pos = 0;
  private readonly tokens: ShellToken[] = [];
  private readonly pendingHeredocs: { delimiter: string; stripTabs: boolean }[] = [];
  private nextWord: 'command' | 'redirect' | 'heredoc' | 'heredoc-tabs' = 'command';

  constructor(private readonly src: string) {}

  lex(): ShellToken[] {
    const src = this.src;
    while (this.pos < src.length) {
      const c = src[this.pos] as string;
      const next = src[this.pos + 1];
      if (c === '\n') {
        this.pushOp('\n', 1);
        this.skipHeredocBodies();
      } else if (c === ' ' || c === '\t' || c === '\r') {
        this.pos += 1;
      } else if (c === '\\' && next === '\n') {
        this.pos += 2;
      } else if (c === '#') {
        // A comment only starts at the beginning of a word, which is where we are.
        const newline = src.indexOf('\n', this.pos);
        this.pos = newline === -1 ? src.length : newline;
      } else if (c === '&') {
        if (next === '&') this.pushOp('&&', 2);
        else if (next === '>') this.pushRedirect(src[this.pos + 2] === '>' ? 3 : 2, 'redirect');
        else this.pushOp('&', 1);
      } else if (c === '|') {
        if (next === '|') this.pushOp('||', 2);
        else if (next === '&') this.pushOp('|&', 2);
        else this.pushOp('|', 1);
      } else if (c === ';') {
        // `;;`, `;&` and `;;&` end case branches; none of them backgrounds anything.
        if (src.startsWith(';;&', this.pos)) this.pushOp(';;', 3);
        else if (next === ';' || next === '&') this.pushOp(';;', 2);
        else this.pushOp(';', 1);
      } else if (c === '(' && next === '(') {
        // Arithmetic `(( a & b ))`: a bitwise `&`, not a background operator.
        const start = this.pos;
        this.pos = skipBalanced(src, this.pos + 1, ')', true);
        this.pushWord(this.src.slice(start, this.pos), start);
      } else if (c === '(') {
        this.pushOp('(', 1);
      } else if (c === ')') {
        this.pushOp(')', 1);
      } else if (c === '<' || c === '>') {
        this.lexRedirect(this.pos);
      } else {
        const fd = /^\d+(?=[<>])/.exec(src.slice(this.pos, this.pos + 12));
        if (fd) this.lexRedirect(this.pos + fd[0].length);
        else this.lexWord();
      }
    }
    return this.tokens;
  }

  private pushOp(op: OperatorText, length: number): void {
    this.tokens.push({ kind: 'op', op, start: this.pos, end: this.pos + length });
    this.pos += length;
    this.nextWord = 'command';
  }

  private pushRedirect(length: number, target: 'redirect' | 'heredoc' | 'heredoc-tabs'): void {
    this.tokens.push({ kind: 'redirect', start: this.pos, end: this.pos + length });
    this.pos += length;
    this.nextWord = target;
  }

  /** `at` is the `<` or `>`; anything between `pos` and `at` is a file-descriptor number. */
  private lexRedirect(at: number): void {
    const prefix = at - this.pos;
    const next = this.src[at + 1];
    if (prefix === 0 && next === '(') {
      this.pushOp('$(', 2);
      return;
    }
    const op = redirectOperatorAt(this.src, at);
    const target = op === '<<-' ? 'heredoc-tabs' : op === '<<' ? 'heredoc' : 'redirect';
    this.pushRedirect(prefix + op.length, target);
  }

  private lexWord(): void {
    const src = this.src;
    const start = this.pos;
    let value = '';
    while (this.pos < src.length) {
      const c = src[this.pos] as string;
      const next = src[this.pos + 1];
      if (WORD_BREAK.has(c)) {
        // `name=(a b c)` is an array assignment, not a subshell.
        if (c === '(' && value.endsWith('=') && /^[A-Za-z_][A-Za-z0-9_]*\+?=$/.test(value)) {
          const end = skipBalanced(src, this.pos + 1, ')', true);
          value += src.slice(this.pos, end);
          this.pos = end;
          continue;
        }
        break;
      }
      if (c === "'") {
        const close = src.indexOf("'", this.pos + 1);
        const end = close === -1 ? src.length : close;
        value += src.slice(this.pos + 1, end);
        this.pos = Math.min(src.length, end + 1);
      } else if (c === '$' && next === "'") {
        const end = skipAnsiCString(src, this.pos + 2);
        value += src.slice(this.pos + 2, Math.max(this.pos + 2, end - 1));
        this.pos = end;
      } else if (c === '"') {
        const end = skipDoubleQuoted(src, this.pos + 1);
        value += src.slice(this.pos + 1, Math.max(this.pos + 1, end - 1)).replace(/\\([$`"\\\n])/g, '$1');
        this.pos = end;
      } else if (c === '`') {
        // Backquoted text is treated like quoted text: kept, never analysed.
        const end = skipBackquoted(src, this.pos + 1);
        value += src.slice(this.pos, end);
        this.pos = end;
      } else if (c === '\\') {
        if (next !== undefined && next !== '\n') value += next;
        this.pos = Math.min(src.length, this.pos + 2);
      } else if (c === '$' && next === '(' && src[this.pos + 2] === '(') {
        // Arithmetic `$(( a & b ))`: a bitwise `&`, not a background operator.
        const end = skipBalanced(src, this.pos + 2, ')', true);
        value += src.slice(this.pos, end);
        this.pos = end;
      } else if (c === '$' && next === '(') {
        // Command substitution: end the word here and let the main loop lex
        // the inner commands, so a server hidden in `$(...)` is still found.
        break;
      } else if (c === '$' && next === '{') {
        const end = skipBalanced(src, this.pos + 2, '}', true);
        value += src.slice(this.pos, end);
        this.pos = end;
      } else {
        value += c;
        this.pos += 1;
      }
    }
    if (this.pos > start) this.pushWord(value, start);
    if (src[this.pos] === '$' && src[this.pos + 1] === '(') this.pushOp('$(', 2);
  }

  private pushWord(value: string, start: number): void {
    const target = this.nextWord;
    this.tokens.push({ kind: 'word', value, start, end: this.pos, redirectTarget: target !== 'command' });
    if (target === 'heredoc' || target === 'heredoc-tabs') {
      this.pendingHeredocs.push({ delimiter: value, stripTabs: target === 'heredoc-tabs' });
    }
    this.nextWord = 'command';
  }

  /** Heredoc bodies start after the newline that ends the line holding `<<WORD`. */
  private skipHeredocBodies(): void {
    for (const { delimiter, stripTabs } of this.pendingHeredocs) {
      this.pos = readHeredocBody(this.src, this.pos, { delimiter, stripTabs, ignoreCarriageReturn: false }).end;
    }
    this.pendingHeredocs.length = 0;
  }
}

/** Splits a bash command line into tokens (see {@link ShellLexer}). */
export function lexShell(command: string): ShellToken[] {
  return new ShellLexer(command).lex();
}

/** The words of one simple command, in order, with where it stands in the line. */
export interface CommandWords {
  /** Words in order, without redirection targets. */
  readonly words: readonly string[];
  /** Inside `$(...)`, `<(...)` or `>(...)`: its exit code is not the line's. */
  readonly substitution: boolean;
  /** The operator that ended it, if an operator did (`&` means it was backgrounded). */
  readonly terminator?: OperatorText;
}

/**
 * Flattens the token stream into simple commands. A substitution's commands
 * are listed before the command that contains it, and a subshell's commands
 * in place, so the last non-substitution entry is the one whose exit code
 * bash reports for the line.
 */
export function splitCommands(tokens: readonly ShellToken[]): CommandWords[] {
  const commands: CommandWords[] = [];
  const stack: { words: string[]; substitution: boolean }[] = [{ words: [], substitution: false }];
  const top = () => stack[stack.length - 1] as { words: string[]; substitution: boolean };
  const flush = (terminator?: OperatorText) => {
    const current = top();
    if (current.words.length > 0) {
      commands.push({
        words: current.words,
        substitution: current.substitution,
        ...(terminator === undefined ? {} : { terminator }),
      });
    }
    current.words = [];
  };
  for (const token of tokens) {
    if (token.kind === 'word') {
      if (!token.redirectTarget) top().words.push(token.value);
    } else if (token.kind === 'op') {
      if (token.op === '$(') {
        stack.push({ words: [], substitution: true });
      } else if (token.op === '(') {
        flush();
        stack.push({ words: [], substitution: top().substitution });
      } else if (token.op === ')') {
        flush(')');
        if (stack.length > 1) stack.pop();
      } else {
        flush(token.op);
      }
    }
  }
  while (stack.length > 0) {
    flush();
    stack.pop();
  }
  return commands;
}
