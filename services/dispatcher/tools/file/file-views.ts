/**
 * What a task has seen of each file, for write_file's refusal to overwrite
 * content the task does not have (upstream #65604,
 * `file_tools_write_guards._stale_overwrite_blocker`): a whole-file write
 * over an existing file needs a current, full view of it, from one read of
 * the whole file, pages read contiguously to the last line, or this task's
 * own write. A page whose text was masked (secrets) or cut (lines over the
 * display width, the character budget) is no full view: writing it back
 * would destroy what the model never saw. A patch leaves no full view
 * either (upstream: "only patched").
 *
 * Views are keyed by the file's content fingerprint, so any change on disk,
 * by whoever, makes an earlier view stale.
 */

/** What the task saw of one file. */
export interface FileView {
  readonly fingerprint: string;
  /** Lines 1..coveredTo were returned, unaltered, for this content. */
  readonly coveredTo: number;
  /** The whole content is known (read in full, or written by this task). */
  readonly full: boolean;
}

/** One read_file page, as returned. */
export interface ReadPage {
  readonly fingerprint: string;
  readonly offset: number;
  /** The last line returned. */
  readonly endLine: number;
  readonly totalLines: number;
  /** Every line came back as it is in the file (nothing masked or cut). */
  readonly unaltered: boolean;
}

/** The view after a page was read, given the view before. */
export function viewAfterRead(before: FileView | undefined, page: ReadPage): FileView {
  const same = before !== undefined && before.fingerprint === page.fingerprint;
  if (same && before.full) return before;
  if (!page.unaltered) {
    // A masked or cut page adds nothing; the contiguous lines seen before still count.
    return same ? before : { fingerprint: page.fingerprint, coveredTo: 0, full: false };
  }
  const previous = same ? before.coveredTo : 0;
  const coveredTo = page.offset <= previous + 1 ? Math.max(previous, page.endLine) : previous;
  return { fingerprint: page.fingerprint, coveredTo, full: coveredTo >= page.totalLines };
}

/** The view of content this task wrote itself. */
export function viewAfterWrite(fingerprint: string): FileView {
  return { fingerprint, coveredTo: 0, full: true };
}

/** Why write_file may not overwrite an existing file, as upstream words it; undefined when it may. */
export function overwriteBlocker(view: FileView | undefined, current: string | undefined, resolvedPath: string): string | undefined {
  if (view !== undefined && current !== undefined && view.fingerprint !== current) {
    return (
      `${resolvedPath} was modified since you last read it on disk (external edit or unrecorded writer). ` +
      'Re-read the file before writing.'
    );
  }
  if (view?.full === true) return undefined;
  return (
    `${resolvedPath} exists but this task has not seen its full current content (never read, only patched, or ` +
    'only a redacted/partial view). Read the file — every page of it, if it needs offset/limit — or use patch for ' +
    'a targeted edit; a stale conversation copy must not overwrite the current disk content.'
  );
}

/** write_file's refusal (upstream `_stale_write_refusal`): nothing was written. */
export function staleWriteRefusal(path: string, reason: string, resolvedPath: string): Record<string, unknown> {
  return {
    error:
      `Refusing to overwrite ${path}: ${reason} The file was NOT modified. Reload the current contents with ` +
      'read_file (every page, for a file that needs offset/limit), merge the requested change, then call ' +
      'write_file again. For small edits, prefer patch so existing unrelated changes are preserved.',
    stale_write_blocked: true,
    path,
    resolved_path: resolvedPath,
  };
}
