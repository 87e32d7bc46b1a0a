/**
 * Where JSON text first goes wrong: V8's JSON.parse names a position for
 * most mistakes but not for an unexpected token ("Unexpected token '}', ...
 * is not valid JSON"), and a person needs the place either way.
 */

const WS = new Set([' ', '\t', '\n', '\r']);

/** The offset of the first character that cannot continue valid JSON (text.length if it ends too early), or undefined if valid. */
export function jsonErrorOffset(text: string): number | undefined {
  let i = 0;
  const fail = (at: number): never => {
    throw new Offset(at);
  };
  const ws = () => {
    while (i < text.length && WS.has(text[i]!)) i++;
  };
  const literal = (word: string) => {
    for (const ch of word) {
      if (text[i] !== ch) fail(i);
      i++;
    }
  };
  const string = () => {
    i++; // opening quote
    for (;;) {
      if (i >= text.length) fail(i);
      const c = text[i]!;
      if (c === '"') {
        i++;
        return;
      }
      if (c < ' ') fail(i);
      if (c === '\\') {
        const e = text[i + 1];
        if (e === 'u') {
          if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) fail(i + 2);
          i += 6;
        } else if (e !== undefined && '"\\/bfnrt'.includes(e)) i += 2;
        else fail(i + 1);
      } else i++;
    }
  };
  const number = () => {
    const m = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/.exec(text.slice(i));
    if (!m || m[0] === '' || m[0] === '-') fail(i);
    i += m![0].length;
  };
  /** `{...}` or `[...]` from its opening bracket: `item` per element, separated by commas. */
  const sequence = (close: string, item: () => void) => {
    i++;
    ws();
    if (text[i] === close) {
      i++;
      return;
    }
    for (;;) {
      item();
      ws();
      if (text[i] === ',') i++;
      else if (text[i] === close) {
        i++;
        return;
      } else fail(i);
    }
  };
  const member = () => {
    ws();
    if (text[i] !== '"') fail(i);
    string();
    ws();
    if (text[i] !== ':') fail(i);
    i++;
    value();
  };
  const value = (): void => {
    ws();
    const c = text[i];
    if (c === undefined) fail(i);
    if (c === '{') return sequence('}', member);
    if (c === '[') return sequence(']', value);
    if (c === '"') return string();
    if (c === 't') return literal('true');
    if (c === 'f') return literal('false');
    if (c === 'n') return literal('null');
    return number();
  };
  try {
    value();
    ws();
    if (i < text.length) fail(i);
    return undefined;
  } catch (err) {
    if (err instanceof Offset) return err.offset;
    throw err;
  }
}

class Offset {
  constructor(readonly offset: number) {}
}
