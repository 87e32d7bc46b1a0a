/**
 * The patch engine's data model: the operations a patch text parses into,
 * their hunks, the changes applying them makes, and the error whose message
 * the model reads.
 */
import { InvalidArgumentError } from '../../../common/errors.js';

/** Raised for patch text that cannot be parsed or applied; its message is written for the model. */
export class PatchError extends InvalidArgumentError {}

/** One line of a hunk: context (` `), removed (`-`) or added (`+`), without the prefix. */
export interface HunkLine {
  readonly kind: ' ' | '-' | '+';
  readonly text: string;
}

/** A contiguous change inside one file. */
export interface PatchHunk {
  readonly lines: readonly HunkLine[];
  /**
   * Lines named after `@@` in the Begin Patch format (or the section heading
   * of a unified hunk header), found in order before the hunk to narrow
   * where it applies. A hint that is not found is ignored.
   */
  readonly contextHints: readonly string[];
  /**
   * Upstream's context hint: what `@@ hint @@` encloses on the hunk's last
   * `@@` line. It places an addition-only hunk (after the line containing
   * it, which must be unique) and names the hunk in errors.
   */
  readonly hint?: string;
  /** 1-based first old line from a unified `@@ -l,n` header; a preference, not a requirement. */
  readonly oldStart?: number;
  /** `*** End of File`: the hunk belongs at the end of the file. */
  readonly atEndOfFile: boolean;
  /** A `\ No newline at end of file` followed a removed or context line. */
  readonly oldMissingFinalNewline: boolean;
  /** A `\ No newline at end of file` followed an added or context line. */
  readonly newMissingFinalNewline: boolean;
  /** 1-based line in the patch text where the hunk starts, for error messages. */
  readonly patchLine: number;
}

/** Create a file (it must not exist). */
export interface AddFileOperation {
  readonly kind: 'add';
  readonly path: string;
  readonly content: string;
}

/** Delete a file (it must exist). */
export interface DeleteFileOperation {
  readonly kind: 'delete';
  readonly path: string;
}

/** Change a file's contents, optionally moving it. */
export interface UpdateFileOperation {
  readonly kind: 'update';
  readonly path: string;
  readonly moveTo?: string;
  readonly hunks: readonly PatchHunk[];
}

/** One file-level step of a patch. Paths are normalized with `normalizePatchPath` (patch-paths.ts). */
export type PatchOperation = AddFileOperation | DeleteFileOperation | UpdateFileOperation;

/** Which syntax the patch text used. */
export type PatchFormat = 'begin-patch' | 'unified';

/** The result of `parsePatch` (parse-patch.ts). */
export interface ParsedPatch {
  readonly format: PatchFormat;
  readonly operations: readonly PatchOperation[];
  /**
   * Every path as the patch's headers spell it (unquoted and trimmed, but
   * not normalized, so `a/../b` still shows its `..`), in order: both ends
   * of a move included. The caller vets each before touching any file.
   */
  readonly headerPaths: readonly string[];
}

/** The net effect of a patch on one path. */
export interface FileChange {
  readonly kind: 'create' | 'modify' | 'delete';
  readonly path: string;
  /** Content before the patch; absent for `create`. */
  readonly before?: string;
  /** Content after the patch; absent for `delete`. */
  readonly after?: string;
  /** For a `create` produced by a move (`*** Move File:` or a unified diff's rename), the path it came from. */
  readonly movedFrom?: string;
}

/** The result of `applyPatch` (apply-patch.ts). */
export interface PatchApplication {
  /** Net changes, in the order the patch first touched each path. */
  readonly changes: readonly FileChange[];
  /** Things the model should know, e.g. hunks matched only after ignoring whitespace. */
  readonly notes: readonly string[];
}

/** A patch or file line quoted for an error message, cut at 200 characters. */
export function quoteLine(line: string): string {
  return JSON.stringify(line.length > 200 ? `${line.slice(0, 200)}...` : line);
}
