/**
 * Length of the longest suffix of `data` that is a proper prefix of one of
 * `patterns`. Stream filters hold back exactly these bytes, so a pattern split
 * across chunks is still recognised while everything else flows on at once.
 */
export function partialPrefixLength(data: Uint8Array, patterns: readonly Uint8Array[]): number {
  let best = 0;
  for (const pattern of patterns) {
    const maxLen = Math.min(pattern.length - 1, data.length);
    for (let len = maxLen; len > best; len--) {
      let match = true;
      for (let i = 0; i < len; i++) {
        if (data[data.length - len + i] !== pattern[i]) {
          match = false;
          break;
        }
      }
      if (match) {
        best = len;
        break;
      }
    }
  }
  return best;
}
