/**
 * The dangerous-command pattern table (tool-runtime spec §5), at parity with
 * upstream hermes-agent (docs/hermes-compat.md §5.2).
 *
 * Each entry's key is the description shown to the user and stored in
 * allowlists, so the keys are upstream's strings, verbatim and in upstream's
 * order: the first pattern that matches any variant of a command wins.
 *
 * The regexes run on the variants from `normalize.ts`: lower-case, quotes
 * resolved, one space between words, and most of them starting with a word in
 * command position. That is why almost every pattern is anchored with `^` and
 * names the command: `echo "rm -rf /opt"` has no variant that starts with `rm`.
 *
 * Linear time matters because the input is untrusted and may be large. The
 * patterns therefore avoid two unbounded wildcards in a row: arguments are
 * skipped a whole word at a time (`\S+\s+`, whose parts cannot overlap),
 * alternatives that could consume the same text are made disjoint with a
 * lookahead, and "A somewhere and B somewhere" is written as two lookaheads from
 * the start rather than `A.*B` tried at every position.
 */

import { hasMalformedPayload, MALFORMED_PAYLOAD_DESCRIPTION } from './malformed.js';
import { findReadToolExec, readToolKey } from './read-tools.js';

/**
 * The pattern keys, in the order they are checked: upstream hermes-agent's
 * `DANGEROUS_PATTERNS` order, then its structural findings (`-c`/`-e` flags,
 * interpreter heredocs). Keys are upstream's description strings verbatim, so
 * a `command_allowlist` written for upstream means the same here.
 */
export const DANGEROUS_PATTERN_KEYS = [
  'delete in root path',
  'recursive delete',
  'recursive delete (long flag)',
  'recursive delete (flags after operands)',
  'Windows cmd destructive delete',
  'Windows PowerShell destructive delete',
  'PowerShell encoded command execution',
  'PowerShell destructive delete (Remove-Item)',
  'Windows destructive delete (recursive/quiet switch)',
  'pipe remote content to PowerShell (iwr | iex)',
  'execute remote content via Invoke-Expression',
  'force kill processes (taskkill /F)',
  'force kill processes (Stop-Process -Force)',
  'format filesystem (Format-Volume)',
  'wipe disk (Clear-Disk)',
  'disk partitioning (diskpart)',
  'format drive (format.com)',
  'wipe free space (cipher /w)',
  'grant Everyone access (icacls)',
  'reset ACLs recursively (icacls /reset)',
  'delete volume shadow copies (vssadmin)',
  'delete backups (wbadmin)',
  'modify boot configuration (bcdedit /set)',
  'registry delete (reg delete)',
  'registry value delete (Remove-ItemProperty -Force)',
  'force stop service (Stop-Service -Force)',
  'stop/delete service (sc)',
  'access to SSH keys (Windows path)',
  'world/other-writable permissions',
  'recursive world/other-writable (long flag)',
  'recursive chown to root',
  'recursive chown to root (long flag)',
  'format filesystem',
  'disk copy',
  'raw block device wipe (shred/wipefs/blkdiscard/sgdisk)',
  'write to block device',
  'SQL DROP',
  'SQL DELETE without WHERE',
  'SQL TRUNCATE',
  'overwrite system config',
  'stop/restart system service',
  'kill all processes',
  'force kill processes',
  'force kill processes (killall -KILL)',
  'force kill processes (killall -s KILL)',
  'kill processes by regex (killall -r)',
  'fork bomb',
  'pipe remote content to shell',
  'execute remote script via process substitution',
  'execute remote content via command substitution',
  'cloud metadata endpoint access (instance credentials)',
  'pipe decoded content to shell (possible command obfuscation)',
  'pipe xxd-decoded content to shell (possible command obfuscation)',
  'pipe tr-transformed output to shell (possible command obfuscation)',
  'pipe openssl-decoded content to shell (possible command obfuscation)',
  'overwrite system file via tee',
  'overwrite system file via redirection',
  'overwrite project env/config via tee',
  'overwrite project env/config via redirection',
  'xargs with rm',
  'find -exec/-execdir rm',
  'find dynamic shell word may expand to destructive flag',
  'find -delete',
  'dynamic shell word may expand to arbitrary program execution flag',
  'docker with remote daemon redirect (-H/--host)',
  'docker with daemon redirect (--context: alternate daemon)',
  'docker context use (switches default daemon for future commands)',
  'podman with remote daemon redirect (--url/--connection/--identity)',
  'podman remote mode (-r/--remote: remote daemon)',
  'docker/podman daemon redirect via environment (DOCKER_HOST/CONTAINER_HOST)',
  'docker compose restart/stop/kill/down (container lifecycle)',
  'docker restart/stop/kill (container lifecycle)',
  'kill process via pgrep/pidof expansion (self-termination)',
  'kill process via backtick pgrep/pidof expansion (self-termination)',
  'copy/move file into system config path',
  'overwrite project env/config file',
  'copy/move file into sensitive credential/SSH/shell-rc path',
  'in-place edit of sensitive credential/SSH/shell-rc path',
  'in-place edit of sensitive credential/SSH/shell-rc path (long flag)',
  'in-place edit of sensitive credential/SSH/shell-rc path (perl/ruby)',
  'in-place edit of system config',
  'in-place edit of system config (long flag)',
  'shell execution via heredoc',
  'git reset --hard (destroys uncommitted changes)',
  'git force push (rewrites remote history)',
  'git force push short flag (rewrites remote history)',
  'git clean with force (deletes untracked files)',
  'git branch force delete',
  'git branch force delete (long flags)',
  'git branch force delete (long flags, force-first)',
  'chmod +x followed by immediate execution',
  'sudo with privilege flag (stdin/askpass/shell/list)',
  'sudo with combined-flag privilege escalation',
  'package manager uninstall',
  'command parser limit or malformed executable payload',
  'shell command via -c/-lc flag',
  'script execution via -e/-c flag',
  'script execution via heredoc',
  'arbitrary program execution via rg --pre',
  'arbitrary program execution via rg --hostname-bin',
  'arbitrary program execution via sort --compress-program',
  'arbitrary program execution via ag --pager',
  'arbitrary program execution via man --pager',
  'arbitrary program execution via man --html',
  'arbitrary program execution via man -P',
  'arbitrary program execution via man -H',
  // Berth's own, after upstream's: see DYNAMIC_COMMAND_NAME.
  'command name built at run time (variable, substitution or eval of one)',
] as const;

