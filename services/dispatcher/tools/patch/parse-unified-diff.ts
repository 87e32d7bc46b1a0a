/** Unified diffs, git's extended headers (renames, `/dev/null` sides, quoted paths) included. */
import { addHunkLine, finishHunk, newHunk, UNIFIED_HUNK_HEADER } from './hunk-builder.js';
import { headerPath, unquoteGitPath } from './patch-paths.js';
import { PatchError, type PatchHunk, type PatchOperation, type UpdateFileOperation } from './patch-types.js';

interface PendingGitHeader {
  renameFrom?: string;
  renameTo?: string;
}

export function parseUnifiedDiff(lines: readonly string[], seen: string[]): PatchOperation[] {
  const binary = lines.findIndex((line) => line.startsWith('GIT binary patch') || /^Binary files .* differ$/.test(line));
  if (binary >= 0) {
    throw new PatchError(`Patch line ${binary + 1}: binary patches are not supported; use write_file or terminal.`);
  }
  const operations: PatchOperation[] = [];
  let pending: PendingGitHeader | undefined;
  const flushPureRename = (): void => {
    if (pending?.renameFrom !== undefined && pending.renameTo !== undefined) {
      operations.push({ kind: 'update', path: pending.renameFrom, moveTo: pending.renameTo, hunks: [] });
    }
    pending = undefined;
  };
  let i = 0;
  while (i < lines.length) {
    const raw = lines[i] ?? '';
    if (raw.startsWith('diff --git ')) {
      flushPureRename();
      pending = {};
      i++;
      continue;
    }
    if (pending !== undefined && raw.startsWith('rename from ')) {
      pending.renameFrom = headerPath(raw.slice('rename from '.length), seen);
    } else if (pending !== undefined && raw.startsWith('rename to ')) {
      pending.renameTo = headerPath(raw.slice('rename to '.length), seen);
    } else if (raw.startsWith('--- ') && (lines[i + 1] ?? '').startsWith('+++ ')) {
      pending = undefined;
      const parsed = parseUnifiedFile(lines, i, seen);
      operations.push(parsed.operation);
      i = parsed.next;
      continue;
    }
    // Anything else (index lines, modes, prose between files) carries nothing to apply.
    i++;
  }
  flushPureRename();
  return operations;
}

function parseUnifiedFile(
  lines: readonly string[],
  start: number,
  seen: string[],
): { operation: PatchOperation; next: number } {
  const [oldPath, newPath] = stripGitPrefixes(
    parseDiffLabel((lines[start] ?? '').slice(4)),
    parseDiffLabel((lines[start + 1] ?? '').slice(4)),
    seen,
  );
  let i = start + 2;
  const hunks: PatchHunk[] = [];
  while (i < lines.length && (lines[i] ?? '').startsWith('@@')) {
    const header = lines[i] ?? '';
    const hunk = newHunk(i + 1);
    const match = UNIFIED_HUNK_HEADER.exec(header);
    let declaredOld: number | undefined;
    if (match !== null) {
      hunk.oldStart = Number(match[1]);
      declaredOld = match[2] === undefined ? 1 : Number(match[2]);
      const heading = (match[5] ?? '').trim();
      if (heading !== '') hunk.contextHints.push(heading);
    }
    i++;
    // Counts in headers are often wrong in hand-written diffs, so the body
    // runs until the next header; counts only decide about trailing blanks.
    while (i < lines.length) {
      const raw = lines[i] ?? '';
      const nextIsHeader = raw.startsWith('--- ') && (lines[i + 1] ?? '').startsWith('+++ ');
      if (raw.startsWith('@@') || raw.startsWith('diff --git ') || nextIsHeader) break;
      if (!addHunkLine(hunk, raw)) break;
      i++;
    }
    if (declaredOld !== undefined) {
      const oldCount = (): number => hunk.lines.filter((line) => line.kind !== '+').length;
      const lastIsBlankContext = (): boolean => {
        const last = hunk.lines[hunk.lines.length - 1];
        return last?.kind === ' ' && last.text === '';
      };
      while (oldCount() > declaredOld && lastIsBlankContext()) hunk.lines.pop();
    }
    hunks.push(finishHunk(hunk));
  }
  if (oldPath === undefined && newPath === undefined) {
    throw new PatchError(`Patch line ${start + 1}: both sides of the diff are /dev/null.`);
  }
  if (oldPath === undefined) {
    const added: string[] = [];
    let missingNewline = false;
    for (const hunk of hunks) {
      for (const line of hunk.lines) if (line.kind !== '-') added.push(line.text);
      missingNewline = hunk.newMissingFinalNewline;
    }
    while (added.length > 0 && added[added.length - 1] === '') added.pop();
    const content = added.length === 0 ? '' : added.join('\n') + (missingNewline ? '' : '\n');
    return { operation: { kind: 'add', path: newPath ?? '', content }, next: i };
  }
  if (newPath === undefined) return { operation: { kind: 'delete', path: oldPath }, next: i };
  if (hunks.length === 0 && oldPath === newPath) {
    throw new PatchError(`Patch line ${start + 1}: the diff for ${oldPath} has no '@@' hunks.`);
  }
  const operation: UpdateFileOperation = {
    kind: 'update',
    path: oldPath,
    ...(newPath !== oldPath ? { moveTo: newPath } : {}),
    hunks,
  };
  return { operation, next: i };
}

/** A `---`/`+++` label: the path before any tab-separated timestamp; undefined for /dev/null. */
function parseDiffLabel(label: string): string | undefined {
  const path = (label.split('\t')[0] ?? '').trim();
  return path === '/dev/null' ? undefined : path;
}

/** Git writes `a/` and `b/` prefixes; strip them only when both sides agree, so a real `a/` directory survives. */
function stripGitPrefixes(
  oldLabel: string | undefined,
  newLabel: string | undefined,
  seen: string[],
): [string | undefined, string | undefined] {
  const unquoted = (label: string | undefined): string | undefined =>
    label !== undefined && label.length >= 2 && label.startsWith('"') && label.endsWith('"')
      ? unquoteGitPath(label.slice(1, -1))
      : label;
  const oldRaw = unquoted(oldLabel);
  const newRaw = unquoted(newLabel);
  const strip =
    (oldRaw === undefined || oldRaw.startsWith('a/')) && (newRaw === undefined || newRaw.startsWith('b/'));
  const finish = (label: string | undefined): string | undefined =>
    label === undefined ? undefined : headerPath(strip ? label.slice(2) : label, seen);
  return [finish(oldRaw), finish(newRaw)];
}
