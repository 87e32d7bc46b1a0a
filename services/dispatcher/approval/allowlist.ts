/**
 * Permanent allowlist matching (`command_allowlist`, tool-runtime spec §5) and
 * the detection of every pattern key a command matches.
 *
 * An entry approves a command in one of two ways:
 * - by pattern key: the entry equals a key the command needs approval for
 *   (`recursive delete`, `execute_code`). A command that matches several
 *   patterns passes only when every one of its keys is approved, so approving
 *   `git force push` does not also approve `git push -f; rm -rf ~/src`.
 * - by command text: the entry equals the command (surrounding whitespace
 *   ignored) or, when it holds `*` or `?`, matches it as a glob (`*` any
 *   text, `?` one character). Text matching is skipped when the command holds
 *   a shell operator — `;`, `&`, `|` (so `&&` and `||`), `<`, `>`, a backtick,
 *   `$(` — or a newline, because a glob like `make *` would otherwise approve
 *   `make x; rm -rf ~`.
 */
import { findHardline } from './hardline.js';
import { analyzeCommand, type NormalizeOptions } from './normalize.js';
import { DANGEROUS_PATTERNS, type DangerousPatternKey } from './patterns.js';

/** Every dangerous pattern key a command matches, in table order; or its hardline hit. */
export interface FullDetection {
  readonly hardline?: { readonly description: string };
  readonly keys: readonly DangerousPatternKey[];
}

/**
 * Like `detectDangerousCommand`, but lists every matching key instead of the
 * first, so approvals by key can require all of them.
 */
export function detectAllDangerous(cmd: string, options: NormalizeOptions = {}): FullDetection {
  const analysis = analyzeCommand(cmd, options);
  const hardline = findHardline(analysis);
  if (hardline !== undefined) return { hardline, keys: [] };
  const variants = [analysis.normalized, ...analysis.commands];
  const keys = DANGEROUS_PATTERNS.filter(({ regex }) => variants.some((v) => regex.test(v))).map((p) => p.key);
  return { keys };
}

const SHELL_OPERATOR = /[;&|<>`\n\r]|\$\(/;

/** True when the command holds a shell operator that makes text matching unsafe. */
export function hasShellOperator(command: string): boolean {
  return SHELL_OPERATOR.test(command);
}

function globToRegExp(glob: string): RegExp {
  let source = '';
  for (const ch of glob) {
    if (ch === '*') source += '[\\s\\S]*';
    else if (ch === '?') source += '[\\s\\S]';
    else source += ch.replace(/[\\^$.|+(){}[\]/-]/g, '\\$&');
  }
  return new RegExp(`^${source}$`);
}

/** True when `entry` approves the command text (exact or glob); never for commands with operators. */
export function entryMatchesCommand(entry: string, command: string): boolean {
  const text = command.trim();
  const pattern = entry.trim();
  if (pattern === '' || hasShellOperator(text)) return false;
  if (pattern === text) return true;
  return /[*?]/.test(pattern) && globToRegExp(pattern).test(text);
}

/**
 * Whether the allowlist approves a command that needs approval under `keys`:
 * every key is listed, or an entry matches the command text.
 */
export function allowlistApproves(entries: readonly string[], command: string, keys: readonly string[]): boolean {
  if (keys.length > 0 && keys.every((k) => entries.includes(k))) return true;
  return entries.some((entry) => entryMatchesCommand(entry, command));
}