/** One of the pattern keys. */
export type DangerousPatternKey = (typeof DANGEROUS_PATTERN_KEYS)[number];

/** A row of the table: the key (also the description) and its regex. */
export interface DangerousPattern {
  readonly key: DangerousPatternKey;
  readonly regex: RegExp;
  /**
   * A second condition on the command as written (NFKC, case kept), for the
   * one rule where letter case is the meaning: `git branch -D` forces, `-d`
   * does not. Variants are lower-case, so they cannot tell.
   */
  readonly caseSensitive?: RegExp;
  /**
   * Where the regex looks: command-position variants (the default), or
   * `skeleton`, the script text with quoted strings blanked, for rules about
   * unquoted shell syntax inside a word (`-del*`, `--pre{,}`) that resolving
   * quotes would erase.
   */
  readonly scope?: 'skeleton';
  /**
   * A further check on each variant the regex matched, for rules an option
   * walk decides better than a regex (the read tools' program options).
   */
  readonly confirm?: (variant: string, written: string) => boolean;
}

/** What a pattern is matched against. */
export interface PatternInput {
  /** The normalised command and its command-position variants. */
  readonly variants: readonly string[];
  /** Script texts with quoted strings blanked. */
  readonly skeletons: readonly string[];
  /** The command as written (NFKC, case kept). */
  readonly written: string;
}

// --- Fragments -------------------------------------------------------------

/** Start of a command: its name may carry a path (`/bin/rm`). */
export const CMD = String.raw`^(?:\S*/)?`;
/** End of the current word. */
export const END = String.raw`(?=\s|$)`;
/** Any number of whole arguments, as few as possible. */
export const ARGS = String.raw`(?:\S+\s+)*?`;
/** Arguments of tee up to a target, not crossing an input redirection. */
const TEE_ARGS = String.raw`(?:(?!\d*<)\S+\s+)*?`;
/** Options only (each may take one value), bounded because they are few. */
const OPTS = String.raw`(?:-\S+\s+(?:[^-\s]\S*\s+)?){0,8}?`;

const SHELL = String.raw`(?:ba|da|z|k|mk|a|c|tc|fi|ya|po)?sh`;
const INTERPRETER = String.raw`(?:python[\d.]*|pypy[\d.]*|perl[\d.]*|ruby[\d.]*|node(?:js)?|deno|bun|php[\d.]*|lua(?:jit)?[\d.]*|rscript|julia|osascript|pwsh|powershell|tclsh|groovy)`;
const FETCH = String.raw`(?:curl|wget|fetch|https?|xh|aria2c)`;
/** A redirection variant (`2>> target`), up to the target. */
const REDIRECT = String.raw`^(?:\d+|&)?(?:>>?|>&|>\||<>)\s*`;
/** A later stage of the same pipeline is a shell or an interpreter. */
const PIPED_TO_SHELL = String.raw`(?=[\s\S]*?\|\s+(?:\S*/)?(?:${SHELL}|${INTERPRETER})(?:\s|$))`;

const HOME = String.raw`(?:~|/root|/home/[^/\s]+)`;
const ETC = String.raw`(?:/private)?/etc/`;
/** SSH directory, shell rc files and credential files in a home directory. */
const SENSITIVE = String.raw`${HOME}/\.(?:ssh(?:/\S*)?|bashrc|bash_profile|bash_login|zshrc|zprofile|zshenv|zlogin|profile|netrc|pgpass|npmrc|pypirc)${END}`;
/** System directories whose files are not configuration but are as critical. */
const SYSTEM_DIR = String.raw`/(?:usr|bin|sbin|lib(?:32|64|x32)?|boot|sys|proc/sys)/`;
/**
 * A project `.env`, any `.env.*` (upstream counts `.env.example` too: it is
 * read by tools that load the real one when it is missing) or `config.yaml`
 * (`config.yml` too: the same file spelled the other way).
 */
const PROJECT_CONFIG = String.raw`(?:\S*/)?(?:\.env(?:\.[^/\s]+)?|config\.ya?ml)${END}`;
const BLOCK_DEVICE = String.raw`/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|r?disk\d|loop|md|dm-|mapper/|disk/by-|nbd|rbd|sr)`;

/**
 * A database client somewhere in the text. SQL handed to a client is gated;
 * so is a bare statement in command position (below). SQL that is only text
 * (`grep -ri "drop table"`, `git commit -m "drop table users"`) is not.
 */
