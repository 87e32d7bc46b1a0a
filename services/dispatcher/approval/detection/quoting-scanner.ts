/**
 * Reads shell quoting the way upstream's malformed-payload check does: quote
 * and escape states, substitutions, segment and command-start boundaries,
 * wrapper words, and trivially expanded command words. Nothing is expanded
 * for real, and work is bounded by a step budget.
 */
import { posixWords, type Quote } from './posix-words.js';

/**
 * Scan steps allowed for one check. Substitutions are re-scanned from each
 * opener, so adversarial nesting (`$($($(…`) could otherwise cost quadratic time.
 */
export const SCAN_BUDGET = 4_000_000;

/** Thrown when a check runs out of {@link SCAN_BUDGET}. */
export class ScanBudgetExceeded extends Error {
  constructor() {
    super('command too complex to inspect for malformed quoting');
  }
}

type StepKind = 'char' | 'esc' | 'quote' | 'comment' | 'subst';

interface Step {
  readonly kind: StepKind;
  readonly at: number;
  /** Index after the step; -1 for an unterminated substitution (only with `stopUnterminated`). */
  readonly next: number;
  /** The quote state the step was read in. */
  readonly quote: Quote;
}

interface ScanOptions {
  readonly comments?: boolean;
  /** `$(…)` and backquotes are one step outside quotes. */
  readonly substUnquoted?: boolean;
  /** `$(…)` and backquotes are one step inside double quotes. */
  readonly substQuoted?: boolean;
  /** `${…}` outside quotes is one step too. */
  readonly brace?: boolean;
  /** An unterminated substitution ends the scan (with `next` -1). */
  readonly stopUnterminated?: boolean;
}

