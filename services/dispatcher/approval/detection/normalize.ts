/**
 * Normalisation and shell-aware splitting of a command line, for the
 * dangerous-command detector (tool-runtime spec §5).
 *
 * Regexes alone cannot tell `rm -rf /` from `echo "rm -rf /"`, and every
 * spelling trick (`r\m`, `r''m`, `$IFS`, ANSI colours, full-width letters)
 * defeats a naive match. So detection looks at two things:
 *
 * - the whole command after {@link normalizeCommand} (the spec's steps), and
 * - "command-position" variants from a small shell lexer: every simple command
 *   with its quotes resolved the way the shell resolves them, the same command
 *   with leading wrappers (`sudo`, `env`, `nohup`, ...) removed, each
 *   redirection, each pipeline, each pair of consecutive commands, and the
 *   same again for the contents of `$(...)`, backticks, subshells, brace groups,
 *   process substitutions and the payloads of `sh -c`, `eval` and heredocs fed
 *   to a shell.
 *
 * The parsing itself is the common shell module's script view.
 */
import { ASSIGNMENT_WORD, commandName, skipOptions } from '../../../common/shell/scan.js';
import { ScriptParser, type ParseContext, type ParseLimits, type Redirect, type Script } from '../../../common/shell/script.js';

/** Options shared by the detection helpers. */
export interface NormalizeOptions {
  /**
   * Home directory of the user the command runs as (`/root`, `/home/alice`).
   * Occurrences are folded to `~` so rules about `~/.ssh` or `rm -rf ~` hold
   * whichever spelling the command uses.
   */
  readonly homeDir?: string;
}

/** Everything the detector needs to know about one command line. */
export interface CommandAnalysis {
  /** The whole command after {@link normalizeCommand}. */
  readonly normalized: string;
  /**
   * Variants whose first word is in command position: simple commands (quotes
   * resolved), wrapper-stripped forms, redirections (`> /etc/hosts`),
   * pipelines, pairs of consecutive pipelines (`a && b`) and all of these for
   * nested scripts and payloads. Lower-case, whitespace inside words folded to
   * single spaces.
   */
  readonly commands: readonly string[];
  /**
   * The text of every parsed script (top level, substitutions, payloads) with
   * the contents of quoted strings blanked, for rules that need the raw shape
   * of the code rather than words (the fork bomb).
   */
  readonly skeletons: readonly string[];
  /**
   * True when nesting went deeper than {@link MAX_NESTING_DEPTH} or
   * {@link MAX_PAYLOAD_DEPTH}; the deeper part was not inspected, so callers
   * must not treat the command as safe.
   */
  readonly incomplete: boolean;
}

/**
 * Deepest nesting (substitutions, subshells, groups, `-c` payloads) that is
 * parsed. Real commands stay far below; the cap bounds recursion and the
 * repeated copies of nested text on adversarial input.
 */
export const MAX_NESTING_DEPTH = 24;

/**
 * Intermediate wrapper-stripped forms kept per simple command (the fully
 * stripped form is always kept). Bounds the copies made for `sudo sudo ...`.
 */
const MAX_WRAPPER_FORMS = 8;

/**
 * How much of a nested script shows inside the word that contains it
 * (`$(curl ...)`, `<(...)`, `( ... )`). Rules only look at its start; the
 * nested script itself is inspected in full as a script of its own. Without
 * the cap every nesting level would copy everything below it.
 */
const NESTED_PREVIEW_CHARS = 256;

/**
 * Code-in-code levels (`bash -c "eval '...'"`) that are parsed. Each level is
 * parsed again from its text, so this bounds work on `eval eval eval ...`;
 * three levels is already unusual.
 */
export const MAX_PAYLOAD_DEPTH = 5;

/** Options a shell may take before `-c` that are looked at; more is not a real command. */
const MAX_SHELL_OPTIONS = 16;