const SQL_CLIENT = String.raw`\b(?:psql|pgcli|mysql|mariadb|mycli|sqlite3?|litecli|sqlcmd|sqlplus|duckdb|clickhouse(?:-client)?|cockroach|usql|snowsql|bq|trino|presto|beeline|spark-sql|cqlsh|dbshell|dbconsole)\b`;
const WITH_SQL_CLIENT = String.raw`^(?=[\s\S]*?${SQL_CLIENT})[\s\S]*?`;
/** Either a client somewhere, or the statement starts a command. */
const SQL_AT = (statement: string): string[] => [`${WITH_SQL_CLIENT}\\b${statement}`, `^${statement}`];

const RECURSIVE_SHORT = String.raw`-[^-\s]*r\S*`;
// getopt accepts any unambiguous prefix of a long option; for rm `--r` is one.
const RECURSIVE_LONG = String.raw`--r(?:e(?:c(?:u(?:r(?:s(?:i(?:ve?)?)?)?)?)?)?)?`;
/** rm words before a flag; a bare `--` ends the options, so the scan stops there. */
const RM_WORDS = String.raw`(?:(?!--(?:\s|$))\S+\s+)*?`;

/** Mode words that give others (or all) write access. */
const WORLD_WRITABLE_MODE = String.raw`(?:[0-7]?[0-7]{2}[2367]|(?:[^\s,]*,)*[ugo]*[oa][ugo]*[+=][rwxst]*w\S*)`;
const EXECUTABLE_MODE = String.raw`(?:(?:[^\s,]*,)*[ugoa]*\+[rwxst]*x\S*|[0-7]?[1357][0-7]{2})`;

/** `git` and its global options (`-C dir`, `-c k=v`, `--no-pager`), up to the subcommand. */
const GIT = String.raw`${CMD}git\s+(?:-c\s+\S+\s+|-(?!c\s)\S+\s+)*`;
const DECODER = String.raw`(?:(?:base(?:64|32|16)|basenc)\s+(?:[^\s|]+\s+){0,6}?(?:-[^-\s]*d\S*|--decode)${END}|uudecode|rev${END}|gunzip|zcat)`;
const XXD_DECODER = String.raw`xxd\s+(?:[^\s|]+\s+){0,6}?-[^-\s]*r`;
const OPENSSL_DECODER = String.raw`openssl\s+(?:base64|enc)\s+(?:[^\s|]+\s+){0,8}?-d${END}`;
/** `A | ... | shell` where A is the decoder, or a shell runs `$(A ...)`. */
const DECODED_TO_SHELL = (decoder: string): string[] => [
  String.raw`^(?=[\s\S]*?(?:^|\|\s+)(?:\S*/)?${decoder})${PIPED_TO_SHELL}`,
  String.raw`${CMD}(?:${SHELL}|eval|source|\.)\s+(?=[\s\S]*?(?:\$\(|\x60|<\())(?=[\s\S]*?\b${decoder})`,
];
const SED_SHORT = String.raw`${CMD}g?sed\s+(?=${ARGS}-[^-\s]*i\S*${END})`;
const SED_LONG = String.raw`${CMD}g?sed\s+(?=${ARGS}--in-place\S*${END})`;
const PERL_RUBY = String.raw`${CMD}(?:perl[\d.]*|ruby)\s+(?=${ARGS}-[^-\s]*i\S*${END})`;
const AWK_INPLACE = String.raw`${CMD}g?awk\s+(?=${ARGS}-i\s+inplace${END})`;
const HEREDOC_INTO = (program: string): string[] => [
  String.raw`${CMD}${program}\s+${ARGS}<<`,
  // cat <<EOF | python3
  String.raw`${CMD}cat\s+(?=${ARGS}<<)[\s\S]*\|\s+(?:\S*/)?${program}${END}`,
];
/** Windows verbs run directly, or inside `cmd /c` / `powershell -command` text. */
const WIN = String.raw`(?:^|[\s"'&|;(])`;
/** `sudo` and its own options, up to the option being looked for. */
const SUDO_OPTS = String.raw`${CMD}sudo\s+(?:-[ugpcdrth]\s+\S+\s+|-(?![ugpcdrth]\s)[^-\s]\S*\s+|--[^\s=]+(?:=\S*)?\s+)*?`;
/** Package-manager options before the subcommand (each may take a value). */
const PKG = (manager: string, verbs: string): string => String.raw`${CMD}${manager}\s+${OPTS}(?:${verbs})${END}`;

/** The fork bomb `:(){ :|:& };:` and its renamed forms, in raw shell text. */
export const FORK_BOMB = String.raw`(?:^|[\s;&|({])(?:function\s+)?([\w:.-]+)\s*\(\s*\)\s*\{\s*\1\s*\|\s*\1\s*&\s*;?\s*\}\s*;?\s*\1(?=$|[\s;&|)])`;

/** Cloud instance-metadata addresses (AWS, GCP, Azure, Alibaba; IPv4 and IPv6). */
const METADATA = String.raw`(?<![\d.])(?:169\.254\.169\.254|100\.100\.100\.200|2852039166|0xa9fea9fe)(?![\d.])|(?<![\w.-])metadata\.google\.internal(?![\w.-])|(?<![\w:])fd00:ec2::254(?![\w:])`;

/** A run of word characters that cannot cross a command boundary. */
const WORD = String.raw`[^\s;&|()\x60]`;

/**
 * A command start in raw script text: the beginning, after a separator or an
 * opener, and after the wrappers that run the next word. No part of it can
 * run past the next command boundary, so trying it at every start stays linear.
 */
