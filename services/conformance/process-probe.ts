/**
 * How the conformance suite finds its own processes inside an environment:
 * a `sleep` of a number nobody else uses, counted through `/proc` by a
 * command run there, so the check holds for remote and containerised
 * backends too.
 */
import { randomInt } from 'node:crypto';

/** A number nobody else's `sleep` uses, so process checks find only ours. */
export function uniqueSleepSeconds(): number {
  return 900_000 + randomInt(0, 99_999);
}

/**
 * A script that prints `count=N`: how many live processes have an argument
 * exactly equal to `arg` (letters, digits, `_`, `.`, `-`). Zombies have an
 * empty command line, so they do not count. The pattern is bracketed
 * (`[9]12345`) so the grep that searches never matches itself.
 */
export function countProcessesScript(arg: string): string {
  if (!/^[A-Za-z0-9_.-]+$/.test(arg)) throw new Error(`unsupported process argument: ${arg}`);
  const pattern = `[${arg.slice(0, 1)}]${arg.slice(1).replaceAll('.', '\\.')}`;
  return `echo "count=$(grep -lzx -e '${pattern}' /proc/[0-9]*/cmdline 2>/dev/null | wc -l)"`;
}
