/**
 * What the `berth` command line accepts: flag parsing and usage errors (exit
 * status 2), each one line that names the problem and the fix: an unknown
 * command or flag with the closest match, a flag without its value, a stray
 * argument. The help texts are command-help.ts's.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { createRequire } from 'node:module';
import { CLIENT_OPTIONS } from './client-options.js';

/** A mistake in how the command was typed; the CLI exits 2. */
export class UsageError extends Error {}

export function version(): string {
  const require = createRequire(import.meta.url);
  return (require('../../../package.json') as { version: string }).version;
}

export function list(value: string | undefined): string[] {
  return (value ?? '').split(',').map((s) => s.trim()).filter(Boolean);
}

/** Edit distance (insertions, deletions, substitutions, adjacent swaps). */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, d[i - 2]![j - 2]! + 1);
      d[i]![j] = best;
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * The candidate nearest to `word`, when it is near enough to be what was
 * meant: a typo (a third of the word at most) or a prefix of it.
 */
export function closestMatch(word: string, candidates: Iterable<string>): string | undefined {
  const w = word.toLowerCase();
  let best: { name: string; distance: number } | undefined;
  for (const name of candidates) {
    const n = name.toLowerCase();
    const distance = n.startsWith(w) && w.length >= 3 ? 0.5 : editDistance(w, n);
    if (best === undefined || distance < best.distance) best = { name, distance };
  }
  if (best === undefined) return undefined;
  return best.distance <= Math.max(1, Math.floor(w.length / 3)) ? best.name : undefined;
}

/** `; did you mean 'X'?` or ''. */
export function didYouMean(word: string, candidates: Iterable<string>, quote = (s: string) => `'${s}'`): string {
  const match = closestMatch(word, candidates);
  return match === undefined ? '' : `; did you mean ${quote(match)}?`;
}

const SERVER_FLAGS = ['port', 'host', 'config', 'backend', 'log-level', 'metrics-port'];
const CLIENT_FLAGS = Object.keys(CLIENT_OPTIONS);

/** Every command's flags, so a flag given to the wrong command can name the right one. */
export const FLAGS_BY_COMMAND: Readonly<Record<string, readonly string[]>> = {
  serve: SERVER_FLAGS,
  dispatcher: SERVER_FLAGS,
  executor: SERVER_FLAGS,
  tools: [...CLIENT_FLAGS, 'toolsets', 'disable', 'explain'],
  call: [...CLIENT_FLAGS, 'task', 'session', 'non-interactive'],
  shell: [...CLIENT_FLAGS, 'task', 'session', 'yolo'],
  mcp: [...CLIENT_FLAGS, 'task', 'session', 'toolsets', 'disable', 'listen', 'agent-loop-tools'],
  'check-command': ['home'],
  doctor: ['config', 'backend'],
  bench: ['quick', 'only', 'smoke', 'compare', 'json'],
  suspend: CLIENT_FLAGS,
  resume: CLIENT_FLAGS,
};

function commandsWithFlag(flag: string): string[] {
  return Object.entries(FLAGS_BY_COMMAND)
    .filter(([, flags]) => flags.includes(flag))
    .map(([command]) => command);
}

/**
 * node's parseArgs error as one line with the fix (node's own text advises
 * on positional arguments for what is usually a typo'd flag).
 */
export function describeParseError(
  command: string,
  err: Error & { code?: string },
  flagNames: readonly string[],
  /** Other commands that have a flag, for `--listen` given to serve (mcp has it). */
  withFlag: (flag: string) => readonly string[] = commandsWithFlag,
): string {
  const help = `'berth ${command} --help' lists them`;
  const flags = flagNames.map((name) => `--${name}`);
  if (err.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    const flag = /Unknown option '([^']+)'/.exec(err.message)?.[1] ?? err.message;
    const bare = flag.replace(/=.*$/, '');
    const suggestion = didYouMean(bare, flags);
    const owners = suggestion === '' ? withFlag(bare.replace(/^--/, '')).filter((c) => c !== command) : [];
    const elsewhere = owners.length > 0 ? `; ${owners.map((c) => `berth ${c}`).join(' and ')} ${owners.length > 1 ? 'have' : 'has'} it` : '';
    return `unknown flag ${bare} for 'berth ${command}'${suggestion}${elsewhere} (${help})`;
  }
  if (err.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    const flag = /Option '(?:-\w, )?(--[\w-]+)/.exec(err.message)?.[1];
    if (flag !== undefined && /argument missing/.test(err.message)) return `${flag} needs a value, e.g. ${flag} VALUE (${help})`;
    if (flag !== undefined) return `${flag} takes no value (${help})`;
  }
  return `${err.message} (${help})`;
}

type FlagOptions = NonNullable<ParseArgsConfig['options']>;
/** What {@link parse} hands to `parseArgs`: the command's flags plus `-h`/`--help`, positionals allowed. */
type ParseConfig<T extends FlagOptions> = {
  args: string[];
  options: T & { help: { type: 'boolean'; short: 'h' } };
  allowPositionals: true;
  strict: true;
};

/** Parses `berth COMMAND`'s flags (and `--help`); a flag it does not know is a usage error naming the fix. */
export function parse<T extends FlagOptions>(command: string, argv: string[], options: T): ReturnType<typeof parseArgs<ParseConfig<T>>> {
  const all = { ...options, help: { type: 'boolean', short: 'h' } } as const;
  try {
    return parseArgs({ args: argv, options: all, allowPositionals: true, strict: true });
  } catch (err) {
    throw new UsageError(describeParseError(command, err as Error & { code?: string }, Object.keys(all)));
  }
}

/** A command that takes no positional arguments got some. */
export function noPositionals(command: string, positionals: readonly string[]): void {
  if (positionals.length > 0) {
    throw new UsageError(`berth ${command} takes no arguments, got: ${positionals.join(' ')} ('berth ${command} --help' shows its flags)`);
  }
}

export function portOf(value: string | undefined, fallback: number, flag = '--port'): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n < 0 || n > 65535) throw new UsageError(`${flag} must be 0-65535, got '${value}'`);
  return n;
}