const SCRIPT_CMD = String.raw`(?:^|[\n;&|(\x60{]|\$\()\s*(?:(?:[\w.+~-]*/)*(?:sudo|doas|env|exec|nohup|setsid|time|command|builtin|nice|stdbuf|ionice|chrt|taskset|timeout)\s+(?:-${WORD}*\s+|\w+=${WORD}*\s+|\d${WORD}*\s+)*)*(?:[\w.+~-]*/)*`;

/** The read tools' program options, in upstream's order (tool, then option). */
/**
 * A command whose name the shell only knows once it runs: a variable or
 * substitution in command position (`${c}m -rf x`, `$(echo rm) -rf x`,
 * `` `echo rm` -rf x ``, `"$@"`), which also covers `eval` of one, since an
 * eval's payload is a variant of its own (`eval "$x"` has the variant `$x`).
 * No rule can read such a name, so it is never let through unasked. An
 * assignment (`x=$(pwd)`) and a redirection (`> $f`) name no command. Berth's
 * own key, last: a command that matched an upstream key keeps it.
 */
const DYNAMIC_COMMAND_NAME = String.raw`^(?![<>&]|\d*[<>]|[a-z_][a-z0-9_]*\+?=)[^\s$\x60]*[$\x60]`;

const READ_TOOL_KEYS = [
  { tool: 'rg', option: '--pre' },
  { tool: 'rg', option: '--hostname-bin' },
  { tool: 'sort', option: '--compress-program' },
  { tool: 'ag', option: '--pager' },
  { tool: 'man', option: '--pager' },
  { tool: 'man', option: '--html' },
  { tool: 'man', option: '-P' },
  { tool: 'man', option: '-H' },
] as const;

function readToolPattern(tool: string, option: string): DangerousPattern {
  const key = `arbitrary program execution via ${tool} ${option}` as DangerousPatternKey;
  return {
    key,
    regex: new RegExp(String.raw`${CMD}${tool}\s`),
    confirm: (variant, written) => {
      const found = findReadToolExec(variant, written);
      return found !== undefined && readToolKey(found) === key;
    },
  };
}

function pattern(key: DangerousPatternKey, ...sources: string[]): DangerousPattern {
  const source = sources.length === 1 ? (sources[0] ?? '') : sources.map((s) => `(?:${s})`).join('|');
  return { key, regex: new RegExp(source) };
}

