/** POSIX shell word splitting as Python's `shlex.split` does it, for the malformed-payload checks. */

/** The quote a scan is inside, if any. */
export type Quote = "'" | '"' | null;

/**
 * Splits text into POSIX shell words (quotes and backslashes resolved, runs of
 * `<`/`>` as words of their own, no comments), or undefined when the text ends
 * inside a quote or right after a backslash that escapes nothing.
 */
export function posixWords(text: string): string[] | undefined {
  const words: string[] = [];
  let word = '';
  let inWord = false;
  let punct = false;
  let quote: Quote = null;
  const finish = () => {
    if (inWord) words.push(word);
    word = '';
    inWord = false;
    punct = false;
  };
  for (let i = 0; i < text.length; i++) {
    const ch = text.charAt(i);
    if (quote === "'") {
      if (ch === "'") quote = null;
      else word += ch;
      continue;
    }
    if (ch === '\\') {
      if (i + 1 >= text.length) return undefined;
      i++;
      const escaped = text.charAt(i);
      // Inside double quotes a backslash stays unless it escapes `"` or itself.
      if (quote === '"' && escaped !== '"' && escaped !== '\\') word += ch;
      word += escaped;
      inWord = true;
      continue;
    }
    if (quote === '"') {
      if (ch === '"') quote = null;
      else word += ch;
      continue;
    }
    if (/\s/.test(ch)) {
      finish();
      continue;
    }
    const isPunct = ch === '<' || ch === '>';
    if (inWord && isPunct !== punct) finish();
    if (ch === "'" || ch === '"') quote = ch;
    else word += ch;
    inWord = true;
    punct = isPunct;
  }
  if (quote !== null) return undefined;
  finish();
  return words;
}
