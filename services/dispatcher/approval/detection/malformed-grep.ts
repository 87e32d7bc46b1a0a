/**
 * The hardline tier of malformed payloads: a `grep`/`egrep` whose own words
 * do not parse (malformed.ts has the approval tier and the whole story).
 */
import type { Quote } from './posix-words.js';
import { basename, SCAN_BUDGET, ScanBudgetExceeded, Scanner, SEPARATORS } from './quoting-scanner.js';

const GREP_LONG_WITH_VALUE = new Set([
  '--after-context', '--before-context', '--binary-files', '--context', '--directories', '--devices', '--exclude',
  '--exclude-dir', '--exclude-from', '--include', '--label', '--max-count', '--regexp', '--file',
]);
const GREP_SHORT_WITH_VALUE = new Set('ABCDdefm');

/**
 * The hardline finding: a `grep`/`egrep` whose words cannot be read. Takes the
 * command as written (only quoted newlines are blanked first; they are data).
 * Returns undefined when fine, `malformed`, or `uninspectable` when the
 * command is too complex to scan within the budget.
 */
export function malformedGrep(written: string, budget = SCAN_BUDGET): 'malformed' | 'uninspectable' | undefined {
  const scanner = new Scanner(budget);
  try {
    const text = written.includes('\n') ? maskQuotedNewlines(scanner, written, 0, written.length) : written;
    for (const segment of scanner.segments(text)) {
      for (const { start, word } of scanner.commandWords(segment.text)) {
        const name = basename(scanner.deobfuscate(word)).toLowerCase();
        if (name !== 'grep' && name !== 'egrep') continue;
        const words = grepWords(scanner, segment.text, start);
        const verdict = words === undefined ? 'malformed' : grepArguments(words.slice(1));
        // A grep with no pattern at all ends upstream's walk: later greps are not looked at.
        if (verdict === 'malformed') return 'malformed';
        if (verdict === 'last') return undefined;
      }
    }
    return undefined;
  } catch (err) {
    // What could not be read cannot be shown to be safe (the same rule as for nesting too deep).
    if (err instanceof ScanBudgetExceeded) return 'uninspectable';
    throw err;
  }
}

/** Quoted newlines become spaces; the bodies of `$(…)` and backquotes inside double quotes are code and keep theirs. */
function maskQuotedNewlines(scanner: Scanner, text: string, from: number, to: number): string {
  let out = '';
  for (const s of scanner.scan(text, from, to, { substQuoted: true })) {
    if (s.kind === 'subst') {
      const bodyStart = s.at + (text.startsWith('$(', s.at) ? 2 : 1);
      const bodyEnd = s.next - 1;
      out += text.slice(s.at, bodyStart) + maskQuotedNewlines(scanner, text, bodyStart, bodyEnd) + text.slice(bodyEnd, s.next);
    } else if (s.quote !== null && s.kind === 'char' && text.charAt(s.at) === '\n') {
      out += ' ';
    } else {
      out += text.slice(s.at, s.next);
    }
  }
  return out;
}

/**
 * The words of the simple command starting at `start`, up to an unquoted
 * separator or the `)`/backquote closing the substitution it sits in; or
 * undefined for an unterminated quote or a dangling backslash.
 */
function grepWords(scanner: Scanner, text: string, start: number): string[] | undefined {
  const words: string[] = [];
  let word = '';
  let inWord = false;
  let quote: Quote = null;
  let depth = 0;
  let inBacktick = false;
  for (const s of scanner.scan(text, start)) {
    const ch = text.charAt(s.at);
    if (s.kind === 'char' && quote === null) {
      if (/\s/.test(ch) && ch !== '\n') {
        if (inWord) words.push(word);
        word = '';
        inWord = false;
        continue;
      }
      if (text.startsWith('$(', s.at)) {
        depth++;
      } else if (ch === '`') {
        if (inBacktick) inBacktick = false;
        else if (depth === 0 && backtickCloser(text, s.at) === undefined) break;
        else inBacktick = true;
      } else if (ch === ')') {
        if (depth === 0) break;
        depth--;
      } else if (SEPARATORS.includes(ch)) {
        break;
      }
    }
    inWord = true;
    if (s.kind === 'quote') quote = quote === null ? (ch as Quote) : null;
    else if (s.kind === 'esc') word += text.charAt(s.at + 1);
    else if (ch === '\\' && quote === null) return undefined;
    else word += ch;
  }
  if (quote !== null) return undefined;
  if (inWord) words.push(word);
  return words;
}

/** The next backquote not preceded by a backslash. */
function backtickCloser(text: string, at: number): number | undefined {
  let j = text.indexOf('`', at + 1);
  while (j !== -1 && text.charAt(j - 1) === '\\') j = text.indexOf('`', j + 1);
  return j === -1 ? undefined : j;
}

/**
 * grep's option walk: `malformed` for a value option with nothing after it or
 * `-P` with no pattern at all; `last` for no pattern without `-P`.
 */
function grepArguments(args: readonly string[]): 'ok' | 'malformed' | 'last' {
  let perl = false;
  let explicit = false;
  let operand = false;
  let options = true;
  for (let i = 0; i < args.length; i++) {
    const token = args[i] ?? '';
    if (options && token === '--') {
      options = false;
    } else if (options && token.startsWith('--')) {
      const eq = token.indexOf('=');
      const option = eq === -1 ? token : token.slice(0, eq);
      perl ||= option === '--perl-regexp';
      explicit ||= option === '--regexp' || option === '--file';
      if (GREP_LONG_WITH_VALUE.has(option) && eq === -1) {
        if (i + 1 >= args.length) return 'malformed';
        i++;
      }
    } else if (options && token.startsWith('-') && token !== '-') {
      const letters = token.slice(1);
      for (let j = 0; j < letters.length; j++) {
        const c = letters.charAt(j);
        perl ||= c === 'P';
        explicit ||= c === 'e' || c === 'f';
        if (GREP_SHORT_WITH_VALUE.has(c)) {
          // The first value letter owns the rest of the word, or the next word when it comes last.
          if (j + 1 >= letters.length) {
            if (i + 1 >= args.length) return 'malformed';
            i++;
          }
          break;
        }
      }
    } else {
      operand = true;
    }
  }
  if (explicit || operand) return 'ok';
  return perl ? 'malformed' : 'last';
}
