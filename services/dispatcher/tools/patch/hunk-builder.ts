/** Builds one hunk line by line, for both patch syntaxes. */
import type { HunkLine, PatchHunk } from './patch-types.js';

export const NO_NEWLINE_PREFIX = '\\';
/** A unified hunk header, `@@ -l,n +l,n @@ heading`; V4A patches may use it too. */
export const UNIFIED_HUNK_HEADER = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$/;

export interface HunkBuilder {
  lines: HunkLine[];
  contextHints: string[];
  hint?: string;
  oldStart?: number;
  atEndOfFile: boolean;
  oldMissingFinalNewline: boolean;
  newMissingFinalNewline: boolean;
  patchLine: number;
}

export function newHunk(patchLine: number): HunkBuilder {
  return {
    lines: [],
    contextHints: [],
    atEndOfFile: false,
    oldMissingFinalNewline: false,
    newMissingFinalNewline: false,
    patchLine,
  };
}

/** Adds one body line; false when the line is not hunk syntax. */
export function addHunkLine(hunk: HunkBuilder, raw: string): boolean {
  const kind = raw[0];
  if (kind === ' ' || kind === '-' || kind === '+') {
    hunk.lines.push({ kind, text: raw.slice(1) });
    return true;
  }
  if (raw === '') {
    // Editors and models drop the lone space of blank context lines.
    hunk.lines.push({ kind: ' ', text: '' });
    return true;
  }
  if (kind === NO_NEWLINE_PREFIX) {
    const previous = hunk.lines[hunk.lines.length - 1];
    if (previous?.kind !== '+') hunk.oldMissingFinalNewline = true;
    if (previous?.kind !== '-') hunk.newMissingFinalNewline = true;
    return true;
  }
  return false;
}

export function finishHunk(builder: HunkBuilder): PatchHunk {
  return {
    lines: builder.lines,
    contextHints: builder.contextHints,
    ...(builder.hint !== undefined ? { hint: builder.hint } : {}),
    ...(builder.oldStart !== undefined ? { oldStart: builder.oldStart } : {}),
    atEndOfFile: builder.atEndOfFile,
    oldMissingFinalNewline: builder.oldMissingFinalNewline,
    newMissingFinalNewline: builder.newMissingFinalNewline,
    patchLine: builder.patchLine,
  };
}
