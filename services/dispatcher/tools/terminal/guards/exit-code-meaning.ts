/** Notes on non-zero exit codes that are a normal answer rather than a failure. */
import { lexShell, splitCommands, type CommandWords } from '../../../../common/shell/tokens.js';
import { resolveCommand, type ResolvedCommand } from './resolve-command.js';
import type { TerminalGuard } from './terminal-guard.js';

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

/** Sets the result's `exit_code_meaning` for a command that ran to its end (not timed out or interrupted). */
export const exitCodeMeaningGuard: TerminalGuard = {
  name: 'exit-code-meaning',
  afterRun(outcome) {
    if (outcome.result.timedOut || outcome.result.interrupted) return;
    outcome.exitCodeMeaning = exitCodeMeaning(outcome.call.command, outcome.exitCode);
  },
};
