/** The terminal tool's `workdir` argument: read, and refused unless a plain absolute path. */
import { pythonTypeName } from '../../python-type-name.js';
import { refusal, type TerminalGuard } from './terminal-guard.js';

// An allowlist rather than a denylist, so shell metacharacters nobody thought
// of cannot slip through: letters and digits of any script (paths in CJK and
// other scripts are legitimate, as in the reference tool) plus path and drive
// separators and a little punctuation. Control characters, newline included,
// are never letters or digits, so they are always rejected.
const WORKDIR_PUNCTUATION = new Set([...'/\\:_-.~ +@=,']);
const LETTER_OR_DIGIT = /^[\p{L}\p{N}]$/u;

function isSafeWorkdirCharacter(ch: string): boolean {
  return WORKDIR_PUNCTUATION.has(ch) || LETTER_OR_DIGIT.test(ch);
}

/**
 * Renders one character the way Python's `repr()` does, because the
 * reference tool builds this message with it and agents see the same text:
 * `'$'`, but `"'"` for a single quote and `'\n'` or `'\x1b'` for invisible
 * characters.
 */
function pythonCharRepr(ch: string): string {
  if (ch === "'") return `"'"`;
  const named: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t', '\\': '\\\\' };
  const escape = named[ch];
  if (escape !== undefined) return `'${escape}'`;
  if (ch !== ' ' && /[\p{C}\p{Z}]/u.test(ch)) {
    const code = ch.codePointAt(0) ?? 0;
    const hex = code.toString(16);
    if (code <= 0xff) return `'\\x${hex.padStart(2, '0')}'`;
    if (code <= 0xffff) return `'\\u${hex.padStart(4, '0')}'`;
    return `'\\U${hex.padStart(8, '0')}'`;
  }
  return `'${ch}'`;
}

/**
 * Returns the `Blocked: ...` message naming the first character outside the
 * workdir allowlist, or null when the path is acceptable. An empty string
 * means "no workdir" and is accepted.
 */
export function validateWorkdir(workdir: string): string | null {
  for (const ch of workdir) {
    if (!isSafeWorkdirCharacter(ch)) {
      return (
        `Blocked: workdir contains disallowed character ${pythonCharRepr(ch)}. ` +
        'Use a simple filesystem path without shell metacharacters.'
      );
    }
  }
  return null;
}

/**
 * Reads `workdir` into the call: empty or absent means the task's current
 * directory; anything else must pass {@link validateWorkdir} and be absolute.
 */
export const workdirGuard: TerminalGuard = {
  name: 'workdir',
  beforeRun(call) {
    const raw = call.args.workdir;
    if (raw === undefined || raw === null || raw === '') return undefined;
    if (typeof raw !== 'string') return refusal(`Invalid workdir: expected string, got ${pythonTypeName(raw)}`, 'error');
    const blocked = validateWorkdir(raw);
    if (blocked !== null) return refusal(blocked, 'blocked');
    // Relative paths would resolve against whatever cwd the task has drifted to.
    if (!raw.startsWith('/') && !raw.startsWith('~')) {
      return refusal(`Invalid workdir: expected an absolute path, got ${raw}`, 'error');
    }
    call.workdir = raw;
    return undefined;
  },
};
