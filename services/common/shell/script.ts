/**
 * A tree view of a bash script, for the dangerous-command detector: every
 * simple command with its quotes resolved the way the shell resolves them,
 * its redirections (heredoc bodies included), grouped into pipelines and
 * lists, and the scripts nested in it (`$(...)`, backquotes, subshells,
 * brace groups, process substitutions, and substitutions inside arithmetic,
 * `${...}` and expanding heredoc bodies) parsed as scripts of their own.
 * `$'...'` strings are decoded, because `$'\x72\x6d'` is another way to
 * spell `rm`.
 *
 * The parser is deliberately forgiving: it never throws, unterminated quotes
 * run to the end, and anything it cannot place is treated as an argument.
 * Its job is to find command positions, not to validate shell syntax.
 * Nesting is bounded by {@link ParseLimits}; what lies deeper is skipped and
 * reported through {@link ParseContext.incomplete}.
 */
import { readHeredocBody, redirectOperatorAt, skipBalanced, type Closer } from './scan.js';

/** Bounds and hooks for one parse. */
export interface ParseLimits {
  /** Deepest nesting parsed; a deeper script is skipped and the parse marked incomplete. */
  readonly maxDepth: number;
  /** How much of a nested script shows inside the word that contains it. */
  readonly previewChars: number;
  /** Applied to the text a `$'...'` string decodes to (escapes can spell anything again). */
  readonly decoded: (text: string) => string;
}

/** Shared by every parser of one command line. */
export interface ParseContext {
  readonly limits: ParseLimits;
  /** Set when some nesting was too deep to parse. */
  incomplete: boolean;
}

export interface Redirect {
  /** Operator with any fd prefix: `>`, `2>>`, `&>`, `<<`, `<<<`, ... */
  readonly op: string;
  /** Target word, quotes resolved (the delimiter for a heredoc). */
  readonly target: string;
  /** Heredoc body, once read. */
  body?: string;
}

/** One simple command: its words (quotes resolved) and its redirections. */
export interface SimpleCommand {
  readonly words: string[];
  readonly redirects: Redirect[];
}

export interface Pipeline {
  readonly stages: SimpleCommand[];
  /** The list operator after this pipeline: `;` (also newline), `&&`, `||`, `&`. */
  readonly separator: string;
}

/** One parsed script: the whole text, or the inside of a nested construct. */
export interface Script {
  readonly source: string;
  readonly depth: number;
  readonly pipelines: Pipeline[];
  readonly nested: Script[];
}

interface PendingHeredoc {
  readonly redirect: Redirect;
  readonly stripTabs: boolean;
  /** Unquoted delimiter: `$(...)` and backticks in the body run. */
  readonly expand: boolean;
}

