/** A matched region of the searched text: `[start, end)` in UTF-16 code units. */
export type Span = readonly [start: number, end: number];
