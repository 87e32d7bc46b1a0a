/**
 * The edit engine behind the `patch` tool, kept free of I/O so every rule can
 * be unit-tested: this file parses a multi-file patch (the `*** Begin Patch`
 * format or a unified diff); apply-patch.ts applies it to file contents the
 * caller read. The single-edit `old_string`/`new_string` replacement lives in
 * fuzzy-match.ts.
 *
 * Models write patches from memory, so matching is deliberately forgiving
 * where that cannot change the meaning (whitespace at line ends and starts,
 * wrong line numbers, stray blank lines at hunk ends) and strict where it
 * can: every hunk must be found, and one failure rejects the whole patch.
 */
import { parseBeginPatch } from './parse-begin-patch.js';
import { parseUnifiedDiff } from './parse-unified-diff.js';
import { PatchError, type ParsedPatch, type PatchFormat, type PatchOperation } from './patch-types.js';

/** V4A file headers; like upstream, the space after `***` is optional. */
const SINGLE_FILE_HEADER = /^\*\*\*\s*(Update|Add|Delete)\s+File:\s*(.*)$/;
const MOVE_FILE_HEADER = /^\*\*\*\s*Move\s+File:\s*(.+?)\s*->\s*(.+)$/;

/**
 * Parses patch text in either supported format, detected from its content:
 * `*** Begin Patch` / `*** Update File:` markers select the Begin Patch
 * format; `---`/`+++` header pairs select a unified diff (git's extended
 * headers, `/dev/null` sides and `rename from/to` included).
 *
 * @throws PatchError with the offending patch line when the text is malformed.
 */
export function parsePatch(text: string): ParsedPatch {
  const lines = text.replace(/\r\n/g, '\n').split('\n');
  // The newline ending the text does not start another (blank context) line.
  if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
  const isBeginPatch = lines.some((line) => {
    const trimmed = line.trim();
    return /^\*\*\*\s*Begin Patch/.test(trimmed) || SINGLE_FILE_HEADER.test(trimmed) || MOVE_FILE_HEADER.test(trimmed);
  });
  const headerPaths: string[] = [];
  let format: PatchFormat;
  let operations: PatchOperation[];
  if (isBeginPatch) {
    format = 'begin-patch';
    operations = parseBeginPatch(lines, headerPaths);
  } else if (
    lines.some((line, i) => (line.startsWith('--- ') && lines[i + 1]?.startsWith('+++ ')) || line.startsWith('diff --git '))
  ) {
    format = 'unified';
    operations = parseUnifiedDiff(lines, headerPaths);
  } else {
    throw new PatchError(
      "Unrecognized patch format. Use '*** Begin Patch' ... '*** End Patch' with '*** Update File: PATH', " +
        "'*** Add File: PATH' or '*** Delete File: PATH' sections, or a unified diff with '--- a/PATH' / '+++ b/PATH' headers.",
    );
  }
  // An empty V4A patch parses (upstream reports it when validating); an empty unified diff cannot be told from prose.
  if (operations.length === 0 && format === 'unified') throw new PatchError('The patch contains no file operations.');
  return { format, operations, headerPaths };
}
