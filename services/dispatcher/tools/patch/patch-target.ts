/** The check every path the patch tool will write goes through before any file is read. */
import type { ToolContext } from '../../registry/tool-types.js';
import { checkWriteAllowed } from '../file/file-safety.js';
import { pythonRepr } from './python-repr.js';

/** Where a path to be written came from: upstream allows `..` in the explicit argument, not in patch headers. */
export type PatchTargetSource = 'path-argument' | 'patch-header';

/**
 * The one check every path a patch will write, create, delete or move is
 * put through before any file is read; returns the refusal text (the tool
 * answers `{"error": text}`), or undefined to proceed. Called for the
 * replace-mode `path` and for every path in a patch's headers (both ends of
 * a move), header paths as the patch spells them.
 *
 * Upstream's `..` refusal for header paths first, then, for both sources,
 * write_file's sensitive-path and credential deny checks (file-safety.ts),
 * resolved in the task's environment (home and symlinks are the sandbox's).
 */
export async function checkPatchTarget(
  path: string,
  source: PatchTargetSource,
  context: ToolContext,
): Promise<string | undefined> {
  if (source === 'patch-header' && path.split(/[\\/]/).includes('..')) {
    return (
      `V4A patch header contains '..' traversal: ${pythonRepr(path)}. Use the agent's cwd-relative path (no '..') ` +
      "or an absolute path in '*** Update File:' / '*** Add File:' / '*** Delete File:' / '*** Move File:' headers."
    );
  }
  const { absPath } = await context.task.stat(path);
  return checkWriteAllowed(context, path, absPath);
}