export const SEPARATORS = ';&|\n';
const WORD_STOPS = ';&|<>()';
const SHELL_TRANSITIONS = new Set(['if', 'then', 'else', 'elif', 'do', 'while', 'until', '!']);
const REDIRECTION = /(?:[0-9]+)?(?:>>|<<|<>|>&|<&|>\||[<>])/y;
const ASSIGNMENT = /^[A-Za-z_][A-Za-z0-9_]*=/;
const BACKTICK_BODY = /(?:\\[\s\S]|[^`\\])*`/y;

const WRAPPERS = new Set(['sudo', 'env', 'exec', 'nohup', 'setsid', 'time', 'command', 'builtin', 'nice', 'timeout', 'stdbuf', 'ionice', 'chrt', 'taskset', 'chroot']);
const WRAPPER_OPTIONS_WITH_VALUE: Readonly<Record<string, ReadonlySet<string>>> = {
  chroot: new Set(['--groups', '--userspec']),
  sudo: new Set(['-c', '--close-from', '-g', '--group', '-h', '--host', '-p', '--prompt', '-u', '--user']),
  env: new Set(['-a', '--argv0', '-C', '--chdir', '-S', '--split-string', '-u', '--unset']),
  exec: new Set(['-a']),
  nice: new Set(['-n', '--adjustment']),
  time: new Set(['-f', '--format', '-o', '--output']),
  timeout: new Set(['-k', '--kill-after', '-s', '--signal']),
  stdbuf: new Set(['-e', '--error', '-i', '--input', '-o', '--output']),
  ionice: new Set(['-c', '--class', '-n', '--classdata']),
};
/** Wrapper options that query instead of running the command after them. */
const WRAPPER_QUERY_OPTIONS: Readonly<Record<string, ReadonlySet<string>>> = {
  command: new Set(['-v', '-V']),
  chrt: new Set(['-p', '--pid']),
  ionice: new Set(['-p', '--pid', '--pgid', '--uid']),
  taskset: new Set(['-p', '--pid']),
};
const WRAPPER_POSITIONALS: Readonly<Record<string, number>> = { chroot: 1, chrt: 1, taskset: 1, timeout: 1 };

/** One check's scanning, with its step budget. */
export class Scanner {
  #steps = 0;

  constructor(private readonly budget: number) {}

  /** Counts `n` steps of work done outside {@link scan}. */
  charge(n: number): void {
    this.#steps += n;
    if (this.#steps > this.budget) throw new ScanBudgetExceeded();
  }

  *scan(text: string, from: number, to: number = text.length, o: ScanOptions = {}): Generator<Step> {
    let quote: Quote = null;
    let i = from;
    while (i < to) {
      if (++this.#steps > this.budget) throw new ScanBudgetExceeded();
      const ch = text.charAt(i);
      let kind: StepKind = 'char';
      let next = i + 1;
      if (o.comments === true && quote === null && isCommentStart(text, i)) {
        kind = 'comment';
        const newline = text.indexOf('\n', i);
        next = newline < 0 || newline >= to ? to : newline;
      } else if (quote !== "'" && ch === '\\' && i + 1 < to) {
        kind = 'esc';
        next = i + 2;
      } else if (ch === quote || (quote === null && (ch === "'" || ch === '"'))) {
        kind = 'quote';
      } else if (
        quote !== "'" &&
        (quote === null ? o.substUnquoted === true : o.substQuoted === true) &&
        (ch === '`' || text.startsWith('$(', i) || (o.brace === true && quote === null && text.startsWith('${', i)))
      ) {
        const close = ch === '`' ? this.backtickEnd(text, i) : text.charAt(i + 1) === '(' ? this.dollarParenEnd(text, i) : braceEnd(text, i);
        if (close !== undefined) {
          kind = 'subst';
          next = close;
        } else if (o.stopUnterminated === true) {
          yield { kind: 'subst', at: i, next: -1, quote };
          return;
        }
      }
      yield { kind, at: i, next, quote };
      if (kind === 'quote') quote = quote === null ? (ch as Quote) : null;
      i = next;
    }
  }

  /** Index after the `)` closing the `$(` at `start`: only `$(` opens, any unquoted `)` closes. */
  dollarParenEnd(text: string, start: number): number | undefined {
    let depth = 1;
    for (const s of this.scan(text, start + 2)) {
      if (s.kind !== 'char' || s.quote !== null) continue;
      if (text.startsWith('$(', s.at)) depth++;
      else if (text.charAt(s.at) === ')') depth--;
      if (depth === 0) return s.at + 1;
    }
    return undefined;
  }

  backtickEnd(text: string, start: number): number | undefined {
    this.#steps += 1;
    BACKTICK_BODY.lastIndex = start + 1;
    const m = BACKTICK_BODY.exec(text);
    if (m !== null) this.#steps += m[0].length;
    return m === null ? undefined : start + 1 + m[0].length;
  }

  /** The top-level segments: split at unquoted `;`, `&`, `|` and newlines; comments dropped. */
  segments(text: string): { readonly text: string; readonly at: number }[] {
    const out: { text: string; at: number }[] = [];
    let start = 0;
    for (const s of this.scan(text, 0, text.length, { comments: true })) {
      if (s.kind === 'comment' || (s.kind === 'char' && s.quote === null && SEPARATORS.includes(text.charAt(s.at)))) {
        if (start < s.at) out.push({ text: text.slice(start, s.at), at: start });
        start = s.next;
      }
    }
    if (start < text.length) out.push({ text: text.slice(start), at: start });
    return out;
  }

  /** Where commands start: the beginning, after separators and openers, inside substitutions, after `then`/`do`/…. */
  *commandStarts(text: string): Generator<number> {
    const starts = [0];
    const visit = (from: number, to: number): void => {
      let skip = -1;
      const opts: ScanOptions = { substUnquoted: true, substQuoted: true, stopUnterminated: true, comments: true };
      for (const s of this.scan(text, from, to, opts)) {
        const ch = text.charAt(s.at);
        if (s.kind === 'subst') {
          const inner = s.at + (ch === '`' ? 1 : 2);
          starts.push(inner);
          visit(inner, s.next === -1 ? to : s.next - 1);
        } else if (s.kind === 'char' && s.quote === null && s.at !== skip) {
          const before = s.at === 0 ? ' ' : text.charAt(s.at - 1);
          if ('(;\n'.includes(ch) || (ch === '{' && (/\s/.test(before) || '(;&|)'.includes(before)))) {
            starts.push(s.at + 1);
          } else if (ch === '&' || ch === '|') {
            const doubled = s.at + 1 < to && text.charAt(s.at + 1) === ch;
            if (doubled) skip = s.at + 1;
            starts.push(s.at + 1 + (doubled ? 1 : 0));
          }
        }
      }
    };
    visit(0, text.length);
    const seen = new Set<number>();
    for (let k = 0; k < starts.length; k++) {
      const start = skipSpace(text, starts[k] ?? 0);
      if (start >= text.length || seen.has(start) || isCommentStart(text, start)) continue;
      seen.add(start);
      yield start;
      const word = this.readWord(text, start);
      if (SHELL_TRANSITIONS.has(word.text)) starts.push(word.end);
    }
  }

  /** One shell word from `pos` (after blanks), substitutions kept whole; nothing expanded. */
  readWord(text: string, pos: number): { readonly start: number; readonly end: number; readonly text: string } {
    const start = skipSpace(text, pos);
    let end = start;
    for (const s of this.scan(text, start, text.length, { substUnquoted: true, brace: true })) {
      const ch = text.charAt(s.at);
      if (s.kind === 'char' && s.quote === null && (/\s/.test(ch) || WORD_STOPS.includes(ch))) break;
      end = s.next;
    }
    return { start, end, text: text.slice(start, end) };
  }

  /** Words in command position (wrappers such as `sudo` or `env X=1` are skipped, and yielded too). */
  *commandWords(text: string): Generator<{ readonly start: number; readonly word: string }> {
    for (const first of this.commandStarts(text)) {
      let pos = first;
      let wrapper: string | undefined;
      let positionals = 0;
      let options = true;
      let skipValue = false;
      while (pos < text.length) {
        REDIRECTION.lastIndex = skipSpace(text, pos);
        const redirect = REDIRECTION.exec(text);
        if (redirect !== null) {
          pos = this.readWord(text, REDIRECTION.lastIndex).end;
          continue;
        }
        const { start, end, text: word } = this.readWord(text, pos);
        if (start === end) break;
        pos = end;
        const plain = this.deobfuscate(word);
        const name = basename(plain).toLowerCase();
        if (skipValue) {
          skipValue = false;
          continue;
        }
        if (wrapper !== undefined && options && plain === '--') {
          options = false;
          continue;
        }
        if (wrapper !== undefined && options && plain.startsWith('-')) {
          const option = plain.split('=', 1)[0] ?? plain;
          if (wrapper === 'env' && (option === '--split-string' || plain.startsWith('-S'))) break;
          const queries = WRAPPER_QUERY_OPTIONS[wrapper];
          const queried = queries?.has(option) === true || (wrapper === 'command' && !option.startsWith('--') && /[vV]/.test(option.slice(1)));
          if (queried) break;
          skipValue = !plain.includes('=') && WRAPPER_OPTIONS_WITH_VALUE[wrapper]?.has(option) === true;
          continue;
        }
        if (positionals > 0) {
          positionals--;
          continue;
        }
        if (ASSIGNMENT.test(word) && !word.includes('\n')) continue;
        yield { start, word };
        if (!WRAPPERS.has(name)) break;
        wrapper = name;
        options = true;
        positionals = WRAPPER_POSITIONALS[name] ?? 0;
      }
    }
  }

  /** A command word as the shell would spell it: quotes and escapes removed, trivial expansions resolved. */
  deobfuscate(word: string): string {
    let current = word;
    for (let round = 0; round < 2; round++) {
      const next = this.stripQuoting(this.resolveTrivialExpansions(current));
      if (next === current) break;
      current = next;
    }
    return current;
  }

  stripQuoting(word: string): string {
    let out = '';
    for (const s of this.scan(word, 0)) {
      if (s.kind === 'quote') continue;
      out += s.kind === 'esc' ? word.charAt(s.at + 1) : word.charAt(s.at);
    }
    return out;
  }

  /** `$(echo x)`, `` `printf %s x` ``, `${v:-x}` and `${v/a/x}` become `x` when `x` is a plain literal. */
  resolveTrivialExpansions(word: string): string {
    let out = '';
    let i = 0;
    while (i < word.length) {
      const opener = word.startsWith('$(', i) ? 2 : word.charAt(i) === '`' ? 1 : 0;
      const end = opener === 2 ? this.dollarParenEnd(word, i) : opener === 1 ? this.backtickEnd(word, i) : undefined;
      const literal = end === undefined ? undefined : literalOutput(word.slice(i + opener, end - 1));
      if (end === undefined || literal === undefined) {
        out += word.charAt(i);
        i++;
      } else {
        out += literal;
        i = end;
      }
    }
    return out
      .replace(/\$\{[^}/\s]+\/[^}/]*\/([^}]*)\}/g, '$1')
      .replace(/\$\{[^}:\s]+:-([^}]*)\}/g, '$1');
  }
}

