/**
 * Pure checks and rewrites the terminal tool applies to a command before it
 * reaches the executor: the foreground guardrail, workdir validation, the
 * `A && B &` rewrite, exit-code explanations and the foreground timeout cap.
 *
 * They share a small, quote-aware bash lexer. It does not execute or expand
 * anything; it only knows enough shell grammar to tell a background `&` from
 * `&&`, `2>&1` or `&>`, to skip quoted text, comments and heredoc bodies, and
 * to find the command word of each simple command.
 */

// ---------------------------------------------------------------------------
// Lexer
// ---------------------------------------------------------------------------

type OperatorText =
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

interface WordToken {
  readonly kind: 'word';
  /** The word after quote removal (substitutions inside quotes stay as written). */
  readonly value: string;
  readonly start: number;
  readonly end: number;
  /** The file name (or heredoc delimiter) of a redirection, never a command word. */
  readonly redirectTarget: boolean;
}

interface OperatorToken {
  readonly kind: 'op';
  readonly op: OperatorText;
  readonly start: number;
  readonly end: number;
}

interface RedirectToken {
  readonly kind: 'redirect';
  readonly start: number;
  readonly end: number;
}

type ShellToken = WordToken | OperatorToken | RedirectToken;

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
        this.pos = this.skipBalanced(this.pos + 1, '(', ')');
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
    const src = this.src;
    const rest = src.slice(at, at + 3);
    const prefix = at - this.pos;
    if (prefix === 0 && (rest.startsWith('<(') || rest.startsWith('>('))) {
      this.pushOp('$(', 2);
    } else if (rest === '<<<') {
      this.pushRedirect(prefix + 3, 'redirect');
    } else if (rest === '<<-') {
      this.pushRedirect(prefix + 3, 'heredoc-tabs');
    } else if (rest.startsWith('<<')) {
      this.pushRedirect(prefix + 2, 'heredoc');
    } else if (/^(?:>>|>&|>\||<&|<>)/.test(rest)) {
      this.pushRedirect(prefix + 2, 'redirect');
    } else {
      this.pushRedirect(prefix + 1, 'redirect');
    }
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
          const end = this.skipBalanced(this.pos + 1, '(', ')');
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
        const end = this.skipAnsiCString(this.pos + 2);
        value += src.slice(this.pos + 2, Math.max(this.pos + 2, end - 1));
        this.pos = end;
      } else if (c === '"') {
        const end = this.skipDoubleQuoted(this.pos + 1);
        value += src.slice(this.pos + 1, Math.max(this.pos + 1, end - 1)).replace(/\\([$`"\\\n])/g, '$1');
        this.pos = end;
      } else if (c === '`') {
        // Backquoted text is treated like quoted text: kept, never analysed.
        const end = this.skipBackquoted(this.pos + 1);
        value += src.slice(this.pos, end);
        this.pos = end;
      } else if (c === '\\') {
        if (next !== undefined && next !== '\n') value += next;
        this.pos = Math.min(src.length, this.pos + 2);
      } else if (c === '$' && next === '(' && src[this.pos + 2] === '(') {
        // Arithmetic `$(( a & b ))`: a bitwise `&`, not a background operator.
        const end = this.skipBalanced(this.pos + 2, '(', ')');
        value += src.slice(this.pos, end);
        this.pos = end;
      } else if (c === '$' && next === '(') {
        // Command substitution: end the word here and let the main loop lex
        // the inner commands, so a server hidden in `$(...)` is still found.
        break;
      } else if (c === '$' && next === '{') {
        const end = this.skipBalanced(this.pos + 2, '{', '}');
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
    const src = this.src;
    for (const heredoc of this.pendingHeredocs) {
      while (this.pos < src.length) {
        const newline = src.indexOf('\n', this.pos);
        const lineEnd = newline === -1 ? src.length : newline;
        let line = src.slice(this.pos, lineEnd);
        if (heredoc.stripTabs) line = line.replace(/^\t+/, '');
        this.pos = newline === -1 ? src.length : newline + 1;
        if (line === heredoc.delimiter) break;
      }
    }
    this.pendingHeredocs.length = 0;
  }

  /** Returns the index just past the closing `"`. */
  private skipDoubleQuoted(from: number): number {
    const src = this.src;
    let i = from;
    while (i < src.length) {
      const c = src[i];
      if (c === '\\') i += 2;
      else if (c === '"') return i + 1;
      else if (c === '`') i = this.skipBackquoted(i + 1);
      else if (c === '$' && src[i + 1] === '(') i = this.skipBalanced(i + 2, '(', ')');
      else i += 1;
    }
    return src.length;
  }

  private skipBackquoted(from: number): number {
    const src = this.src;
    let i = from;
    while (i < src.length) {
      const c = src[i];
      if (c === '\\') i += 2;
      else if (c === '`') return i + 1;
      else i += 1;
    }
    return src.length;
  }

  private skipAnsiCString(from: number): number {
    const src = this.src;
    let i = from;
    while (i < src.length) {
      const c = src[i];
      if (c === '\\') i += 2;
      else if (c === "'") return i + 1;
      else i += 1;
    }
    return src.length;
  }

  /**
   * `from` is just after an opening bracket; returns the index past its
   * matching close, skipping quoted text on the way.
   */
  private skipBalanced(from: number, open: string, close: string): number {
    const src = this.src;
    let depth = 1;
    let i = from;
    while (i < src.length) {
      const c = src[i];
      if (c === '\\') {
        i += 2;
      } else if (c === "'") {
        const end = src.indexOf("'", i + 1);
        i = end === -1 ? src.length : end + 1;
      } else if (c === '"') {
        i = this.skipDoubleQuoted(i + 1);
      } else if (c === '`') {
        i = this.skipBackquoted(i + 1);
      } else if (c === open) {
        depth += 1;
        i += 1;
      } else if (c === close) {
        depth -= 1;
        i += 1;
        if (depth === 0) return i;
      } else {
        i += 1;
      }
    }
    return src.length;
  }
}

function lexShell(command: string): ShellToken[] {
  return new ShellLexer(command).lex();
}

// ---------------------------------------------------------------------------
// Simple commands and their command words
// ---------------------------------------------------------------------------

interface SimpleCommand {
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
function splitCommands(tokens: readonly ShellToken[]): SimpleCommand[] {
  const commands: SimpleCommand[] = [];
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

/** Words that may precede the command word without being the command. */
const RESERVED_WORDS = new Set([
  '!', '{', '}', 'then', 'do', 'else', 'elif', 'if', 'while', 'until', 'fi', 'done', 'esac',
]);

const ASSIGNMENT = /^[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=/;

/**
 * Commands that run their arguments as another command, with the options
 * of each that take a separate value (so the value is not mistaken for the
 * command word).
 */
const PREFIX_COMMANDS: ReadonlyMap<string, ReadonlySet<string>> = new Map([
  ['sudo', new Set(['-u', '-g', '-h', '-p', '-C', '-D', '-r', '-t', '-U', '-T', '-R'])],
  ['doas', new Set(['-u', '-C'])],
  ['env', new Set(['-u', '-C', '-S', '--unset', '--chdir', '--split-string'])],
  ['nice', new Set(['-n', '--adjustment'])],
  ['stdbuf', new Set(['-i', '-o', '-e'])],
  ['exec', new Set(['-a'])],
  ['builtin', new Set<string>()],
  ['command', new Set<string>()],
  ['time', new Set(['-f', '-o'])],
  ['npx', new Set(['-p', '--package', '-c', '--call'])],
  ['pnpx', new Set<string>()],
  ['bunx', new Set(['-p', '--package'])],
]);

/** `timeout` bounds what it runs, so a server under it is not a hazard. */
const TIMEOUT_OPTIONS_WITH_VALUE = new Set(['-s', '-k', '--signal', '--kill-after']);

/** Tool launchers whose subcommand runs another program: `uv run uvicorn ...`. */
const LAUNCHER_SUBCOMMANDS: ReadonlyMap<string, string> = new Map([
  ['bundle', 'exec'],
  ['poetry', 'run'],
  ['uv', 'run'],
  ['pipenv', 'run'],
  ['pdm', 'run'],
  ['hatch', 'run'],
]);

interface ResolvedCommand {
  /** Base name of the command word (`/usr/bin/grep` → `grep`). */
  readonly name: string;
  readonly args: readonly string[];
  /** Preceded by `!`, which inverts the exit status. */
  readonly negated: boolean;
  /** Run under `timeout`, so it cannot run forever. */
  readonly bounded: boolean;
}

function baseName(word: string): string {
  const slash = word.lastIndexOf('/');
  return slash === -1 ? word : word.slice(slash + 1);
}

/** Index of the first word after `start` that is not an option (or an option's value). */
function skipOptions(words: readonly string[], start: number, withValue: ReadonlySet<string>): number {
  let i = start;
  while (i < words.length) {
    const word = words[i] as string;
    if (word === '--') return i + 1;
    if (!word.startsWith('-') || word === '-') return i;
    i += withValue.has(word) ? 2 : 1;
  }
  return i;
}

/** Finds the program a simple command actually runs, looking through sudo, env, assignments and the like. */
function resolveCommand(words: readonly string[]): ResolvedCommand | null {
  let negated = false;
  let bounded = false;
  let i = 0;
  while (i < words.length) {
    const word = words[i] as string;
    if (RESERVED_WORDS.has(word)) {
      if (word === '!') negated = !negated;
      i += 1;
      continue;
    }
    if (ASSIGNMENT.test(word)) {
      i += 1;
      continue;
    }
    const name = baseName(word);
    const prefixOptions = PREFIX_COMMANDS.get(name);
    if (prefixOptions) {
      // `command -v vite` only looks a program up; it does not run it.
      if (name === 'command' && /^-[a-zA-Z]*[vV]/.test(words[i + 1] ?? '')) return null;
      i = skipOptions(words, i + 1, prefixOptions);
      continue;
    }
    if (name === 'timeout') {
      bounded = true;
      i = skipOptions(words, i + 1, TIMEOUT_OPTIONS_WITH_VALUE) + 1;
      continue;
    }
    const launcherSubcommand = LAUNCHER_SUBCOMMANDS.get(name);
    if (launcherSubcommand !== undefined && words[i + 1] === launcherSubcommand) {
      i = skipOptions(words, i + 2, new Set());
      continue;
    }
    return { name, args: words.slice(i + 1), negated, bounded };
  }
  return null;
}

function positionals(args: readonly string[]): string[] {
  return args.filter((arg) => !arg.startsWith('-'));
}

/** True for `-f`, `-nf`, `-F` style short-flag clusters containing one of `letters`. */
function hasShortFlag(args: readonly string[], letters: string): boolean {
  return args.some((arg) => /^-[A-Za-z0-9]+$/.test(arg) && [...letters].some((l) => arg.includes(l)));
}

function hasLongFlag(args: readonly string[], ...flags: string[]): boolean {
  return args.some((arg) => flags.some((flag) => arg === flag || arg.startsWith(`${flag}=`)));
}

// ---------------------------------------------------------------------------
// Foreground guardrail
// ---------------------------------------------------------------------------

/** Commands whose only purpose is to detach a process from the caller. */
const DETACHERS = new Set(['nohup', 'disown', 'setsid']);

/** package.json scripts that by convention serve or watch until stopped. */
const LONG_RUNNING_SCRIPTS = ['dev', 'start', 'serve', 'watch', 'preview'];

function isLongRunningScript(script: string | undefined): script is string {
  return (
    script !== undefined &&
    LONG_RUNNING_SCRIPTS.some((name) => script === name || script.startsWith(`${name}:`))
  );
}

const PYTHON = /^python(?:\d+(?:\.\d+)?)?$/;

/** Python modules that start a server when run with `-m`. */
const PYTHON_SERVER_MODULES = new Set([
  'http.server', 'SimpleHTTPServer', 'uvicorn', 'gunicorn', 'hypercorn', 'daphne',
]);

/** Servers and followers that never exit on their own, whatever their arguments. */
const ALWAYS_LONG_RUNNING = new Set([
  'nodemon',
  'uvicorn',
  'gunicorn',
  'hypercorn',
  'daphne',
  'http-server',
  'live-server',
  'webpack-dev-server',
  'watch',
]);

/** First-positional subcommands that start a server: `next dev`, `rails s`, ... */
const SERVER_SUBCOMMANDS: ReadonlyMap<string, ReadonlySet<string>> = new Map([
  ['next', new Set(['dev', 'start'])],
  ['flask', new Set(['run'])],
  ['rails', new Set(['server', 's'])],
  ['jupyter', new Set(['notebook', 'lab', 'server'])],
  ['webpack', new Set(['serve'])],
  ['ng', new Set(['serve'])],
  ['hugo', new Set(['server', 'serve'])],
  ['mkdocs', new Set(['serve'])],
  ['jekyll', new Set(['serve', 's'])],
]);

/**
 * Returns a short label (`npm run dev`, `tail -f`) when the resolved command
 * runs until stopped, else null.
 */
function longRunningLabel({ name, args }: ResolvedCommand): string | null {
  const positional = positionals(args);
  const first = positional[0];
  switch (name) {
    case 'npm':
      if (first === 'start') return 'npm start';
      if ((first === 'run' || first === 'run-script') && isLongRunningScript(positional[1])) {
        return `npm run ${positional[1]}`;
      }
      return null;
    case 'yarn':
    case 'pnpm':
    case 'bun':
      if (isLongRunningScript(first)) return `${name} ${first}`;
      if (first === 'run' && isLongRunningScript(positional[1])) return `${name} run ${positional[1]}`;
      return null;
    case 'vite':
      // Bare `vite`, `vite dev`, `vite serve` and `vite preview` all serve; only builds finish.
      return positional.includes('build') || positional.includes('optimize') ? null : 'vite';
    case 'php':
      return args.includes('-S') ? 'php -S' : null;
    case 'docker':
      if (args.includes('compose')) return composeLabel('docker compose', args.slice(args.indexOf('compose') + 1));
      if (first === 'logs' && (hasShortFlag(args, 'f') || hasLongFlag(args, '--follow'))) return 'docker logs -f';
      return null;
    case 'docker-compose':
      return composeLabel('docker-compose', args);
    case 'kubectl':
      if (first === 'port-forward') return 'kubectl port-forward';
      if (first === 'logs' && (hasShortFlag(args, 'f') || hasLongFlag(args, '--follow'))) return 'kubectl logs -f';
      return null;
    case 'tail':
      return hasShortFlag(args, 'fF') || hasLongFlag(args, '--follow') ? 'tail -f' : null;
    case 'journalctl':
      return hasShortFlag(args, 'f') || hasLongFlag(args, '--follow') ? 'journalctl -f' : null;
    case 'tsc':
      return hasLongFlag(args, '--watch') || args.includes('-w') ? 'tsc --watch' : null;
    case 'jest':
      return hasLongFlag(args, '--watch', '--watchAll') ? 'jest --watch' : null;
    case 'sleep':
      return first === 'infinity' || first === 'inf' ? 'sleep infinity' : null;
    default:
      break;
  }
  if (PYTHON.test(name)) {
    const moduleIndex = args.indexOf('-m');
    const module = moduleIndex === -1 ? undefined : args[moduleIndex + 1];
    if (module !== undefined && PYTHON_SERVER_MODULES.has(module)) return `${name} -m ${module}`;
    if (module === 'flask' && positionals(args.slice(moduleIndex + 2))[0] === 'run') return `${name} -m flask run`;
    if (first !== undefined && baseName(first) === 'manage.py' && positional[1] === 'runserver') {
      return 'manage.py runserver';
    }
    return null;
  }
  if (ALWAYS_LONG_RUNNING.has(name)) return name;
  const serverSubcommands = SERVER_SUBCOMMANDS.get(name);
  if (first !== undefined && serverSubcommands?.has(first)) return `${name} ${first}`;
  return null;
}

/** `compose up` stays attached unless detached (`-d`) or told to return once healthy (`--wait`). */
function composeLabel(prefix: string, args: readonly string[]): string | null {
  if (args.includes('logs') && (hasShortFlag(args, 'f') || hasLongFlag(args, '--follow'))) return `${prefix} logs -f`;
  if (!args.includes('up')) return null;
  if (hasShortFlag(args, 'd') || hasLongFlag(args, '--detach', '--wait')) return null;
  return `${prefix} up`;
}

function isInformational(resolved: ResolvedCommand | null): boolean {
  return resolved !== null && (resolved.args.includes('--help') || resolved.args.includes('--version'));
}

// The three guidance texts are the reference tool's, word for word: agents
// trained on it recognise them and re-send the command the way they say.

/** For `nohup`, `disown` and `setsid`. */
export const SHELL_WRAPPER_GUIDANCE =
  'Foreground command uses shell-level background wrappers (nohup/disown/setsid). ' +
  'Re-send WITHOUT the wrapper as terminal(command="<cmd>", background=true, ' +
  'notify_on_complete=true) so Hermes tracks the process, then run readiness ' +
  'checks and tests in separate commands.';

/** For a background `&`. */
export const AMPERSAND_GUIDANCE =
  "Foreground command uses '&' backgrounding. Re-send WITHOUT the '&' as " +
  'terminal(command="<cmd>", background=true) — add notify_on_complete=true ' +
  'for bounded jobs — then run health checks and tests in follow-up terminal calls.';

/** For servers, watchers and followers. */
export const LONG_LIVED_GUIDANCE =
  'This foreground command appears to start a long-lived server/watch process. ' +
  'Run it with background=true, verify readiness (health endpoint/log signal), ' +
  'then execute tests in a separate command.';

/**
 * The foreground guardrail: returns guidance (the tool's `error` text) when a
 * foreground command would detach or never finish, or null when it may run.
 *
 * Refused: `nohup`, `disown`, `setsid`; a background `&` anywhere (but not
 * `&&`, `|&`, `2>&1`, `>&2`, `&>`); and servers, watchers and followers such
 * as `npm run dev`, `vite`, `uvicorn`, `python -m http.server`,
 * `docker compose up` (without `-d`), `tail -f` and `watch`. Quoted text,
 * backquotes, comments and heredoc bodies are not inspected. A command run
 * with `--help` or `--version` is exempt, as is a `&` that backgrounds one
 * (it exits at once), and so is a command run under `timeout`, which bounds it.
 *
 * When several apply, the answer is the first of wrapper, `&`, server, the
 * order in which the reference tool checks them.
 */
export function findForegroundHazard(command: string): string | null {
  const tokens = lexShell(command);
  let harmlessBackgrounds = 0;
  let wrapper = false;
  let longLived = false;
  for (const simple of splitCommands(tokens)) {
    const resolved = resolveCommand(simple.words);
    if (isInformational(resolved)) {
      if (simple.terminator === '&') harmlessBackgrounds += 1;
      continue;
    }
    if (resolved === null) continue;
    if (DETACHERS.has(resolved.name)) {
      wrapper = true;
      continue;
    }
    if (!resolved.bounded && longRunningLabel(resolved) !== null) longLived = true;
  }
  if (wrapper) return SHELL_WRAPPER_GUIDANCE;
  // Every `&` that ends a simple command yields one entry above; one after a
  // subshell's `)` yields none, so it is never excused.
  const backgrounds = tokens.filter((token) => token.kind === 'op' && token.op === '&').length;
  if (backgrounds > harmlessBackgrounds) return AMPERSAND_GUIDANCE;
  if (longLived) return LONG_LIVED_GUIDANCE;
  return null;
}

// ---------------------------------------------------------------------------
// Workdir
// ---------------------------------------------------------------------------

// An allowlist rather than a denylist, so shell metacharacters nobody thought
// of cannot slip through: letters and digits of any script (paths in CJK and
// other scripts are legitimate, as in the reference tool) plus path and drive
// separators and a little punctuation. Control characters, newline included,
// are never letters or digits, so they are always rejected.
const WORKDIR_PUNCTUATION = new Set([...'/\\:_-.~ +@=,']);
const LETTER_OR_DIGIT = /^[\p{L}\p{N}]$/u;

function isSafeWorkdirCharacter(ch: string): boolean {
  return WORKDIR_PUNCTUATION.has(ch) || LETTER_OR_DIGIT.test(ch);
}

/**
 * Renders one character the way Python's `repr()` does, because the
 * reference tool builds this message with it and agents see the same text:
 * `'$'`, but `"'"` for a single quote and `'\n'` or `'\x1b'` for invisible
 * characters.
 */
function pythonCharRepr(ch: string): string {
  if (ch === "'") return `"'"`;
  const named: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t', '\\': '\\\\' };
  const escape = named[ch];
  if (escape !== undefined) return `'${escape}'`;
  if (ch !== ' ' && /[\p{C}\p{Z}]/u.test(ch)) {
    const code = ch.codePointAt(0) ?? 0;
    const hex = code.toString(16);
    if (code <= 0xff) return `'\\x${hex.padStart(2, '0')}'`;
    if (code <= 0xffff) return `'\\u${hex.padStart(4, '0')}'`;
    return `'\\U${hex.padStart(8, '0')}'`;
  }
  return `'${ch}'`;
}

/**
 * Returns the `Blocked: ...` message naming the first character outside the
 * workdir allowlist, or null when the path is acceptable. An empty string
 * means "no workdir" and is accepted.
 */
export function validateWorkdir(workdir: string): string | null {
  for (const ch of workdir) {
    if (!isSafeWorkdirCharacter(ch)) {
      return (
        `Blocked: workdir contains disallowed character ${pythonCharRepr(ch)}. ` +
        'Use a simple filesystem path without shell metacharacters.'
      );
    }
  }
  return null;
}

// ---------------------------------------------------------------------------
// `A && B &` rewrite
// ---------------------------------------------------------------------------

/**
 * Rewrites a trailing `A && B &` to `A && { B & }`; any other command is
 * returned unchanged.
 *
 * Bash binds `&&` tighter than `&`, so `A && B &` backgrounds a subshell that
 * runs A, then B in its foreground, and waits for B. With a server as B that
 * subshell never exits and keeps the output pipe open. The brace group keeps
 * "B only if A succeeded" while backgrounding B alone. Only a top-level `&`
 * that ends the command and follows a top-level `&&` in the same statement
 * is rewritten; quoted text, comments, subshells and existing brace groups
 * are left alone, which also makes the rewrite idempotent.
 */
export function rewriteBackgroundChain(command: string): string {
  const tokens = lexShell(command);
  let lastSignificant = tokens.length - 1;
  while (lastSignificant >= 0) {
    const token = tokens[lastSignificant] as ShellToken;
    if (token.kind !== 'op' || token.op !== '\n') break;
    lastSignificant -= 1;
  }
  const ampersand = tokens[lastSignificant];
  if (ampersand?.kind !== 'op' || ampersand.op !== '&') return command;

  let depth = 0;
  let atCommandStart = true;
  let chainEnd = -1;
  let chainIsAnd = false;
  let previous: ShellToken | undefined;
  for (let i = 0; i < lastSignificant; i += 1) {
    const token = tokens[i] as ShellToken;
    const before = previous;
    previous = token;
    if (token.kind === 'word') {
      if (atCommandStart && !token.redirectTarget && token.value === '{') depth += 1;
      else if (atCommandStart && !token.redirectTarget && token.value === '}') depth = Math.max(0, depth - 1);
      else if (!token.redirectTarget) atCommandStart = RESERVED_WORDS.has(token.value);
      continue;
    }
    if (token.kind === 'redirect') continue;
    atCommandStart = true;
    if (token.op === '(' || token.op === '$(') {
      depth += 1;
    } else if (token.op === ')') {
      depth = Math.max(0, depth - 1);
      atCommandStart = false;
    } else if (depth === 0) {
      if (token.op === '&&' || token.op === '||') {
        chainEnd = token.end;
        chainIsAnd = token.op === '&&';
      } else if (token.op === '\n' && before?.kind === 'op' && ['&&', '||', '|', '|&'].includes(before.op)) {
        // A line break after `&&` or `|` continues the statement.
        previous = before;
      } else if (token.op !== '|' && token.op !== '|&') {
        // `;`, newline or an earlier `&` starts a new statement.
        chainEnd = -1;
      }
    }
  }
  if (depth !== 0 || chainEnd === -1 || !chainIsAnd) return command;
  const body = command.slice(chainEnd, ampersand.start).trim();
  if (body === '') return command;
  return `${command.slice(0, chainEnd)} { ${body} & }${command.slice(ampersand.end)}`;
}

// ---------------------------------------------------------------------------
// Exit-code meanings
// ---------------------------------------------------------------------------

// The texts are the reference tool's, so an agent reads the same note for the
// same outcome. Which command is judged is Berth's own (the command word of
// the line's last command, looking through sudo, env, assignments and `!`).

const NO_MATCHES = 'No matches found (not an error)';
const FILES_DIFFER = 'Files differ (expected, not an error)';
const CONDITION_FALSE = 'Condition evaluated to false (expected, not an error)';

/**
 * Informational non-zero exit codes per command. `zgrep`, `cmp` and `[[`
 * are Berth's additions, with the text of the command they behave like.
 */
const EXIT_CODE_MEANINGS: ReadonlyMap<string, ReadonlyMap<number, string>> = new Map([
  ...['grep', 'egrep', 'fgrep', 'zgrep', 'rg', 'ag', 'ack'].map(
    (name) => [name, new Map([[1, NO_MATCHES]])] as const,
  ),
  ...['diff', 'colordiff', 'cmp'].map((name) => [name, new Map([[1, FILES_DIFFER]])] as const),
  ...['test', '[', '[['].map((name) => [name, new Map([[1, CONDITION_FALSE]])] as const),
  ['find', new Map([[1, 'Some directories were inaccessible (partial results may still be valid)']])],
  [
    'curl',
    new Map([
      [6, 'Could not resolve host'],
      [7, 'Failed to connect to host'],
      [22, 'HTTP response code indicated error (e.g. 404, 500)'],
      [28, 'Operation timed out'],
    ]),
  ],
  ['git', new Map([[1, "Non-zero exit (often normal — e.g. 'git diff' returns 1 when files differ)"]])],
]);

/**
 * Notes for deaths by signal, by signal number. Curated, so an ordinary exit
 * code is not mislabelled; SIGINT (130) is the interrupt path's.
 */
const SIGNAL_EXIT_NOTES: ReadonlyMap<number, string> = new Map([
  [3, 'SIGQUIT (quit from keyboard)'],
  [4, 'SIGILL (illegal instruction — corrupt binary or wrong architecture)'],
  [6, 'SIGABRT (abort — assertion failure, fatal runtime error, or glibc abort)'],
  [7, 'SIGBUS (bus error — misaligned or unmapped memory access)'],
  [8, 'SIGFPE (fatal arithmetic error, e.g. integer division by zero)'],
  [9, 'SIGKILL — often the kernel OOM killer on memory exhaustion, or an explicit kill -9'],
  [11, 'SIGSEGV (segmentation fault — the program crashed)'],
  [13, 'SIGPIPE (wrote to a closed pipe — e.g. output piped to a reader that exited)'],
  [15, 'SIGTERM (terminated — kill/timeout or shutdown requested it to stop)'],
  [24, 'SIGXCPU (CPU time limit exceeded)'],
  [25, 'SIGXFSZ (file size limit exceeded)'],
]);

/** Linux signal names, for a negative exit code whose signal has no note. */
const SIGNAL_NAMES = [
  '', 'SIGHUP', 'SIGINT', 'SIGQUIT', 'SIGILL', 'SIGTRAP', 'SIGABRT', 'SIGBUS', 'SIGFPE', 'SIGKILL', 'SIGUSR1',
  'SIGSEGV', 'SIGUSR2', 'SIGPIPE', 'SIGALRM', 'SIGTERM', 'SIGSTKFLT', 'SIGCHLD', 'SIGCONT', 'SIGSTOP', 'SIGTSTP',
  'SIGTTIN', 'SIGTTOU', 'SIGURG', 'SIGXCPU', 'SIGXFSZ', 'SIGVTALRM', 'SIGPROF', 'SIGWINCH', 'SIGIO', 'SIGPWR',
  'SIGSYS',
];

function signalName(signum: number): string {
  if (signum === 34) return 'SIGRTMIN';
  if (signum === 64) return 'SIGRTMAX';
  return SIGNAL_NAMES[signum] || `signal ${signum}`;
}

/**
 * A negative code is a definite death by signal (how a process killed by a
 * signal is reported); 128+N is the shell's encoding, which a program can
 * also exit with on its own, so that note says "usually".
 */
function signalExitMeaning(exitCode: number): string | undefined {
  if (exitCode < 0) {
    const signum = -exitCode;
    if (signum === 2) return undefined;
    const note = SIGNAL_EXIT_NOTES.get(signum);
    if (note !== undefined) return `Command terminated by signal ${signum}: ${note}`;
    return `Command terminated by ${signalName(signum)} (signal ${signum})`;
  }
  const note = exitCode > 128 ? SIGNAL_EXIT_NOTES.get(exitCode - 128) : undefined;
  if (note === undefined) return undefined;
  return `Exit code ${exitCode} usually means the command was terminated by signal ${exitCode - 128}: ${note}`;
}

/**
 * Explains a non-zero exit code that is a normal answer rather than a
 * failure (grep's 1 is "no matches", 137 usually a SIGKILL), judged by the
 * command word of the line's last command (looking through `sudo`, `env` and
 * variable assignments). Returns undefined when there is nothing useful to say.
 */
export function exitCodeMeaning(command: string, exitCode: number): string | undefined {
  if (exitCode === 0) return undefined;
  const signalNote = signalExitMeaning(exitCode);
  if (signalNote !== undefined) return signalNote;
  const commands = splitCommands(lexShell(command)).filter((simple) => !simple.substitution);
  let resolved: ResolvedCommand | null = null;
  for (let i = commands.length - 1; i >= 0 && resolved === null; i -= 1) {
    resolved = resolveCommand((commands[i] as SimpleCommand).words);
  }
  // `! cmd` inverts the status, so cmd's own table no longer applies.
  if (resolved === null || resolved.negated) return undefined;
  return EXIT_CODE_MEANINGS.get(resolved.name)?.get(exitCode);
}

// ---------------------------------------------------------------------------
// Foreground timeout
// ---------------------------------------------------------------------------

/** Returns the error for a foreground timeout above the configured cap, or null. */
export function validateForegroundTimeout(timeoutSec: number, maxSec: number): string | null {
  if (timeoutSec <= maxSec) return null;
  return (
    `Foreground timeout ${timeoutSec}s exceeds the maximum of ${maxSec}s. ` +
    'Use background=true with notify_on_complete=true for long-running commands.'
  );
}