// CSI (colours, cursor moves), OSC with a terminator (titles, hyperlinks),
// other two-byte escapes, a lone ESC, the 8-bit CSI, and NUL. An OSC without a
// terminator loses only its introducer: stripping to the end of the text would
// hide whatever follows it from the detector.
const ANSI_AND_NUL =
  /\u001b(?:\[[0-?]*[ -/]*[@-~]|\][^\u0007\u001b]*(?:\u0007|\u001b\\)|[@-_])?|\u009b[0-?]*[ -/]*[@-~]|\u0000/g;
const CONTINUATION = /\\\r?\n/g;
const HOME_VARIABLE = /\$\{HOME\}|\$HOME(?![A-Za-z0-9_])/g;
// Any expansion of IFS (`${IFS}`, `${IFS:0:1}`, `${IFS%?}`) is whitespace to
// the shell in practice, so `rm${IFS:0:1}-rf /` is `rm -rf /`.
const IFS_VARIABLE = /\$\{IFS(?:[:%#/^,][^}]*)?\}|\$IFS(?![A-Za-z0-9_])/g;
const LOWER_CASE_IFS_VARIABLE = /\$\{ifs(?:[:%#/^,][^}]*)?\}|\$ifs(?![a-z0-9_])/g;
// A Windows drive or UNC path word (`C:\Users\alice\.ssh`). Its backslashes are
// separators, not escapes, so they become `/` before escapes are dropped.
const WINDOWS_PATH = /(?<![\w\\])(?:[A-Za-z]:\\|\\\\[\w.$-]+\\)[^\s'"`;&|<>]*/g;
const BACKSLASH_ESCAPE = /\\([\s\S]?)/g;
const EMPTY_QUOTES = /''|""/g;

/**
 * Normalises a command for matching, as the spec lists: strip ANSI escapes and
 * NUL, Unicode NFKC, join backslash-newline continuations, fold the home
 * directory (and `$HOME`) to `~`, drop backslash escapes (`r\m` → `rm`) and
 * empty quote pairs (`r''m` → `rm`), `$IFS` to a space, lower-case.
 */
export function normalizeCommand(cmd: string, options: NormalizeOptions = {}): string {
  return dropQuotingNoise(prepareText(cmd, options));
}

/**
 * The normalised command followed by its command-position variants (see
 * {@link CommandAnalysis.commands}), without duplicates. The dangerous-pattern
 * table is matched against each of these.
 */
export function commandVariants(cmd: string, options: NormalizeOptions = {}): string[] {
  const analysis = analyzeCommand(cmd, options);
  return [...new Set([analysis.normalized, ...analysis.commands])];
}

/** Normalises and parses a command once, for both the hardline and the pattern checks. */
export function analyzeCommand(cmd: string, options: NormalizeOptions = {}): CommandAnalysis {
  const prepared = prepareText(cmd, options);
  const state: ParseContext = { limits: PARSE_LIMITS, incomplete: false };
  const sink: VariantSink = { commands: new Set(), skeletons: [], state };
  const { script } = new ScriptParser(prepared, 0, null, 0, state).parse();
  collectVariants(script, sink, 0);
  return {
    normalized: dropQuotingNoise(prepared),
    commands: [...sink.commands],
    skeletons: sink.skeletons,
    incomplete: state.incomplete,
  };
}

const PARSE_LIMITS: ParseLimits = {
  maxDepth: MAX_NESTING_DEPTH,
  previewChars: NESTED_PREVIEW_CHARS,
  // Decoding can produce escapes, full-width or upper-case letters again.
  decoded: (text) => text.replace(ANSI_AND_NUL, '').normalize('NFKC').toLowerCase(),
};

// Every normalisation step except the two that undo shell quoting: the lexer
// needs the quotes and backslashes to find word and command boundaries, and it
// removes them itself with shell semantics. `$IFS` is replaced here already
// so the lexer splits `rm$IFS-rf` into words.
function prepareText(cmd: string, options: NormalizeOptions): string {
  const text = cmd
    .replace(ANSI_AND_NUL, '')
    .normalize('NFKC')
    .replace(CONTINUATION, '')
    .replace(WINDOWS_PATH, (path) => path.replace(/\\/g, '/'));
  return foldHome(text, options.homeDir).replace(IFS_VARIABLE, ' ').toLowerCase();
}

// The quoting steps, then `$IFS` once more for spellings that only appear once
// quoting is gone (`$\IFS`, `$''IFS`); the text is lower-case by now.
function dropQuotingNoise(text: string): string {
  return text.replace(BACKSLASH_ESCAPE, '$1').replace(EMPTY_QUOTES, '').replace(LOWER_CASE_IFS_VARIABLE, ' ');
}

function foldHome(text: string, homeDir: string | undefined): string {
  const folded = text.replace(HOME_VARIABLE, '~');
  const home = homeDir?.replace(/\/+$/, '');
  // "/" as a home directory would fold every absolute path.
  if (home === undefined || !home.startsWith('/') || home.length < 2) return folded;
  const escaped = home.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  // The same user's Windows home (`C:/Users/alice`, backslashes already turned
  // to `/`), so `C:\Users\alice\.ssh` is `~/.ssh` as it is upstream.
  const user = (home.split('/').pop() ?? '').replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return folded
    .replace(new RegExp(`(?<![\\w.~/-])${escaped}(?![\\w.-])`, 'g'), '~')
    .replace(new RegExp(`(?<![\\w])[a-z]:/+users/+${user}(?![\\w.-])`, 'gi'), '~');
}

// ---------------------------------------------------------------------------
// Variants

interface VariantSink {
  readonly commands: Set<string>;
  readonly skeletons: string[];
  readonly state: ParseContext;
}

const SHELLS = new Set(['sh', 'bash', 'dash', 'zsh', 'ksh', 'mksh', 'ash', 'csh', 'tcsh', 'fish', 'yash', 'posh']);
const SHELL_C_FLAG = /^-[a-z]*c[a-z]*$/;
// Per wrapper: options that take the next word as their argument.
const SUDO_ARGUMENT_OPTIONS = new Set([
  '-u', '-g', '-p', '-c', '-d', '-r', '-t', '-h',
  '--user', '--group', '--prompt', '--close-from', '--chdir', '--role', '--type', '--other-user', '--host', '--chroot', '--command-timeout',
]);
const SUDO_ARGUMENT_LETTERS = 'ugpcdrth';
const ENV_ARGUMENT_OPTIONS = new Set(['-u', '-c', '-s', '--unset', '--chdir', '--split-string']);
const EXEC_ARGUMENT_OPTIONS = new Set(['-a']);
const NICE_ARGUMENT_OPTIONS = new Set(['-n', '--adjustment']);
const TIMEOUT_ARGUMENT_OPTIONS = new Set(['-s', '-k', '--signal', '--kill-after']);
const NO_ARGUMENT_OPTIONS = new Set<string>();
// Words that only introduce the command after them.
const KEYWORD_PREFIXES = new Set(['!', 'then', 'do', 'else', 'elif', 'if', 'while', 'until', 'nohup', 'builtin', 'busybox']);
// watch runs its arguments through `sh -c`; these options take a value.
const WATCH_ARGUMENT_OPTIONS = new Set(['-n', '--interval', '-q', '--equexit']);

function collectVariants(script: Script, sink: VariantSink, payloadDepth: number): void {
  sink.skeletons.push(blankQuotedText(script.source));
  const rendered: string[] = [];
  for (const pipeline of script.pipelines) {
    const finals: string[] = [];
    for (const stage of pipeline.stages) {
      const forms = wrapperForms(stage.words);
      for (const form of forms) add(sink, renderCommand(form, stage.redirects));
      for (const redirect of stage.redirects) add(sink, `${redirect.op} ${foldWhitespace(redirect.target)}`);
      const final = forms[forms.length - 1] ?? stage.words;
      finals.push(renderCommand(final, stage.redirects));
      for (const payload of payloads(final, stage.redirects, sink)) {
        if (script.depth + 1 > MAX_NESTING_DEPTH || payloadDepth + 1 > MAX_PAYLOAD_DEPTH) {
          sink.state.incomplete = true;
          continue;
        }
        const parsed = new ScriptParser(payload, 0, null, script.depth + 1, sink.state).parse();
        collectVariants(parsed.script, sink, payloadDepth + 1);
      }
    }
    const joined = finals.join(' | ');
    if (finals.length > 1) add(sink, joined);
    rendered.push(joined);
  }
  // Pairs, for rules about one command followed by another (`chmod +x f && ./f`).
  script.pipelines.forEach((pipeline, k) => {
    const next = rendered[k + 1];
    if (next !== undefined) add(sink, `${rendered[k] ?? ''} ${pipeline.separator} ${next}`);
  });
  for (const child of script.nested) collectVariants(child, sink, payloadDepth);
}

function add(sink: VariantSink, variant: string): void {
  const trimmed = variant.trim();
  if (trimmed !== '') sink.commands.add(trimmed);
}

function foldWhitespace(text: string): string {
  return text.replace(/\s+/g, ' ');
}

/**
 * Words joined by single spaces, plus the input redirections that feed code to
 * the command (heredocs, here-strings, `< <(...)`); output redirections are
 * variants of their own, so a target such as `/dev/null` is not mistaken for an
 * argument.
 */
function renderCommand(words: readonly string[], redirects: readonly Redirect[]): string {
  const parts = words.map(foldWhitespace);
  for (const { op, target } of redirects) {
    if (op.includes('<<') || (/^\d*<$/.test(op) && target.startsWith('<('))) parts.push(op, foldWhitespace(target));
  }
  return parts.join(' ');
}

/**
 * The words as given, then after each leading wrapper is removed. Past
 * {@link MAX_WRAPPER_FORMS} only the innermost `sudo`/`doas` form (its flags
 * are a rule of their own) and the fully stripped form are kept.
 */
function wrapperForms(words: readonly string[]): (readonly string[])[] {
  const forms: (readonly string[])[] = [words];
  const emitted = new Set([0]);
  let start = 0;
  let innermostSudo = -1;
  for (;;) {
    const next = skipWrapper(words, start);
    if (next === null || next >= words.length) break;
    start = next;
    const name = commandName(words[start]);
    if (name === 'sudo' || name === 'doas') innermostSudo = start;
    if (forms.length <= MAX_WRAPPER_FORMS) {
      forms.push(words.slice(start));
      emitted.add(start);
    }
  }
  for (const at of [innermostSudo, start]) {
    if (at >= 0 && !emitted.has(at)) {
      forms.push(words.slice(at));
      emitted.add(at);
    }
  }
  return forms;
}

/** Index of the first word after the wrapper at `start`, or null if there is none. */
function skipWrapper(words: readonly string[], start: number): number | null {
  const word = words[start];
  if (word === undefined) return null;
  if (ASSIGNMENT_WORD.test(word)) {
    let j = start;
    while (ASSIGNMENT_WORD.test(words[j] ?? '')) j++;
    return j;
  }
  const name = commandName(word);
  if (KEYWORD_PREFIXES.has(name)) return words[start + 1] === '--' ? start + 2 : start + 1;
  switch (name) {
    case 'sudo':
    case 'doas':
      return skipOptions(words, start + 1, SUDO_ARGUMENT_OPTIONS, SUDO_ARGUMENT_LETTERS);
    case 'env':
      return skipOptions(words, start + 1, ENV_ARGUMENT_OPTIONS);
    case 'time':
      return skipOptions(words, start + 1, NO_ARGUMENT_OPTIONS);
    case 'command': {
      // `command -v rm` asks where rm is; it runs nothing.
      const option = words[start + 1];
      if (option === '-v' || option === '-vp' || option === '-pv') return null;
      return skipOptions(words, start + 1, NO_ARGUMENT_OPTIONS);
    }
    case 'exec':
      return skipOptions(words, start + 1, EXEC_ARGUMENT_OPTIONS);
    case 'nice':
      return skipOptions(words, start + 1, NICE_ARGUMENT_OPTIONS);
    case 'timeout':
      // Options, then the duration.
      return skipOptions(words, start + 1, TIMEOUT_ARGUMENT_OPTIONS) + 1;
    default:
      return null;
  }
}

/**
 * Code a command runs that is not in its own words: `sh -c CODE` (anywhere in
 * the command, so `xargs sh -c` and `find -exec sh -c` count), `eval CODE`,
 * `watch CODE`, `su -c CODE`, `env -S CODE`, and heredocs or here-strings fed
 * to a shell. `ssh host CODE` is left out: it runs on another machine.
 */
function payloads(words: readonly string[], redirects: readonly Redirect[], sink: VariantSink): string[] {
  const found: string[] = [];
  const head = commandName(words[0]);
  if (head === 'eval' && words.length > 1) found.push(words.slice(1).join(' '));
  if (head === 'watch') {
    const start = skipOptions(words, 1, WATCH_ARGUMENT_OPTIONS);
    if (start < words.length) found.push(words.slice(start).join(' '));
  }
  if (head === 'su' || head === 'runuser' || head === 'env') {
    const flags = head === 'env' ? ['-s', '--split-string'] : ['-c', '--command'];
    words.forEach((word, k) => {
      const next = words[k + 1];
      if (k > 0 && flags.includes(word) && next !== undefined) found.push(next);
      for (const flag of flags) if (word.startsWith(`${flag}=`)) found.push(word.slice(flag.length + 1));
    });
  }
  words.forEach((word, k) => {
    if (!SHELLS.has(commandName(word))) return;
    const code = shellCommandString(words, k);
    if (code === undefined) return;
    found.push(code.text);
    // `xargs sh -c CODE` also becomes a variant starting at the shell, so the
    // shell rules see it; it ends at CODE to keep `sh -c sh -c ...` linear.
    if (k > 0) add(sink, renderCommand(words.slice(k, code.index + 1), []));
  });
  if (SHELLS.has(head)) {
    for (const { op, target, body } of redirects) {
      if (op.endsWith('<<<')) found.push(target);
      else if (op.includes('<<') && body !== undefined) found.push(body);
    }
  }
  return found;
}

/** The CODE of `sh [options] -c CODE` with the shell at `shellIndex`, and its index. */
function shellCommandString(words: readonly string[], shellIndex: number): { text: string; index: number } | undefined {
  const last = Math.min(words.length, shellIndex + 1 + MAX_SHELL_OPTIONS);
  for (let j = shellIndex + 1; j < last; j++) {
    const word = words[j] ?? '';
    if (SHELL_C_FLAG.test(word)) {
      const index = words[j + 1] === '--' ? j + 2 : j + 1;
      const text = words[index];
      return text === undefined ? undefined : { text, index };
    }
    if (word === '-o' || word === '+o') {
      j++;
      continue;
    }
    // The first operand is a script file: no -c.
    if (!word.startsWith('-') && !word.startsWith('+')) return undefined;
  }
  return undefined;
}

/** The text with the contents of quoted strings removed (`'...'` → `''`). */
function blankQuotedText(text: string): string {
  const parts: string[] = [];
  const special = /[\\'"]/g;
  let from = 0;
  for (let match = special.exec(text); match !== null; match = special.exec(text)) {
    const at = match.index;
    parts.push(text.slice(from, at));
    let end: number;
    if (match[0] === '\\') {
      parts.push(text.slice(at, at + 2));
      end = at + 2;
    } else if (match[0] === "'") {
      const close = text.indexOf("'", at + 1);
      end = close === -1 ? text.length : close + 1;
      parts.push("''");
    } else {
      end = at + 1;
      while (end < text.length && text.charAt(end) !== '"') end += text.charAt(end) === '\\' ? 2 : 1;
      end = Math.min(end + 1, text.length);
      parts.push('""');
    }
    from = end;
    special.lastIndex = end;
  }
  parts.push(text.slice(from));
  return parts.join('');
}
