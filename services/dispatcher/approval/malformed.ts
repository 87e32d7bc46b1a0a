/**
 * Malformed executable payloads (docs/hermes-compat.md §5.3, §5.4): a
 * command whose quoting the detector cannot read where quoting decides what
 * runs. Upstream reports both cases under one description,
 * `command parser limit or malformed executable payload`:
 *
 * - **hardline**: a `grep`/`egrep` command whose own words do not parse (an
 *   unterminated quote or a dangling backslash before the command ends, an
 *   option that needs a value at the very end, `-P` with no pattern). Its
 *   pattern operands are blanked for detection when they parse, so an
 *   unreadable one must not pass unseen.
 * - **approval**: an interpreter (python, node, perl, ruby, php, powershell,
 *   bun, deno) or a program-running read tool (rg, sort, ag, man) whose words
 *   from the command name to the end of its segment do not split as POSIX
 *   shell words (an unterminated quote, a trailing backslash). What such a
 *   command runs cannot be read, so it needs approval, unless an earlier
 *   command already gave a more specific reason.
 *
 * The scanners follow upstream's rules (quote and escape states, segment and
 * command-start boundaries, wrapper words) so the same commands are flagged;
 * they never expand anything. Work is bounded: a command whose scan would
 * exceed {@link SCAN_BUDGET} steps is reported as uninspectable instead.
 */

import { findReadToolExec } from './read-tools.js';

export const MALFORMED_PAYLOAD_DESCRIPTION = 'command parser limit or malformed executable payload';

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

type Quote = "'" | '"' | null;
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

const SEPARATORS = ';&|\n';
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

type Family = 'python' | 'node' | 'perl' | 'ruby' | 'php' | 'powershell' | 'bun' | 'deno';
const INTERPRETERS: readonly (readonly [Family, RegExp])[] = [
  ['python', /^(?:py(?:\.exe)?|python[23]?(?:\.\d+)*(?:\.exe)?)$/],
  ['node', /^node(?:js)?(?:\.exe)?$/],
  ['perl', /^perl[0-9]*(?:\.\d+)*(?:\.exe)?$/],
  ['ruby', /^ruby[0-9.]*(?:\.exe)?$/],
  ['php', /^php(?:\.exe)?$/],
  ['powershell', /^(?:powershell|pwsh)(?:\.exe)?$/],
  ['bun', /^bun(?:\.exe)?$/],
  ['deno', /^deno(?:\.exe)?$/],
];
const EXEC_FLAGS: Readonly<Record<Family, ReadonlySet<string>>> = {
  python: new Set(['-c']),
  node: new Set(['-e', '--eval', '-p', '--print']),
  perl: new Set(['-e', '--eval']),
  ruby: new Set(['-e']),
  php: new Set(['-r']),
  powershell: new Set(['-command', '-c', '-file', '-f']),
  bun: new Set(['-e', '--eval']),
  deno: new Set(['eval', '-e', '--eval']),
};
const OPTIONS_WITH_VALUE: Readonly<Record<Family, ReadonlySet<string>>> = {
  python: new Set(['-W', '-X', '--check-hash-based-pycs']),
  node: new Set(['-C', '--conditions', '--cpu-prof-dir', '--diagnostic-dir', '--icu-data-dir', '--import', '--loader', '--openssl-config', '--require', '--title']),
  perl: new Set(['-0', '-F', '-I', '-M', '-m', '-x']),
  ruby: new Set(['-C', '-E', '-F', '-I', '-K', '-r']),
  php: new Set(['-c', '-d', '-z']),
  powershell: new Set(['-configurationname', '-custompipename', '-executionpolicy', '-inputformat', '-outputformat', '-settingsfile', '-version', '-windowstyle', '-workingdirectory']),
  bun: new Set(['--config', '--cwd', '--env-file', '--preload', '--require']),
  deno: new Set(['-L', '--log-level']),
};
const SHELLS = new Set(['bash', 'sh', 'zsh', 'ksh', 'dash']);
const SHELL_OPTIONS_WITH_VALUE = new Set(['-O', '+O', '-o', '+o', '--init-file', '--rcfile']);
const SHELL_SHORT_LETTERS = new Set('ilrsDcabefhkmnptuvxBCEHPTOo');
const READ_TOOLS = new Set(['rg', 'sort', 'ag', 'man']);
const GREP_LONG_WITH_VALUE = new Set([
  '--after-context', '--before-context', '--binary-files', '--context', '--directories', '--devices', '--exclude',
  '--exclude-dir', '--exclude-from', '--include', '--label', '--max-count', '--regexp', '--file',
]);
const GREP_SHORT_WITH_VALUE = new Set('ABCDdefm');

