/**
 * Permanent allowlist matching (`command_allowlist`, tool-runtime spec §5) and
 * the detection of every pattern key a command matches. Entries mean what
 * they mean upstream (docs/hermes-compat.md §5.5), so a list written for
 * hermes-agent carries over.
 *
 * An entry approves a command in one of two ways:
 * - by pattern key: the entry is a key the command needs approval for
 *   (`recursive delete`, `execute_code`), or one of that key's legacy
 *   aliases — the regex-derived keys older upstream versions stored
 *   (`rm\s+-[^\s]*r`). A command that matches several patterns passes only
 *   when every one of its keys is approved, so approving `git force push`
 *   does not also approve `git push -f; rm -rf ~/src` (upstream approves on
 *   the first key alone; Berth is stricter here on purpose).
 * - by command text: the entry equals the command (surrounding whitespace
 *   ignored) or, when it holds `*`, `?` or `[`, matches it as a
 *   case-sensitive glob (`*` any text, `?` one character, `[...]` a class,
 *   `[!...]` a negated one). Text matching is skipped for compound commands
 *   (see {@link hasShellOperator}), because a glob like `make *` would
 *   otherwise approve `make x; rm -rf ~`.
 */
import { findHardline } from './hardline.js';
import { inspectCommand } from './detect.js';
import type { NormalizeOptions } from './normalize.js';
import { isVerificationArtifactCleanup } from './temp-cleanup.js';
import { DANGEROUS_PATTERNS, patternMatches, type DangerousPatternKey } from './patterns.js';

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
  const { analysis, input } = inspectCommand(cmd, options);
  const hardline = findHardline(analysis, input.written);
  if (hardline !== undefined) return { hardline, keys: [] };
  if (isVerificationArtifactCleanup(cmd)) return { keys: [] };
  const keys = DANGEROUS_PATTERNS.filter((p) => patternMatches(p, input)).map((p) => p.key);
  return { keys };
}

/**
 * Keys older upstream versions stored for each pattern: the text of the
 * pattern's regex between its first two `\b`, and the keys of rules that were
 * since renamed. An allowlist entry equal to any alias approves the key.
 */
