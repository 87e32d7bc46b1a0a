/**
 * Finds the program a simple command actually runs, looking through `sudo`,
 * `env`, `timeout`, variable assignments, `!` and tool launchers (`uv run`),
 * plus the argument helpers the terminal guards share.
 */
import { ASSIGNMENT_WORD, commandName, skipOptions } from '../../../../common/shell/scan.js';

/** Words that may precede the command word without being the command. */
export const RESERVED_WORDS = new Set([
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

export interface ResolvedCommand {
  /** Base name of the command word (`/usr/bin/grep` → `grep`). */
  readonly name: string;
  readonly args: readonly string[];
  /** Preceded by `!`, which inverts the exit status. */
  readonly negated: boolean;
  /** Run under `timeout`, so it cannot run forever. */
  readonly bounded: boolean;
}

/** Finds the program a simple command actually runs, looking through sudo, env, assignments and the like. */
export function resolveCommand(words: readonly string[]): ResolvedCommand | null {
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

export function positionals(args: readonly string[]): string[] {
  return args.filter((arg) => !arg.startsWith('-'));
}

/** True for `-f`, `-nf`, `-F` style short-flag clusters containing one of `letters`. */
export function hasShortFlag(args: readonly string[], letters: string): boolean {
  return args.some((arg) => /^-[A-Za-z0-9]+$/.test(arg) && [...letters].some((l) => arg.includes(l)));
}

export function hasLongFlag(args: readonly string[], ...flags: string[]): boolean {
  return args.some((arg) => flags.some((flag) => arg === flag || arg.startsWith(`${flag}=`)));
}
