/**
 * Character-level pieces of bash syntax shared by the shell readers in this
 * folder: where a quoted string, a bracketed expansion or a heredoc body
 * ends, which redirection operator starts at a position, and how the words
 * of a simple command split into wrapper options and the rest.
 *
 * Every function takes the source text and an index and returns an index;
 * none throws, and unterminated constructs run to the end of the text (bash
 * reports the syntax error itself; callers must still give an answer).
 */

/** The closers of the bracketed constructs skipped by {@link skipBalanced}. */
export type Closer = ')' | '}' | '`';

/** Redirection operators, longest first so the first match is the whole operator. */
const REDIRECT_OPERATORS = ['<<<', '<<-', '<<', '<&', '<>', '>>', '>|', '>&', '<', '>'] as const;

/** A redirection operator (without fd prefix): `>`, `>>`, `<<`, `<<-`, `<<<`, `<&`, `>&`, `<>`, `>|`. */
export type RedirectOperator = (typeof REDIRECT_OPERATORS)[number];

/** The redirection operator at `at`, which holds `<` or `>`. */
export function redirectOperatorAt(src: string, at: number): RedirectOperator {
  return REDIRECT_OPERATORS.find((candidate) => src.startsWith(candidate, at)) ?? (src.charAt(at) === '<' ? '<' : '>');
}

/** `from` is just after an opening `'`; returns the index past the closing one. */
export function skipSingleQuoted(src: string, from: number): number {
  const close = src.indexOf("'", from);
  return close === -1 ? src.length : close + 1;
}

/** `from` is just after an opening `"`; returns the index past the closing one (`$(...)` and backquotes skipped whole). */
export function skipDoubleQuoted(src: string, from: number): number {
  let i = from;
  while (i < src.length) {
    const c = src[i];
    if (c === '\\') i += 2;
    else if (c === '"') return i + 1;
    else if (c === '`') i = skipBackquoted(src, i + 1);
    else if (c === '$' && src[i + 1] === '(') i = skipBalanced(src, i + 2, ')', true);
    else i += 1;
  }
  return src.length;
}

/** `from` is just after an opening backquote; returns the index past the closing one. */
export function skipBackquoted(src: string, from: number): number {
  return skipEscapedUntil(src, from, '`');
}

/** `from` is just after `$'`; returns the index past the closing `'` (escapes skipped as pairs). */
export function skipAnsiCString(src: string, from: number): number {
  return skipEscapedUntil(src, from, "'");
}

function skipEscapedUntil(src: string, from: number, close: string): number {
  let i = from;
  while (i < src.length) {
    const c = src[i];
    if (c === '\\') i += 2;
    else if (c === close) return i + 1;
    else i += 1;
  }
  return src.length;
}

/**
 * `from` is just after an opening bracket (`(`, `{`, or a backquote for
 * `closer` '`'); returns the index past its matching closer, counting nested
 * openers and skipping backslash escapes. With `quotes`, quoted strings and
 * backquotes are skipped too, so a `)` inside `")"` does not close.
 */
export function skipBalanced(src: string, from: number, closer: Closer, quotes = false): number {
  const opener = closer === ')' ? '(' : closer === '}' ? '{' : null;
  let depth = 1;
  let i = from;
  while (i < src.length) {
    const c = src[i];
    if (c === '\\') {
      i += 2;
    } else if (quotes && c === "'") {
      i = skipSingleQuoted(src, i + 1);
    } else if (quotes && c === '"') {
      i = skipDoubleQuoted(src, i + 1);
    } else if (quotes && c === '`') {
      i = skipBackquoted(src, i + 1);
    } else if (c === opener) {
      depth += 1;
      i += 1;
    } else if (c === closer) {
      depth -= 1;
      i += 1;
      if (depth === 0) return i;
    } else {
      i += 1;
    }
  }
  return src.length;
}

/** How a heredoc body ends: its delimiter, and whether leading tabs (`<<-`) or a trailing CR are ignored on that line. */
export interface HeredocEnd {
  readonly delimiter: string;
  readonly stripTabs: boolean;
  readonly ignoreCarriageReturn: boolean;
}

/**
 * Reads a heredoc body starting at `from` (the start of the line after the
 * one holding `<<WORD`). Returns its lines (without the delimiter line) and
 * the index just past the delimiter line, or the end of the text.
 */
export function readHeredocBody(src: string, from: number, end: HeredocEnd): { lines: string[]; end: number } {
  const lines: string[] = [];
  let pos = from;
  while (pos < src.length) {
    const newline = src.indexOf('\n', pos);
    const line = src.slice(pos, newline === -1 ? src.length : newline);
    pos = newline === -1 ? src.length : newline + 1;
    let bare = end.stripTabs ? line.replace(/^\t+/, '') : line;
    if (end.ignoreCarriageReturn) bare = bare.replace(/\r$/, '');
    if (bare === end.delimiter) break;
    lines.push(line);
  }
  return { lines, end: pos };
}

// ---------------------------------------------------------------------------
// Words of a simple command

/** A variable assignment word: `NAME=`, `NAME+=`, `NAME[i]=`. */
export const ASSIGNMENT_WORD = /^[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=/;

/** The base name of a command word (`/usr/bin/grep` → `grep`); '' for none. */
export function commandName(word: string | undefined): string {
  if (word === undefined) return '';
  return word.slice(word.lastIndexOf('/') + 1);
}

/**
 * Index of the first word at or after `from` that is not an option or an
 * option's value: `--` ends the options (and is skipped), `-` is an operand.
 * `withValue` lists options whose value is the next word; `valueLetters` the
 * short options that do so when they end a cluster (`-iu root`).
 */
export function skipOptions(
  words: readonly string[],
  from: number,
  withValue: ReadonlySet<string>,
  valueLetters = '',
): number {
  let i = from;
  for (let word = words[i]; word !== undefined && word.startsWith('-') && word !== '-'; word = words[i]) {
    if (word === '--') return i + 1;
    const clusterTakesValue = !word.startsWith('--') && valueLetters.includes(word.charAt(word.length - 1));
    i += withValue.has(word) || clusterTakesValue ? 2 : 1;
  }
  return i;
}