export const LEGACY_KEY_ALIASES: Readonly<Partial<Record<DangerousPatternKey, readonly string[]>>> = {
  'delete in root path': [String.raw`rm\s+(-[^\s]*\s+)*/`],
  'recursive delete': [String.raw`rm\s+-[^\s]*r`],
  'recursive delete (long flag)': [String.raw`rm\s+--recursive`],
  'Windows cmd destructive delete': [String.raw`cmd(?:\.exe)?\s+/(?:c|k)\s+.*`],
  'PowerShell destructive delete (Remove-Item)': ['remove-item'],
  'force kill processes (taskkill /F)': ['taskkill'],
  'force kill processes (Stop-Process -Force)': ['stop-process'],
  'format filesystem (Format-Volume)': ['format-volume'],
  'wipe disk (Clear-Disk)': ['clear-disk'],
  'disk partitioning (diskpart)': ['diskpart'],
  'world/other-writable permissions': [String.raw`chmod\s+(-[^\s]*\s+)*(777|666|o\+[rwx]*w|a\+[rwx]*w)`],
  'recursive world/other-writable (long flag)': [String.raw`chmod\s+--recursive`],
  'recursive chown to root': [String.raw`chown\s+(-[^\s]*)?R\s+root`],
  'recursive chown to root (long flag)': [String.raw`chown\s+--recur[a-z]*`],
  'SQL DROP': [String.raw`DROP\s+(TABLE|DATABASE)`],
  'SQL DELETE without WHERE': [String.raw`DELETE\s+FROM`],
  'SQL TRUNCATE': [String.raw`TRUNCATE\s+(TABLE)?\s*\w`],
  'stop/restart system service': [String.raw`systemctl\s+(-[^\s]+\s+)*(stop|restart|disable|mask)`],
  'kill all processes': [String.raw`kill\s+-9\s+-1`],
  'force kill processes': [String.raw`pkill\s+-9`],
  'force kill processes (killall -KILL)': [String.raw`killall\s+(-[^\s]*\s+)*-(9|KILL|SIGKILL)`],
  'force kill processes (killall -s KILL)': [String.raw`killall\s+(-[^\s]*\s+)*-s\s+(KILL|SIGKILL|9)`],
  'kill processes by regex (killall -r)': [String.raw`killall\s+(-[^\s]*\s+)*-r`],
  // The first 20 characters of the source (it has no \b), cut mid-escape as upstream cuts it.
  'fork bomb': [':\\(\\)\\s*\\{\\s*:\\s*\\|\\'],
  'pipe remote content to shell': ['(curl|wget)'],
  'execute remote script via process substitution': [String.raw`(?:bash|sh|zsh|ksh|dash)\s+<\s*<?\s*\(\s*(curl|wget)`],
  'execute remote content via command substitution': ['eval'],
  'pipe decoded content to shell (possible command obfuscation)': [String.raw`(base64|base32|base16)\s+(?:-[dD]|--decode)`],
  'pipe xxd-decoded content to shell (possible command obfuscation)': [String.raw`xxd\s+-r`],
  'pipe tr-transformed output to shell (possible command obfuscation)': ['echo'],
  'pipe openssl-decoded content to shell (possible command obfuscation)': ['openssl'],
  'overwrite system file via tee': ['tee'],
  'overwrite project env/config via tee': ['tee'],
  'xargs with rm': [String.raw`xargs\s+.*`],
  'find -exec/-execdir rm': ['find'],
  'find -delete': ['find'],
  // Key 63 starts with upstream's command-position prefix, which has no `\b`;
  // its derived key is that prefix, shared by unrelated rules, so it is left out.
  'dynamic shell word may expand to arbitrary program execution flag': ['(?:rg|sort|ag|man)'],
  'copy/move file into system config path': ['(cp|mv|install)'],
  'overwrite project env/config file': ['(cp|mv|install)'],
  'copy/move file into sensitive credential/SSH/shell-rc path': ['(cp|mv|install)'],
  'in-place edit of system config': [String.raw`sed\s+-[^\s]*i.*\s(?:/etc/|/private/(?:etc|var|tmp|home)/)`],
  'shell execution via heredoc': [String.raw`(?:bash|sh|zsh|ksh|dash)\s+<<`],
  'git reset --hard (destroys uncommitted changes)': [String.raw`git\s+reset\s+--h(?:a(?:r(?:d)?)?)?`],
  'git force push (rewrites remote history)': [String.raw`git\s+push`],
  'git force push short flag (rewrites remote history)': [String.raw`git\s+push`],
  'git clean with force (deletes untracked files)': [String.raw`git\s+clean\s+-[^\s]*f`],
  'git branch force delete': [String.raw`git\s+branch\s+(?-i:-D)`, String.raw`git\s+branch\s+-D`],
  'git branch force delete (long flags)': [String.raw`git\s+branch`],
  'git branch force delete (long flags, force-first)': [String.raw`git\s+branch`],
  'chmod +x followed by immediate execution': [String.raw`chmod\s+\+x`],
  'sudo with privilege flag (stdin/askpass/shell/list)': ['sudo'],
  'sudo with combined-flag privilege escalation': ['sudo'],
  'script execution via -e/-c flag': [String.raw`(python[23]?|perl|ruby|node)\s+-[ec]\s+`],
  'script execution via heredoc': [String.raw`(python[23]?|perl|ruby|node)\s+<<`],
};

/** True when an entry approves `key`: the key itself or one of its legacy aliases. */
function entriesApproveKey(entries: ReadonlySet<string>, key: string): boolean {
  if (entries.has(key)) return true;
  const aliases = LEGACY_KEY_ALIASES[key as DangerousPatternKey] ?? [];
  return aliases.some((alias) => entries.has(alias));
}