// Characters that can end a run of plain word characters.
const UNQUOTED_SPECIAL = /[\s'"\\$`<>&|;(){}#]/g;
const DOUBLE_QUOTED_SPECIAL = /["\\$`]/g;
const DIGITS = /^\d+$/;

/**
 * Parses one script: the whole command, or the inside of `$(...)`, a backtick
 * pair, a subshell or a brace group, up to its closer.
 */
export class ScriptParser {
  private pos: number;
  private readonly pipelines: Pipeline[] = [];
  private readonly nested: Script[] = [];
  private stages: SimpleCommand[] = [];
  private command: SimpleCommand = { words: [], redirects: [] };
  private word: string | null = null;
  private wordQuoted = false;
  private redirectOp: string | null = null;
  private readonly heredocs: PendingHeredoc[] = [];

  constructor(
    private readonly src: string,
    private readonly start: number,
    private readonly closer: Closer | null,
    private readonly depth: number,
    private readonly state: ParseContext,
  ) {
    this.pos = start;
  }

  /** Returns the script and the index just past its closer (or the end of the text). */
  parse(): { script: Script; end: number } {
    let contentEnd = this.src.length;
    while (this.pos < this.src.length) {
      const c = this.src.charAt(this.pos);
      // A `}` only closes a group where a command could start (`{ a; }`).
      if (c === this.closer && (c !== '}' || this.atCommandStart())) {
        contentEnd = this.pos;
        this.pos++;
        break;
      }
      this.step(c);
    }
    this.endPipeline(';');
    const script: Script = {
      source: this.src.slice(this.start, contentEnd),
      depth: this.depth,
      pipelines: this.pipelines,
      nested: this.nested,
    };
    return { script, end: this.pos };
  }

  private step(c: string): void {
    const { src } = this;
    switch (c) {
      case ' ':
      case '\t':
      case '\r':
      case '\f':
      case '\v':
        this.endWord();
        this.pos++;
        return;
      case '\n':
        this.endPipeline(';');
        this.pos++;
        this.readHeredocBodies();
        return;
      case '#':
        if (this.word === null) {
          const newline = src.indexOf('\n', this.pos);
          this.pos = newline === -1 ? src.length : newline;
          return;
        }
        break;
      case "'":
        this.readSingleQuoted();
        return;
      case '"':
        this.pos++;
        this.readDoubleQuoted();
        return;
      case '\\':
        this.readEscape();
        return;
      case '$':
        this.readDollar();
        return;
      case '`':
        this.append(`\`${this.readNested(1, '`')}\``);
        return;
      case '<':
      case '>':
        this.readAngle(c);
        return;
      case '&':
        this.readAmpersand();
        return;
      case '|':
        if (src.startsWith('||', this.pos)) {
          this.endPipeline('||');
          this.pos += 2;
        } else {
          this.endCommand();
          this.pos += src.charAt(this.pos + 1) === '&' ? 2 : 1;
        }
        return;
      case ';':
        this.endPipeline(';');
        this.pos += src.startsWith(';;', this.pos) || src.startsWith(';&', this.pos) ? 2 : 1;
        return;
      case '(':
        this.readParen();
        return;
      case ')':
        // A stray closer (a `case` pattern, unbalanced input) separates commands.
        this.endPipeline(';');
        this.pos++;
        return;
      case '{':
        if (this.word === null && /\s/.test(src.charAt(this.pos + 1))) {
          this.endWord();
          this.command.words.push(`{${this.readNested(1, '}')}}`);
          return;
        }
        break;
      default:
        break;
    }
    // Plain characters: take the whole run up to the next special one.
    UNQUOTED_SPECIAL.lastIndex = this.pos + 1;
    const next = UNQUOTED_SPECIAL.exec(src);
    const stop = next === null ? src.length : next.index;
    this.append(src.slice(this.pos, stop));
    this.pos = stop;
  }

  private atCommandStart(): boolean {
    return this.word === null && this.command.words.length === 0 && this.redirectOp === null;
  }

  private append(text: string): void {
    this.word = (this.word ?? '') + text;
  }

  private endWord(): void {
    if (this.word === null) return;
    if (this.redirectOp !== null) {
      const op = this.redirectOp;
      const redirect: Redirect = { op, target: this.word };
      this.command.redirects.push(redirect);
      if (!op.endsWith('<<<') && (op.endsWith('<<') || op.endsWith('<<-'))) {
        this.heredocs.push({ redirect, stripTabs: op.endsWith('-'), expand: !this.wordQuoted });
      }
      this.redirectOp = null;
    } else {
      this.command.words.push(this.word);
    }
    this.word = null;
    this.wordQuoted = false;
  }

  private endCommand(): void {
    this.endWord();
    if (this.command.words.length > 0 || this.command.redirects.length > 0) this.stages.push(this.command);
    this.command = { words: [], redirects: [] };
    this.redirectOp = null;
  }

  private endPipeline(separator: string): void {
    this.endCommand();
    if (this.stages.length > 0) this.pipelines.push({ stages: this.stages, separator });
    this.stages = [];
  }

  private readSingleQuoted(): void {
    const close = this.src.indexOf("'", this.pos + 1);
    const stop = close === -1 ? this.src.length : close;
    this.append(this.src.slice(this.pos + 1, stop));
    this.wordQuoted = true;
    this.pos = Math.min(stop + 1, this.src.length);
  }

  /** Reads after an opening `"`: escapes, `$(...)` and backticks still work inside. */
  private readDoubleQuoted(): void {
    const { src } = this;
    this.wordQuoted = true;
    this.append('');
    while (this.pos < src.length) {
      DOUBLE_QUOTED_SPECIAL.lastIndex = this.pos;
      const next = DOUBLE_QUOTED_SPECIAL.exec(src);
      const stop = next === null ? src.length : next.index;
      this.append(src.slice(this.pos, stop));
      this.pos = stop;
      if (next === null) return;
      const c = next[0];
      if (c === '"') {
        this.pos++;
        return;
      }
      if (c === '\\') {
        const escaped = src.charAt(this.pos + 1);
        if (escaped !== '' && '"\\$`'.includes(escaped)) this.append(escaped);
        else if (escaped !== '\n') this.append(`\\${escaped}`);
        this.pos += 2;
      } else if (c === '`') {
        this.append(`\`${this.readNested(1, '`')}\``);
      } else if (src.charAt(this.pos + 1) === '(' || src.charAt(this.pos + 1) === '{') {
        this.readDollar();
      } else {
        this.append('$');
        this.pos++;
      }
    }
  }

  private readEscape(): void {
    const escaped = this.src.charAt(this.pos + 1);
    if (escaped !== '\n') {
      this.append(escaped);
      // Like quotes: `\EOF` stops heredoc expansion, `\2>` is not an fd.
      this.wordQuoted = true;
    }
    this.pos += 2;
  }

  private readDollar(): void {
    const { src } = this;
    const next = src.charAt(this.pos + 1);
    if (next === "'") {
      this.readAnsiC();
    } else if (next === '"') {
      this.pos += 2;
      this.readDoubleQuoted();
    } else if (next === '(' && src.charAt(this.pos + 2) === '(') {
      // Arithmetic: not a command, but `$(...)` inside it still runs.
      const end = skipBalanced(src, this.pos + 2, ')');
      const raw = src.slice(this.pos, end);
      this.append(raw);
      this.addSubstitutionsIn(raw.slice(3));
      this.pos = end;
    } else if (next === '(') {
      this.append(`$(${this.readNested(2, ')')})`);
    } else if (next === '{') {
      // `${x:-$(cmd)}` runs cmd.
      const end = skipBalanced(src, this.pos + 2, '}');
      const raw = src.slice(this.pos, end);
      this.append(raw);
      this.addSubstitutionsIn(raw.slice(2));
      this.pos = end;
    } else {
      this.append('$');
      this.pos++;
    }
  }

  /** `$'...'`: decoded, because `$'\x72\x6d'` is another way to spell `rm`. */
  private readAnsiC(): void {
    const { src } = this;
    let j = this.pos + 2;
    let decoded = '';
    while (j < src.length && src.charAt(j) !== "'") {
      const c = src.charAt(j);
      if (c !== '\\') {
        decoded += c;
        j++;
        continue;
      }
      const { text, length } = decodeAnsiCEscape(src, j + 1);
      decoded += text;
      j += 1 + length;
    }
    this.append(this.state.limits.decoded(decoded));
    this.wordQuoted = true;
    this.pos = Math.min(j + 1, src.length);
  }

  private readAngle(c: string): void {
    const { src } = this;
    if (src.charAt(this.pos + 1) === '(') {
      // Process substitution: a command whose output is read as a file.
      this.append(`${c}(${this.readNested(2, ')')})`);
      return;
    }
    let fd = '';
    if (this.word !== null && !this.wordQuoted && DIGITS.test(this.word)) {
      fd = this.word;
      this.word = null;
      this.wordQuoted = false;
    } else {
      this.endWord();
    }
    const op = redirectOperatorAt(src, this.pos);
    this.pos += op.length;
    this.redirectOp = fd + op;
  }

  private readAmpersand(): void {
    const { src } = this;
    if (src.startsWith('&&', this.pos)) {
      this.endPipeline('&&');
      this.pos += 2;
    } else if (src.charAt(this.pos + 1) === '>') {
      this.endWord();
      const op = src.startsWith('&>>', this.pos) ? '&>>' : '&>';
      this.pos += op.length;
      this.redirectOp = op;
    } else {
      this.endPipeline('&');
      this.pos++;
    }
  }

  private readParen(): void {
    const { src } = this;
    if (src.charAt(this.pos + 1) === ')') {
      // `name()`: a function definition; its body follows as a group and is
      // inspected like any other command (defining `f(){ rm -rf /; }` is
      // reason enough to stop).
      this.endPipeline(';');
      this.pos += 2;
      return;
    }
    if (src.charAt(this.pos + 1) === '(') {
      // Arithmetic command `(( ... ))`; the second `(` is counted as nested.
      const end = skipBalanced(src, this.pos + 1, ')');
      this.addSubstitutionsIn(src.slice(this.pos + 2, end));
      this.endWord();
      this.pos = end;
      return;
    }
    this.endWord();
    this.command.words.push(`(${this.readNested(1, ')')})`);
  }

  /** Parses a nested script starting `openLength` characters on; returns its raw text. */
  private readNested(openLength: number, closer: Closer): string {
    const contentStart = this.pos + openLength;
    if (this.depth + 1 > this.state.limits.maxDepth) {
      this.state.incomplete = true;
      const end = skipBalanced(this.src, contentStart, closer);
      this.pos = end;
      return preview(this.src.slice(contentStart, Math.max(contentStart, end - 1)), this.state.limits);
    }
    const { script, end } = new ScriptParser(this.src, contentStart, closer, this.depth + 1, this.state).parse();
    this.nested.push(script);
    this.pos = end;
    return preview(script.source, this.state.limits);
  }

  private addSubstitutionsIn(text: string): void {
    for (const script of parseSubstitutions(text, this.depth, this.state)) this.nested.push(script);
  }

  /** After a newline: the bodies of heredocs opened on the line just ended. */
  private readHeredocBodies(): void {
    for (const heredoc of this.heredocs) {
      const { stripTabs, redirect } = heredoc;
      const read = readHeredocBody(this.src, this.pos, { delimiter: redirect.target, stripTabs, ignoreCarriageReturn: true });
      this.pos = read.end;
      const body = read.lines.join('\n');
      redirect.body = body;
      if (heredoc.expand) this.addSubstitutionsIn(body);
    }
    this.heredocs.length = 0;
  }
}

function preview(text: string, { previewChars }: ParseLimits): string {
  return text.length <= previewChars ? text : `${text.slice(0, previewChars)}…`;
}

/** Scripts inside `$(...)` and backticks in text that is otherwise data. */
function parseSubstitutions(text: string, depth: number, state: ParseContext): Script[] {
  const scripts: Script[] = [];
  let j = 0;
  while (j < text.length) {
    const c = text.charAt(j);
    if (c === '\\') {
      j += 2;
      continue;
    }
    let openLength = 0;
    let closer: Closer | null = null;
    if (c === '$' && text.charAt(j + 1) === '(' && text.charAt(j + 2) !== '(') {
      openLength = 2;
      closer = ')';
    } else if (c === '`') {
      openLength = 1;
      closer = '`';
    }
    if (closer === null) {
      j++;
      continue;
    }
    if (depth + 1 > state.limits.maxDepth) {
      state.incomplete = true;
      return scripts;
    }
    const { script, end } = new ScriptParser(text, j + openLength, closer, depth + 1, state).parse();
    scripts.push(script);
    j = end;
  }
  return scripts;
}

const SIMPLE_ESCAPES: Readonly<Record<string, string>> = {
  a: '\u0007',
  b: '\b',
  e: '\u001b',
  f: '\f',
  n: '\n',
  r: '\r',
  t: '\t',
  v: '\v',
  '\\': '\\',
  "'": "'",
  '"': '"',
  '?': '?',
};

/** One escape of a `$'...'` string, `at` being the index after the backslash. */
function decodeAnsiCEscape(src: string, at: number): { text: string; length: number } {
  const c = src.charAt(at);
  const simple = SIMPLE_ESCAPES[c];
  if (simple !== undefined) return { text: simple, length: 1 };
  const numeric = (digits: RegExp, radix: number, prefix: number): { text: string; length: number } | null => {
    digits.lastIndex = at + prefix;
    const match = digits.exec(src);
    if (match === null) return null;
    const code = Number.parseInt(match[0], radix);
    return { text: code <= 0x10ffff ? String.fromCodePoint(code) : '', length: prefix + match[0].length };
  };
  const decoded =
    c === 'x'
      ? numeric(/[0-9a-f]{1,2}/y, 16, 1)
      : c === 'u'
        ? numeric(/[0-9a-f]{1,4}/y, 16, 1)
        : c >= '0' && c <= '7'
          ? numeric(/[0-7]{1,3}/y, 8, 0)
          : c === 'c' && src.length > at + 1
            ? { text: String.fromCharCode(src.charCodeAt(at + 1) & 0x1f), length: 2 }
            : null;
  return decoded ?? { text: `\\${c}`, length: c === '' ? 0 : 1 };
}