/** The table, in upstream's order; the first match wins. */
export const DANGEROUS_PATTERNS: readonly DangerousPattern[] = [
  // Any absolute path given to rm (the spec's example: `sudo rm -rf /opt`).
  pattern('delete in root path', String.raw`${CMD}rm\s+${ARGS}/`),
  pattern('recursive delete', String.raw`${CMD}rm\s+(?:(?!--(?:\s|$))-\S+\s+)*?${RECURSIVE_SHORT}${END}`),
  pattern('recursive delete (long flag)', String.raw`${CMD}rm\s+(?:(?!--(?:\s|$))-\S+\s+)*?${RECURSIVE_LONG}${END}`),
  // Leading options, then an operand, then (after any words) the flag. The
  // option and operand words start differently, so the scan cannot backtrack.
  pattern(
    'recursive delete (flags after operands)',
    String.raw`${CMD}rm\s+(?:(?!--(?:\s|$))-\S+\s+)*[^-\s]\S*\s+${RM_WORDS}(?:${RECURSIVE_SHORT}|${RECURSIVE_LONG})${END}`,
  ),
  pattern('Windows cmd destructive delete', String.raw`${CMD}cmd(?:\.exe)?\s+/[ck]\s+[\s\S]*?\b(?:del|erase|rd|rmdir)\b`),
  pattern(
    'Windows PowerShell destructive delete',
    String.raw`${CMD}(?:powershell|pwsh)(?:\.exe)?\s+(?:-\S+\s+)*?["']?(?:remove-item|rmdir|erase|del|rd|ri|rm)\b`,
  ),
  // -ec is accepted by PowerShell as well (any unambiguous prefix).
  pattern(
    'PowerShell encoded command execution',
    String.raw`${CMD}(?:powershell|pwsh)(?:\.exe)?\s+${ARGS}-(?:e|ec|enc|encodedcommand)(?:\s|$)`,
  ),
  pattern('PowerShell destructive delete (Remove-Item)', String.raw`${WIN}remove-item\b[^\n;|&]*?\s-(?:recurse|force)\b`),
  pattern('Windows destructive delete (recursive/quiet switch)', String.raw`${WIN}(?:del|erase|rd|rmdir)\s+(?:/[a-z]\s+)*/[sq]\b`),
  pattern(
    'pipe remote content to PowerShell (iwr | iex)',
    String.raw`${WIN}(?:iwr|invoke-webrequest|invoke-restmethod|irm|curl|wget)\b[^\n|]*\|\s*(?:iex|invoke-expression)\b`,
  ),
  pattern(
    'execute remote content via Invoke-Expression',
    String.raw`${WIN}(?:iex|invoke-expression)\s*\(\s*(?:iwr|invoke-webrequest|invoke-restmethod|irm)\b`,
  ),
  pattern('force kill processes (taskkill /F)', String.raw`${WIN}taskkill(?:\.exe)?\s[^\n;|&]*?/f\b`),
  pattern('force kill processes (Stop-Process -Force)', String.raw`${WIN}stop-process\s[^\n;|&]*?-force\b`),
  pattern('format filesystem (Format-Volume)', String.raw`${WIN}format-volume\b`),
  pattern('wipe disk (Clear-Disk)', String.raw`${WIN}clear-disk\b`),
  pattern('disk partitioning (diskpart)', String.raw`${WIN}diskpart(?:\.exe)?\b`),
  pattern('format drive (format.com)', String.raw`${WIN}format(?:\.com)?\s+[a-z]:`),
  pattern('wipe free space (cipher /w)', String.raw`${WIN}cipher(?:\.exe)?\s+/w\b`),
  pattern(
    'grant Everyone access (icacls)',
    // Up to the first /grant (a trustee after any /grant follows the first
    // one), so a long run of /grant words is scanned once, not once per word.
    String.raw`${WIN}icacls(?:\.exe)?\s(?:(?!/grant\b)[^\n;|&])*/grant\b[^\n;|&]*?(?:\b(?:everyone|todos|jeder|tout\s+le\s+monde)\b|\*s-1-1-0\b)`,
  ),
  pattern('reset ACLs recursively (icacls /reset)', String.raw`${WIN}icacls(?:\.exe)?\s[^\n;|&]*?/reset\b`),
  pattern('delete volume shadow copies (vssadmin)', String.raw`${WIN}vssadmin(?:\.exe)?\s[^\n;|&]*?\bdelete\s+shadows\b`),
  pattern('delete backups (wbadmin)', String.raw`${WIN}wbadmin(?:\.exe)?\s[^\n;|&]*?\bdelete\b`),
  pattern('modify boot configuration (bcdedit /set)', String.raw`${WIN}bcdedit(?:\.exe)?\s[^\n;|&]*?/set\b`),
  pattern('registry delete (reg delete)', String.raw`${WIN}reg(?:\.exe)?\s+delete\b`),
  pattern('registry value delete (Remove-ItemProperty -Force)', String.raw`${WIN}remove-itemproperty\s[^\n;|&]*?-force\b`),
  pattern('force stop service (Stop-Service -Force)', String.raw`${WIN}stop-service\s[^\n;|&]*?-force\b`),
  pattern('stop/delete service (sc)', String.raw`${WIN}sc(?:\.exe)?\s+(?:stop|delete)\b`),
  pattern(
    'access to SSH keys (Windows path)',
    String.raw`\busers[\\/][^\\/\s]+[\\/]\.ssh\b`,
    // The user's own Windows home was folded to `~`; Windows file verbs on it count too.
    String.raw`${WIN}(?:copy|xcopy|robocopy|move|type|copy-item|move-item|set-content|add-content|out-file|get-content)\b[^\n;|&]*?\s~/\.ssh\b`,
  ),
  // A mode that starts with the world-writable clause (upstream's shape), or
  // any world-writable mode list without --recursive; the rest is key 31.
  pattern(
    'world/other-writable permissions',
    String.raw`${CMD}chmod\s+(?:-\S+\s+)*?(?:[0-7]?[0-7]{2}[2367]|[ugo]*[oa][ugo]*[+=][rwxst]*w[rwxst]*)(?=[\s,]|$)`,
    String.raw`${CMD}chmod\s+(?!${ARGS}--recursive${END})(?:-\S+\s+)*?${WORLD_WRITABLE_MODE}${END}`,
  ),
  pattern(
    'recursive world/other-writable (long flag)',
    String.raw`${CMD}chmod\s+(?=${ARGS}--recursive${END})${ARGS}${WORLD_WRITABLE_MODE}${END}`,
  ),
  pattern(
    'recursive chown to root',
    String.raw`${CMD}chown\s+(?=${ARGS}${RECURSIVE_SHORT}${END})${ARGS}(?:root|0)(?::\S*)?${END}`,
  ),
  pattern(
    'recursive chown to root (long flag)',
    String.raw`${CMD}chown\s+(?=${ARGS}--recur[a-z]*${END})${ARGS}(?:root|0)(?::\S*)?${END}`,
  ),
  pattern(
    'format filesystem',
    String.raw`${CMD}(?:mkfs(?:\.\S+)?|mke2fs|mkswap|mkdosfs|mkntfs|mkexfatfs|newfs(?:_\S+)?)${END}`,
    String.raw`${CMD}diskutil\s+(?:erase\S*|reformat|partitiondisk)${END}`,
  ),
  pattern('disk copy', String.raw`${CMD}dd\s+${ARGS}(?:if|of)=`),
  pattern(
    'raw block device wipe (shred/wipefs/blkdiscard/sgdisk)',
    String.raw`${CMD}(?:shred|blkdiscard|wipefs|sgdisk)\s+${ARGS}${BLOCK_DEVICE}`,
  ),
  pattern(
    'write to block device',
    String.raw`${REDIRECT}${BLOCK_DEVICE}`,
    String.raw`${CMD}tee\s+${ARGS}${BLOCK_DEVICE}`,
    String.raw`${CMD}(?:cp|mv|install)\s+(?:\S+\s+)+${BLOCK_DEVICE}\S*\s*$`,
  ),
  pattern(
    'SQL DROP',
    ...SQL_AT(String.raw`drop\s+(?:temporary\s+)?(?:table|database|schema|view|materialized\s+view|index|sequence|user|role|function|procedure|trigger|type|keyspace|collection)\b`),
  ),
  // The statement ends right after the table (and an optional alias).
  pattern(
    'SQL DELETE without WHERE',
    ...SQL_AT(String.raw`delete\s+from\s+(?:only\s+)?[^\s;'"()]+(?:\s+(?:as\s+)?(?!where\b|using\b|returning\b)[a-z_][\w$]*)?\s*(?:;|'|"|\)|\n|$)`),
  ),
  pattern('SQL TRUNCATE', ...SQL_AT(String.raw`truncate\s+(?:table\s+)?(?:only\s+)?[a-z_"\x60\[]`)),
  pattern('overwrite system config', String.raw`${REDIRECT}${ETC}`),
  pattern(
    'stop/restart system service',
    String.raw`${CMD}systemctl\s+(?:-\S+\s+)*(?:stop|restart|try-restart|reload-or-restart|try-reload-or-restart|condrestart|disable|mask|kill|isolate)${END}`,
    String.raw`${CMD}service\s+\S+\s+(?:stop|restart|force-reload|condrestart|try-restart)${END}`,
    String.raw`${CMD}(?:rc-service\s+\S+|initctl|sv)\s+(?:stop|restart|down|kill)${END}`,
  ),
  pattern(
    'kill all processes',
    // kill with pid -1 (the first dash word is the signal, not a pid).
    String.raw`${CMD}kill\s+(?:-1\s*$|(?:-s\s+\S+|-n\s+\S+|-[^-\s]\S*|--)\s+${ARGS}-1${END})`,
    String.raw`${CMD}killall5${END}`,
    String.raw`${CMD}(?:pkill|killall|skill|slay)\s+${ARGS}(?:-u|--user)(?:=|\s|$)`,
  ),
  // Upstream gates `pkill -9`; other spellings of the same signal to pkill or
  // skill count too. Plain `kill -9 PID` is not gated (one process, by id).
  pattern(
    'force kill processes',
    String.raw`${CMD}(?:pkill|skill)\s+${ARGS}(?:-9|-kill|-sigkill|-s\s+(?:9|kill|sigkill)|--signal(?:=|\s+)(?:9|kill|sigkill)|-n\s+9)${END}`,
  ),
  pattern('force kill processes (killall -KILL)', String.raw`${CMD}killall\s+(?:-\S+\s+)*?-(?:9|kill|sigkill)${END}`),
  pattern(
    'force kill processes (killall -s KILL)',
    String.raw`${CMD}killall\s+(?:-\S+\s+)*?(?:-s\s+|--signal(?:=|\s+))(?:9|kill|sigkill)${END}`,
  ),
  pattern('kill processes by regex (killall -r)', String.raw`${CMD}killall\s+(?:-\S+\s+)*?(?:-r|--regexp)${END}`),
  pattern('fork bomb', FORK_BOMB),
  pattern('pipe remote content to shell', String.raw`^(?=[\s\S]*?(?:^|\|\s+)(?:\S*/)?${FETCH}\s)${PIPED_TO_SHELL}`),
  pattern(
    'execute remote script via process substitution',
    String.raw`${CMD}(?:${SHELL}|${INTERPRETER}|source|\.)\s+${ARGS}<\(\s*(?:\S*/)?${FETCH}\s`,
  ),
  pattern(
    'execute remote content via command substitution',
    String.raw`${CMD}(?:${SHELL}|${INTERPRETER}|eval|source|\.|exec)\s+${ARGS}(?:\$\(|\x60)\s*(?:\S*/)?${FETCH}\s`,
    // The output itself in command position: $(curl -s https://x)
    String.raw`^(?:\$\(|\x60)\s*(?:\S*/)?${FETCH}\s`,
  ),
  // Anywhere in the text, as upstream: an address is as dangerous in a
  // variable or a config file written by the command as in a curl argument.
  pattern('cloud metadata endpoint access (instance credentials)', METADATA),
  pattern('pipe decoded content to shell (possible command obfuscation)', ...DECODED_TO_SHELL(DECODER)),
  pattern('pipe xxd-decoded content to shell (possible command obfuscation)', ...DECODED_TO_SHELL(XXD_DECODER)),
  pattern(
    'pipe tr-transformed output to shell (possible command obfuscation)',
    String.raw`^(?=[\s\S]*?\|\s+(?:\S*/)?tr\s)${PIPED_TO_SHELL}`,
  ),
  pattern('pipe openssl-decoded content to shell (possible command obfuscation)', ...DECODED_TO_SHELL(OPENSSL_DECODER)),
  pattern('overwrite system file via tee', String.raw`${CMD}tee\s+${TEE_ARGS}(?:${ETC}|${SYSTEM_DIR}|${SENSITIVE})`),
  pattern('overwrite system file via redirection', String.raw`${REDIRECT}(?:${SYSTEM_DIR}|${SENSITIVE})`),
  pattern('overwrite project env/config via tee', String.raw`${CMD}tee\s+${TEE_ARGS}${PROJECT_CONFIG}`),
  pattern('overwrite project env/config via redirection', String.raw`${REDIRECT}${PROJECT_CONFIG}`),
  pattern(
    'xargs with rm',
    String.raw`${CMD}xargs\s+(?:-[adeilnps]\s+[^-\s]\S*\s+|-\S+\s+)*?(?:sudo\s+)?(?:(?:\S*/)?${SHELL}\s+-[^-\s]*c\s+)?(?:\S*/)?rm${END}`,
  ),
  pattern(
    'find -exec/-execdir rm',
    String.raw`${CMD}find\s+${ARGS}-(?:exec|execdir|ok|okdir)\s+(?:sudo\s+)?(?:(?:\S*/)?${SHELL}\s+-[^-\s]*c\s+)?(?:\S*/)?rm${END}`,
  ),
  // Unquoted brace or glob words that the shell turns into -delete or -exec
  // (`find . -{delete,print}`, `find . -del*`), in raw script text.
  {
    key: 'find dynamic shell word may expand to destructive flag',
    scope: 'skeleton',
    regex: new RegExp(
      String.raw`${SCRIPT_CMD}find\s[^;|&\n]*(?<!\S)-(?:\{[^}\s]*(?:delete|exec(?:dir)?)[^}\s]*\}|(?:del(?:ete?)?|exec(?:dir)?)[{*?\[])`,
    ),
  },
  pattern('find -delete', String.raw`${CMD}find\s+${ARGS}-delete${END}`),
  {
    key: 'dynamic shell word may expand to arbitrary program execution flag',
    scope: 'skeleton',
    regex: new RegExp(
      String.raw`${SCRIPT_CMD}(?:rg|sort|ag|man)\s[^;|&\n]*(?<!\S)--(?:pre|hostname-bin|compress-program|pager|html)(?:\{|[*?\[])`,
    ),
  },
  pattern('docker with remote daemon redirect (-H/--host)', String.raw`${CMD}docker\s+${OPTS}(?:-h|--host)(?:=|\s+)\S`),
  pattern('docker with daemon redirect (--context: alternate daemon)', String.raw`${CMD}docker\s+${OPTS}(?:-c|--context)(?:=|\s+)\S`),
  pattern('docker context use (switches default daemon for future commands)', String.raw`${CMD}docker\s+${OPTS}context\s+use${END}`),
  pattern(
    'podman with remote daemon redirect (--url/--connection/--identity)',
    String.raw`${CMD}podman\s+${OPTS}(?:--url|--connection|-c|--identity)(?:=|\s+)\S`,
  ),
  pattern('podman remote mode (-r/--remote: remote daemon)', String.raw`${CMD}podman\s+${OPTS}(?:-r|--remote)${END}`),
  pattern(
    'docker/podman daemon redirect via environment (DOCKER_HOST/CONTAINER_HOST)',
    String.raw`(?:^|[\s;&|(])(?:docker_host|docker_context|container_host|container_connection)=\S`,
  ),
  pattern(
    'docker compose restart/stop/kill/down (container lifecycle)',
    String.raw`${CMD}(?:(?:docker|podman)\s+${OPTS}compose|docker-compose|podman-compose)\s+${OPTS}(?:restart|stop|kill|down)${END}`,
  ),
  pattern(
    'docker restart/stop/kill (container lifecycle)',
    String.raw`${CMD}(?:docker|podman|nerdctl)\s+${OPTS}(?:container\s+)?(?:restart|stop|kill)${END}`,
  ),
  // Killing whatever a name lookup returns can hit the service running the command.
  pattern('kill process via pgrep/pidof expansion (self-termination)', String.raw`${CMD}kill\s+${ARGS}\$\(\s*(?:\S*/)?(?:pgrep|pidof)${END}`),
  pattern(
    'kill process via backtick pgrep/pidof expansion (self-termination)',
    String.raw`${CMD}kill\s+${ARGS}\x60\s*(?:\S*/)?(?:pgrep|pidof)${END}`,
  ),
  pattern(
    'copy/move file into system config path',
    // The destination is the last word, or the -t directory.
    String.raw`${CMD}(?:cp|mv|install|rsync|ln|scp)\s+(?:\S+\s+)+${ETC}\S*\s*$`,
    String.raw`${CMD}(?:cp|mv|install|ln)\s+${ARGS}(?:-t\s*|--target-directory[=\s]\s*)${ETC}`,
  ),
  pattern('overwrite project env/config file', String.raw`${CMD}(?:cp|mv|install)\s+(?:\S+\s+)+${PROJECT_CONFIG}\s*$`),
  pattern(
    'copy/move file into sensitive credential/SSH/shell-rc path',
    String.raw`${CMD}(?:cp|mv|install|rsync|ln|scp)\s+(?:\S+\s+)+${SENSITIVE}\s*$`,
    String.raw`${CMD}(?:cp|mv|install|ln)\s+${ARGS}(?:-t\s*|--target-directory[=\s]\s*)${SENSITIVE}`,
  ),
  pattern(
    'in-place edit of sensitive credential/SSH/shell-rc path',
    String.raw`(?:${SED_SHORT}|${AWK_INPLACE})${ARGS}(?:${SENSITIVE}|${PROJECT_CONFIG})`,
  ),
  pattern(
    'in-place edit of sensitive credential/SSH/shell-rc path (long flag)',
    String.raw`${SED_LONG}${ARGS}(?:${SENSITIVE}|${PROJECT_CONFIG})`,
  ),
  pattern(
    'in-place edit of sensitive credential/SSH/shell-rc path (perl/ruby)',
    String.raw`${PERL_RUBY}${ARGS}(?:${SENSITIVE}|${PROJECT_CONFIG})`,
  ),
  pattern('in-place edit of system config', String.raw`(?:${SED_SHORT}|${PERL_RUBY}|${AWK_INPLACE})${ARGS}${ETC}`),
  pattern('in-place edit of system config (long flag)', String.raw`${SED_LONG}${ARGS}${ETC}`),
  pattern('shell execution via heredoc', ...HEREDOC_INTO(SHELL)),
  // getopt prefixes of --hard are accepted by git too.
  pattern('git reset --hard (destroys uncommitted changes)', String.raw`${GIT}reset\s+${ARGS}--h(?:a(?:rd?)?)?${END}`),
  pattern(
    'git force push (rewrites remote history)',
    String.raw`${GIT}push\s+${ARGS}(?:--forc[a-z-]*(?:=\S*)?|\+\S+)${END}`,
  ),
  pattern('git force push short flag (rewrites remote history)', String.raw`${GIT}push\s+${ARGS}-[^-\s]*f\S*${END}`),
  pattern('git clean with force (deletes untracked files)', String.raw`${GIT}clean\s+${ARGS}(?:-[^-\s]*f\S*|--force)${END}`),
  // Variants are lower-case, so the capital D is checked on the text as written.
  {
    key: 'git branch force delete',
    regex: new RegExp(String.raw`${GIT}branch\s+${ARGS}-[^-\s]*d\S*${END}`),
    caseSensitive: /\bbranch\b[^;|&\n]*?\s-[A-Za-z]*D/,
  },
  pattern(
    'git branch force delete (long flags)',
    String.raw`${GIT}branch\s+${ARGS}(?:-d|--delete)\s+${ARGS}(?:-f|--force)${END}`,
    // -df: both in one bundle
    String.raw`${GIT}branch\s+${ARGS}-[^-\s]*d[^-\s]*f\S*${END}`,
  ),
  pattern(
    'git branch force delete (long flags, force-first)',
    String.raw`${GIT}branch\s+${ARGS}(?:-f|--force)\s+${ARGS}(?:-d|--delete)${END}`,
    String.raw`${GIT}branch\s+${ARGS}-[^-\s]*f[^-\s]*d\S*${END}`,
  ),
  pattern(
    'chmod +x followed by immediate execution',
    // Pair variants: `chmod +x f && ./f`; the second command runs a path.
    String.raw`${CMD}chmod\s+(?=${ARGS}${EXECUTABLE_MODE}${END})[\s\S]*\s(?:&&|;|\|\||&)\s+(?:\.{0,2}/|~/)\S*`,
  ),
  // sudo's own options only (they come before the command): -S/-s, -A/-a,
  // --stdin, --askpass. -i, -l and --shell are not gated, as upstream.
  pattern(
    'sudo with privilege flag (stdin/askpass/shell/list)',
    String.raw`${SUDO_OPTS}(?:-[sa]|--st[a-z]*|--a[a-z]*)${END}`,
  ),
  pattern('sudo with combined-flag privilege escalation', String.raw`${SUDO_OPTS}-(?=[a-z]{2})[a-z]*[sa][a-z]*${END}`),
  pattern(
    'package manager uninstall',
    PKG('npm', 'uninstall|unlink|remove|rm|r|un'),
    PKG('pnpm', 'uninstall|remove|rm|un'),
    String.raw`${CMD}yarn\s+${OPTS}(?:global\s+)?(?:uninstall|remove)${END}`,
    PKG(String.raw`(?:pip[\d.]*|uv\s+pip|(?:python[\d.]*|py)\s+-m\s+pip)`, 'uninstall'),
    PKG('brew', 'uninstall|remove|rm'),
  ),
  // Upstream's structural findings come after the table, in command order; an
  // interpreter or read tool whose quoting does not parse is the first of them
  // when no earlier command already runs code (malformed.ts decides that order).
  {
    key: MALFORMED_PAYLOAD_DESCRIPTION,
    regex: /^/,
    confirm: (_variant, written) => malformedPayload(written),
  },
  pattern(
    'shell command via -c/-lc flag',
    String.raw`${CMD}${SHELL}\s+(?:[-+]o\s+\S+\s+|[-+](?!o\s)\S+\s+)*?-[^-\s]*c[^-\s]*${END}`,
    String.raw`${CMD}(?:su|runuser)\s+${ARGS}(?:-c|--command)(?:=|\s|$)`,
  ),
  pattern(
    'script execution via -e/-c flag',
    String.raw`${CMD}(?:python[\d.]*|pypy[\d.]*|py)\s+(?:-[wx]\s+\S+\s+|-(?![wx]\s)\S+\s+)*?-[^-\s]*c\S*${END}`,
    String.raw`${CMD}(?:perl[\d.]*|ruby[\d.]*|lua(?:jit)?[\d.]*|rscript|julia|osascript|tclsh)\s+(?:-\S+\s+)*?-[^-\s]*e\S*${END}`,
    String.raw`${CMD}(?:node(?:js)?|bun|deno)\s+(?:-\S+\s+)*?(?:-e|-p|-pe|--eval|--print)(?:=|\s|$)`,
    String.raw`${CMD}deno\s+eval${END}`,
    String.raw`${CMD}php[\d.]*\s+(?:-\S+\s+)*?-r${END}`,
    String.raw`${CMD}(?:pwsh|powershell)(?:\.exe)?\s+(?:-\S+\s+)*?-(?:c|command|f|file)${END}`,
  ),
  pattern('script execution via heredoc', ...HEREDOC_INTO(INTERPRETER)),
  ...READ_TOOL_KEYS.map(({ tool, option }) => readToolPattern(tool, option)),
  pattern('command name built at run time (variable, substitution or eval of one)', DYNAMIC_COMMAND_NAME),
];

// The check reads the whole command, the same for every variant: remember the last answer.
let lastPayloadCheck: { readonly written: string; readonly malformed: boolean } | undefined;
function malformedPayload(written: string): boolean {
  if (lastPayloadCheck?.written !== written) lastPayloadCheck = { written, malformed: hasMalformedPayload(written) };
  return lastPayloadCheck.malformed;
}

/** True when a pattern matches one of the variants (and the text as written, where case matters). */
export function patternMatches(p: DangerousPattern, input: PatternInput): boolean {
  const { written } = input;
  const texts = p.scope === 'skeleton' ? input.skeletons : input.variants;
  const confirm = p.confirm;
  const hit =
    confirm === undefined
      ? texts.some((text) => p.regex.test(text))
      : texts.some((text) => p.regex.test(text) && confirm(text, written));
  if (!hit) return false;
  return p.caseSensitive === undefined || p.caseSensitive.test(written);
}