/** One check's scanning, with its step budget. */
class Scanner {
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

function isCommentStart(text: string, i: number): boolean {
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

function basename(path: string): string {
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

/**
 * Splits text into POSIX shell words (quotes and backslashes resolved, runs of
 * `<`/`>` as words of their own, no comments), or undefined when the text ends
 * inside a quote or right after a backslash that escapes nothing.
 */
export function posixWords(text: string): string[] | undefined {
  const words: string[] = [];
  let word = '';
  let inWord = false;
  let punct = false;
  let quote: Quote = null;
  const finish = () => {
    if (inWord) words.push(word);
    word = '';
    inWord = false;
    punct = false;
  };
  for (let i = 0; i < text.length; i++) {
    const ch = text.charAt(i);
    if (quote === "'") {
      if (ch === "'") quote = null;
      else word += ch;
      continue;
    }
    if (ch === '\\') {
      if (i + 1 >= text.length) return undefined;
      i++;
      const escaped = text.charAt(i);
      // Inside double quotes a backslash stays unless it escapes `"` or itself.
      if (quote === '"' && escaped !== '"' && escaped !== '\\') word += ch;
      word += escaped;
      inWord = true;
      continue;
    }
    if (quote === '"') {
      if (ch === '"') quote = null;
      else word += ch;
      continue;
    }
    if (/\s/.test(ch)) {
      finish();
      continue;
    }
    const isPunct = ch === '<' || ch === '>';
    if (inWord && isPunct !== punct) finish();
    if (ch === "'" || ch === '"') quote = ch;
    else word += ch;
    inWord = true;
    punct = isPunct;
  }
  if (quote !== null) return undefined;
  finish();
  return words;
}

function interpreterFamily(executable: string): Family | undefined {
  const name = basename(executable).toLowerCase();
  return INTERPRETERS.find(([, re]) => re.test(name))?.[0];
}

/** Upstream's option walk: does this interpreter get code to run from an option (`-c`, `-e`, `deno eval`)? */
function interpreterRunsCode(family: Family, args: readonly string[]): boolean {
  const flags = EXEC_FLAGS[family];
  const withValue = OPTIONS_WITH_VALUE[family];
  const powershell = family === 'powershell';
  let skip = false;
  for (const token of args) {
    if (skip) {
      skip = false;
      continue;
    }
    if (token === '--' || (!powershell && !token.startsWith('-'))) return family === 'deno' && token.toLowerCase() === 'eval';
    const eq = token.indexOf('=');
    const option = eq === -1 ? token : token.slice(0, eq);
    const comparable = powershell ? option.toLowerCase() : option;
    if (flags.has(comparable)) return true;
    const attachedValue = [...withValue].some((short) => short.startsWith('-') && !short.startsWith('--') && option.startsWith(short) && option.length > short.length);
    if (!powershell && !option.startsWith('--') && option.length > 2 && !attachedValue) {
      if ([...option.slice(1)].some((c) => flags.has(`-${c}`))) return true;
    }
    skip = withValue.has(comparable) && eq === -1;
  }
  return false;
}

/** Does a shell's argument list carry `-c` (bundles such as `-lc` count; `-o`/`-O` take a value)? */
function shellRunsString(args: readonly string[]): boolean {
  let i = 0;
  while (i < args.length) {
    const token = args[i] ?? '';
    if (token === '--' || !(token.startsWith('-') || token.startsWith('+'))) return false;
    if (SHELL_OPTIONS_WITH_VALUE.has(token)) {
      i += 2;
      continue;
    }
    const letters = token.slice(1);
    if (token.startsWith('--') || ![...letters].every((c) => SHELL_SHORT_LETTERS.has(c))) {
      i++;
      continue;
    }
    if (letters.includes('c')) return true;
    i += 1 + (letters.includes('O') || letters.includes('o') ? 1 : 0);
  }
  return false;
}

/**
 * The approval-tier finding: scans the normalised command's commands in order
 * and returns true when the first one that gives upstream a structural finding
 * (an interpreter or read tool running code, a shell's `-c`) is an interpreter
 * or read tool whose words do not parse. A command that parses and runs code
 * is reported by its own key instead (the pattern table has those).
 */
export function hasMalformedPayload(written: string, budget = SCAN_BUDGET): boolean {
  const scanner = new Scanner(budget);
  try {
    for (const segment of scanner.segments(normalizeForPayload(written))) {
      for (const { start, word } of scanner.commandWords(segment.text)) {
        const executable = scanner.deobfuscate(word);
        const name = basename(executable).toLowerCase();
        const family = interpreterFamily(executable);
        scanner.charge(segment.text.length - start);
        const tokens = posixWords(segment.text.slice(start));
        if (tokens === undefined) {
          if (family !== undefined || READ_TOOLS.has(name)) return true;
          continue;
        }
        if (tokens.length === 0) continue;
        const args = tokens.slice(1);
        if (family !== undefined && (interpreterRunsCode(family, args) || args.some((t) => t.startsWith('<<')))) return false;
        if (SHELLS.has(name) && shellRunsString(args)) return false;
        if (READ_TOOLS.has(name) && findReadToolExec([name, ...args].join(' ').toLowerCase(), written) !== undefined) return false;
      }
    }
    return false;
  } catch (err) {
    // Too complex to read is not proof of safety: ask.
    if (err instanceof ScanBudgetExceeded) return true;
    throw err;
  }
}

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

/**
 * Upstream's detection normalisation with letter case kept: NUL removed,
 * backslash-newline joined, backslash escapes and empty quote pairs dropped,
 * `$IFS` as a space. Quoting is read on this text, as upstream does.
 */
export function normalizeForPayload(written: string): string {
  return written
    .split('\0').join('')
    .replace(/\\\r?\n/g, '')
    .replace(/\\([^\n])/g, '$1')
    .replace(/''|""/g, '')
    .replace(/\$\{IFS\b[^}]*\}|\$IFS\b/g, ' ');
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
