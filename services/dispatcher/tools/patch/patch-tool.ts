/**
 * patch: replace-mode edits (fuzzy-matched, as upstream Hermes) and
 * multi-file patches (V4A or unified diff, applied all or nothing).
 *
 * Results follow upstream's PatchResult: `success` first, then only the
 * fields that carry something (`no_change`, `note`, `diff`,
 * `files_modified`, `files_created`, `files_deleted`, `error`), then
 * `resolved_path` when one file was edited. Argument problems are plain
 * `{"error": ...}` as from every tool.
 */
import type { ToolArgs, ToolContext, ToolRegistration } from '../../registry/tool-types.js';
import { guarded, TOOLSET, type JsonObject } from '../file/common.js';
import { patchMode } from './patch-mode.js';
import { replaceMode } from './replace-mode.js';

export function patchRegistration(): ToolRegistration {
  return {
    name: 'patch',
    toolset: TOOLSET,
    emoji: '🩹',
    schema: {
      name: 'patch',
      description:
        'Edit files. mode="replace" swaps old_string for new_string in one file; old_string must match one place ' +
        'unless replace_all is true. Uses fuzzy matching (9 strategies: whitespace, indentation, escaped newlines, ' +
        'typographic characters, similar blocks), so small copying differences still match; the diff shows what ' +
        'changed. mode="patch" applies a multi-file V4A patch: "*** Begin Patch", then sections ' +
        '"*** Update File: PATH" with "@@ context @@" lines and hunk lines starting with " " (keep), "-" (remove) ' +
        'or "+" (add); "*** Add File: PATH" with every line prefixed "+"; "*** Delete File: PATH"; ' +
        '"*** Move File: OLD -> NEW"; then "*** End Patch". A unified diff (--- a/PATH, +++ b/PATH, @@ hunks) is ' +
        'also accepted. Either every hunk applies or nothing is written. Returns a unified diff of the change.',
      parameters: {
        type: 'object',
        properties: {
          mode: {
            type: 'string',
            enum: ['replace', 'patch'],
            description: '"replace" for one old_string/new_string edit, "patch" for a multi-file patch.',
            default: 'replace',
          },
          path: { type: 'string', description: "File to edit. REQUIRED when mode='replace'." },
          old_string: {
            type: 'string',
            description:
              "Text to find, including indentation. REQUIRED when mode='replace'. Include enough surrounding lines " +
              'to make it unique.',
          },
          new_string: {
            type: 'string',
            description: "Replacement text (may be empty to delete old_string). REQUIRED when mode='replace'.",
          },
          replace_all: {
            type: 'boolean',
            description: 'Replace every occurrence instead of requiring exactly one. Default false.',
            default: false,
          },
          patch: {
            type: 'string',
            description: "The full patch text (V4A or unified diff). REQUIRED when mode='patch'.",
          },
          cross_profile: {
            type: 'boolean',
            description: 'Accepted for compatibility with Hermes (its cross-profile guard); has no effect here.',
            default: false,
          },
        },
        required: ['mode'],
      },
    },
    handler: guarded(patchTool),
  };
}

async function patchTool(args: ToolArgs, context: ToolContext): Promise<JsonObject> {
  const mode = args.mode ?? impliedMode(args);
  if (mode === 'replace') return replaceMode(args, context);
  if (mode === 'patch') return patchMode(args, context);
  return { error: `Unknown mode: ${typeof mode === 'string' ? mode : JSON.stringify(mode)}` };
}

/** Upstream defaults to replace; a lone `patch` argument can only mean patch mode, so it is read as one. */
function impliedMode(args: ToolArgs): 'replace' | 'patch' {
  return typeof args.patch === 'string' && args.old_string === undefined ? 'patch' : 'replace';
}
