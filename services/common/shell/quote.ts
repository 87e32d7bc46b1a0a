/**
 * POSIX shell quoting for text spliced into commands run in a task's
 * environment: the dispatcher's file tools (search, delete) and the
 * executor's wrapper scripts alike. Single quotes are the only
 * POSIX quoting with no special characters inside, so every byte except the
 * quote itself passes through literally: no `$`, backtick, `\` or glob
 * expansion, in bash, dash, ash and zsh alike.
 */

/**
 * Quotes `value` as one POSIX shell word: `it's` becomes `'it'\''s'`.
 *
 * Always quotes, even "safe" strings, so callers never have to reason about
 * which characters a shell treats specially. The empty string becomes `''`,
 * which keeps it as an (empty) argument instead of dropping it.
 *
 * @throws RangeError when `value` contains a NUL byte: no shell word can hold
 *   one, and silently truncating there would run a different command.
 */
export function shellQuote(value: string): string {
  if (value.includes('\0')) {
    throw new RangeError('Cannot shell-quote a string containing a NUL byte');
  }
  return `'${value.replaceAll("'", `'\\''`)}'`;
}
