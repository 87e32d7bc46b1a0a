/** A text file the patch tool edits: read with its BOM set aside, and read back after the write. */
import type { TaskClient } from '../../../common/task-client.js';
import { readIfExists } from '../file/common.js';

export const BOM = '\uFEFF';

/** A file about to be edited, its BOM set aside (matching and diffs see the text without it). */
export interface EditableFile {
  readonly absPath: string;
  /** Undefined when the file does not exist. */
  readonly text?: string;
  readonly bom: boolean;
}

/**
 * Re-reads a written file: an executor that silently dropped the write must
 * not be reported as success. Replace mode compares after normalizing line
 * endings and the BOM (upstream `_verify_patch_persisted`); `exact` compares
 * the bytes, as upstream's write_file does with a hash for the files of a
 * V4A patch, and answers with that text.
 */
export async function verifyWritten(
  task: TaskClient,
  path: string,
  intended: string,
  mode: 'replace' | 'exact' = 'replace',
): Promise<string | undefined> {
  const back = await readIfExists(task, path);
  if (mode === 'exact') {
    if (back !== undefined && back.content.equals(Buffer.from(intended, 'utf8'))) return undefined;
    return (
      `Post-write verification failed for ${path}: on-disk content hash differs from the intended write. The ` +
      'write did not persist correctly — re-read the file and retry.'
    );
  }
  const normalize = (text: string): string => text.replace(/^\uFEFF/, '').replaceAll('\r\n', '\n').replaceAll('\r', '\n');
  const wrote = normalize(intended);
  const read = normalize(back?.content.toString('utf8') ?? '');
  if (back !== undefined && read === wrote) return undefined;
  return (
    `Post-write verification failed for ${path}: on-disk content differs from intended write (wrote ` +
    `${wrote.length} chars, read back ${read.length} chars after normalizing line endings). The patch did not ` +
    'persist. Re-read the file and try again.'
  );
}
