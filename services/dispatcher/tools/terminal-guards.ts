/**
 * Pure checks and rewrites the terminal tool applies to a command before it
 * reaches the executor: the foreground guardrail, workdir validation, the
 * `A && B &` rewrite, exit-code explanations and the foreground timeout cap.
 *
 * They share the flat token view of a command line from the common shell
 * module, and a resolver that finds the program each simple command runs.
 */
import { ASSIGNMENT_WORD, commandName, skipOptions } from '../../common/shell/scan.js';
import { lexShell, splitCommands, type CommandWords, type ShellToken } from '../../common/shell/tokens.js';

// ---------------------------------------------------------------------------
// Command words
// ---------------------------------------------------------------------------

/** Words that may precede the command word without being the command. */
const RESERVED_WORDS = new Set([
  '!', '{', '}', 'then', 'do', 'else', 'elif', 'if', 'while', 'until', 'fi', 'done', 'esac',
]);

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
    if (ASSIGNMENT_WORD.test(word)) {
      i += 1;
      continue;
    }
    const name = commandName(word);
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
    if (first !== undefined && commandName(first) === 'manage.py' && positional[1] === 'runserver') {
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
    resolved = resolveCommand((commands[i] as CommandWords).words);
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
