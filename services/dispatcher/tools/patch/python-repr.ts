/** Python's `repr()` of a string, for the upstream messages that quote with it. */

/** Python's `repr()` of a string, as upstream's messages quote paths and samples with `{x!r}`. */
export function pythonRepr(text: string): string {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let body = '';
  for (const ch of text) {
    const code = ch.codePointAt(0) ?? 0;
    if (ch === '\\' || ch === quote) body += `\\${ch}`;
    else if (ch === '\n') body += '\\n';
    else if (ch === '\t') body += '\\t';
    else if (ch === '\r') body += '\\r';
    else if (code < 0x20 || code === 0x7f) body += `\\x${code.toString(16).padStart(2, '0')}`;
    else body += ch;
  }
  return `${quote}${body}${quote}`;
}