export function isCommentStart(text: string, i: number): boolean {
  if (text.charAt(i) !== '#') return false;
  if (i === 0) return true;
  const before = text.charAt(i - 1);
  return /\s/.test(before) || ';&|()<>'.includes(before);
}

function skipSpace(text: string, pos: number): number {
  let i = pos;
  while (i < text.length && /\s/.test(text.charAt(i))) i++;
  return i;
}

function braceEnd(text: string, start: number): number | undefined {
  const close = text.indexOf('}', start + 2);
  return close < 0 ? undefined : close + 1;
}

export function basename(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

const SIMPLE_LITERAL = /^[A-Za-z0-9_./:@%+=,-]+$/;

/** What `echo LIT`, `echo -n LIT`, `printf LIT` or `printf %s LIT` print, for a plain literal. */
function literalOutput(script: string): string | undefined {
  const words = posixWords(script);
  if (words === undefined || words.length === 0) return undefined;
  const command = (words[0] ?? '').toLowerCase();
  let args = words.slice(1);
  if (command === 'echo') {
    while (args.length > 0 && /^-[nEe]+$/.test(args[0] ?? '')) args = args.slice(1);
  } else if (command !== 'printf') {
    return undefined;
  }
  if (args.length === 1 && SIMPLE_LITERAL.test(args[0] ?? '')) return args[0];
  if (command === 'printf' && args.length === 2 && args[0] === '%s' && SIMPLE_LITERAL.test(args[1] ?? '')) return args[1];
  return undefined;
}