// Options that hand the next argument to an interpreter as code (`-c`, `-lc`,
// `-e`, `--command`, `--eval`): with one of them, a quoted `;` is code too.
const CODE_OPTION = /(?:^|[ \t])(?:-[^-\s]*[ce]|--(?:command|eval))(?:[= \t]|$)/;
const CONTROL_CHARACTERS = new Set([';', '&', '|', '<', '>', '`', '\n', '\r']);

/**
 * True when the command is compound, so text matching is unsafe. Quote-aware,
 * as upstream: an unquoted `;`, `&`, `|`, `<`, `>`, backtick, newline, CR or
 * `$(`; `$` or a backtick inside double quotes; an unterminated quote; or a
 * quoted or escaped control character when an option passes code to an
 * interpreter (`bash -c 'a; b'`). Quoted text that is only data
 * (`cargo bench -- '^a(b|c)$'`) is not compound.
 */
export function hasShellOperator(command: string): boolean {
  let quote: '' | "'" | '"' = '';
  let quotedControl = false;
  for (let i = 0; i < command.length; i += 1) {
    const ch = command.charAt(i);
    if (quote === "'") {
      if (ch === "'") quote = '';
      else if (CONTROL_CHARACTERS.has(ch)) quotedControl = true;
      continue;
    }
    if (quote === '"') {
      if (ch === '\\') {
        if (CONTROL_CHARACTERS.has(command.charAt(i + 1))) quotedControl = true;
        i += 1;
      } else if (ch === '"') quote = '';
      else if (ch === '$' || ch === '`') return true;
      else if (CONTROL_CHARACTERS.has(ch)) quotedControl = true;
      continue;
    }
    if (ch === '\\') {
      if (CONTROL_CHARACTERS.has(command.charAt(i + 1))) quotedControl = true;
      i += 1;
    } else if (ch === "'" || ch === '"') quote = ch;
    else if (CONTROL_CHARACTERS.has(ch)) return true;
    else if (ch === '$' && command.charAt(i + 1) === '(') return true;
  }
  if (quote !== '') return true;
  return quotedControl && CODE_OPTION.test(command);
}

/** fnmatch-style glob (case-sensitive): `*`, `?`, `[abc]`, `[!abc]`, `[a-z]`. */
export function globToRegExp(glob: string): RegExp {
  let source = '';
  for (let i = 0; i < glob.length; i += 1) {
    const ch = glob.charAt(i);
    if (ch === '*') source += '[\\s\\S]*';
    else if (ch === '?') source += '[\\s\\S]';
    else if (ch === '[') {
      // A class needs a closing `]` after at least one member; `]` first is a member.
      let j = i + 1;
      if (glob.charAt(j) === '!') j += 1;
      if (glob.charAt(j) === ']') j += 1;
      while (j < glob.length && glob.charAt(j) !== ']') j += 1;
      if (j >= glob.length) {
        source += '\\[';
        continue;
      }
      let body = glob.slice(i + 1, j);
      const negated = body.startsWith('!');
      if (negated) body = body.slice(1);
      source += `[${negated ? '^' : ''}${body.replace(/[\\^\]]/g, '\\$&')}]`;
      i = j;
    } else source += ch.replace(/[\\^$.|+(){}[\]/-]/g, '\\$&');
  }
  return new RegExp(`^${source}$`);
}

/** True when `entry` approves the command text (exact or glob); never for compound commands. */
export function entryMatchesCommand(entry: string, command: string): boolean {
  const text = command.trim();
  const pattern = entry.trim();
  if (pattern === '' || hasShellOperator(text)) return false;
  if (pattern === text) return true;
  return /[*?[]/.test(pattern) && globToRegExp(pattern).test(text);
}

/**
 * Whether the allowlist approves a command that needs approval under `keys`:
 * every key is listed (by its text or a legacy alias), or an entry matches
 * the command text.
 */
export function allowlistApproves(entries: readonly string[], command: string, keys: readonly string[]): boolean {
  const set = new Set(entries);
  if (keys.length > 0 && keys.every((k) => entriesApproveKey(set, k))) return true;
  return entries.some((entry) => entryMatchesCommand(entry, command));
}
