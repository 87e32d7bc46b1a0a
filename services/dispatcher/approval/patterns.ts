/**
 * The dangerous-command pattern table (tool-runtime spec §5).
 *
 * Each entry's key is the description shown to the user and stored in
 * allowlists, so the keys are the spec's strings, verbatim and in the spec's
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

/** The spec's pattern keys, in the order they are checked. */
export const DANGEROUS_PATTERN_KEYS = [
  'delete in root path',
  'recursive delete',
  'recursive delete (long flag)',
  'world/other-writable permissions',
  'recursive chown to root',
  'format filesystem',
  'disk copy',
  'write to block device',
  'SQL DROP',
  'SQL DELETE without WHERE',
  'SQL TRUNCATE',
  'overwrite system config',
  'stop/restart system service',
  'kill all processes',
  'force kill processes',
  'fork bomb',
  'shell command via -c/-lc flag',
  'script execution via -e/-c flag',
  'pipe remote content to shell',
  'execute remote script via process substitution',
  'execute remote content via command substitution',
  'pipe decoded content to shell (possible command obfuscation)',
  'overwrite system file via tee',
  'overwrite system file via redirection',
  'overwrite project env/config via redirection',
  'xargs with rm',
  'find -exec/-execdir rm',
  'find -delete',
  'docker restart/stop/kill (container lifecycle)',
  'copy/move file into system config path',
  'in-place edit of system config',
  'in-place edit of sensitive credential/SSH/shell-rc path',
  'script execution via heredoc',
  'shell execution via heredoc',
  'git reset --hard (destroys uncommitted changes)',
  'git force push (rewrites remote history)',
  'git clean with force (deletes untracked files)',
  'git branch force delete',
  'chmod +x followed by immediate execution',
  'sudo with privilege flag (stdin/askpass/shell/list)',
] as const;

/** One of the spec's pattern keys. */
export type DangerousPatternKey = (typeof DANGEROUS_PATTERN_KEYS)[number];

/** A row of the table: the key (also the description) and its regex. */
export interface DangerousPattern {
  readonly key: DangerousPatternKey;
  readonly regex: RegExp;
}

// --- Fragments -------------------------------------------------------------

/** Start of a command: its name may carry a path (`/bin/rm`). */
export const CMD = String.raw`^(?:\S*/)?`;
/** End of the current word. */
export const END = String.raw`(?=\s|$)`;
/** Any number of whole arguments, as few as possible. */
export const ARGS = String.raw`(?:\S+\s+)*?`;

const SHELL = String.raw`(?:ba|da|z|k|mk|a|c|tc|fi|ya|po)?sh`;
const INTERPRETER = String.raw`(?:python[\d.]*|pypy[\d.]*|perl[\d.]*|ruby[\d.]*|node(?:js)?|deno|bun|php[\d.]*|lua(?:jit)?[\d.]*|rscript|julia|osascript|pwsh|powershell|tclsh|groovy)`;
const FETCH = String.raw`(?:curl|wget|fetch|https?|xh|aria2c)`;
/** A redirection variant (`2>> target`), up to the target. */
const REDIRECT = String.raw`^(?:\d+|&)?(?:>>?|>&|>\||<>)\s*`;

const HOME = String.raw`(?:~|/root|/home/[^/\s]+)`;
const ETC = String.raw`(?:/private)?/etc/`;
/** SSH directory, shell rc files and credential files in a home directory. */
const SENSITIVE = String.raw`${HOME}/\.(?:ssh(?:/\S*)?|bashrc|bash_profile|bash_login|zshrc|zprofile|zshenv|zlogin|profile|netrc|pgpass|npmrc|pypirc)${END}`;
/** System directories whose files are not configuration but are as critical. */
const SYSTEM_DIR = String.raw`/(?:usr|bin|sbin|lib(?:32|64|x32)?|boot|sys|proc/sys)/`;
/** A project `.env` (not the committed `.env.example` and friends) or `config.yaml`. */
const PROJECT_CONFIG = String.raw`(?:\S*/)?(?:\.env(?:\.(?!(?:example|sample|template|dist)${END})[\w.-]+)?|config\.ya?ml)${END}`;
const BLOCK_DEVICE = String.raw`/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|loop|md|dm-|mapper/|nbd|rbd|sr)`;

/**
 * A database client somewhere in the text. SQL rules need one so that SQL as
 * data (`echo "DROP TABLE" > notes.txt`, `grep -r "drop table"`) passes while
 * `psql -c "DROP TABLE t"` or a heredoc into `mysql` does not.
 */
const SQL_CLIENT = String.raw`\b(?:psql|pgcli|mysql|mariadb|mycli|sqlite3?|litecli|sqlcmd|sqlplus|duckdb|clickhouse(?:-client)?|cockroach|usql|snowsql|bq|trino|presto|beeline|spark-sql|cqlsh|dbshell|dbconsole)\b`;
const WITH_SQL_CLIENT = String.raw`^(?=[\s\S]*?${SQL_CLIENT})[\s\S]*?`;

const RECURSIVE_SHORT = String.raw`-[^-\s]*r\S*`;
// getopt accepts any unambiguous prefix of a long option; for rm `--r` is one.
const RECURSIVE_LONG = String.raw`--r(?:e(?:c(?:u(?:r(?:s(?:i(?:ve?)?)?)?)?)?)?)?`;

/** Mode words that give others (or all) write access. */
const WORLD_WRITABLE_MODE = String.raw`(?:[0-7]?[0-7]{2}[2367]|(?:[^\s,]*,)*[ugo]*[oa][ugo]*[+=][rwxst]*w\S*)`;
const EXECUTABLE_MODE = String.raw`(?:(?:[^\s,]*,)*[ugoa]*\+[rwxst]*x\S*|[0-7]?[1357][0-7]{2})`;

/** `git` and its global options (`-C dir`, `-c k=v`, `--no-pager`), up to the subcommand. */
const GIT = String.raw`${CMD}git\s+(?:-c\s+\S+\s+|-(?!c\s)\S+\s+)*`;
/** Global options of docker-like CLIs, bounded because they are few. */
const DOCKER_OPTIONS = String.raw`(?:-\S+\s+(?:[^-\s]\S*\s+)?){0,8}?`;
const DECODER = String.raw`(?:(?:base(?:64|32)|basenc)\s+(?:[^\s|]+\s+){0,6}?(?:-[^-\s]*d\S*|--decode)${END}|xxd\s+(?:[^\s|]+\s+){0,6}?-[^-\s]*r|openssl\s+(?:base64|enc)\s+(?:[^\s|]+\s+){0,8}?-d${END}|uudecode|rev${END}|gunzip|zcat)`;
const IN_PLACE_EDITOR = String.raw`(?:${CMD}g?sed\s+(?=${ARGS}(?:-[^-\s]*i\S*|--in-place\S*)${END})|${CMD}(?:perl[\d.]*|ruby)\s+(?=${ARGS}-[^-\s]*i\S*${END})|${CMD}g?awk\s+(?=${ARGS}-i\s+inplace${END}))`;
const HEREDOC_INTO = (program: string): string[] => [
  String.raw`${CMD}${program}\s+${ARGS}<<`,
  // cat <<EOF | python3
  String.raw`${CMD}cat\s+(?=${ARGS}<<)[\s\S]*\|\s+(?:\S*/)?${program}${END}`,
];

/** The fork bomb `:(){ :|:& };:` and its renamed forms, in raw shell text. */
export const FORK_BOMB = String.raw`(?:^|[\s;&|({])(?:function\s+)?([\w:.-]+)\s*\(\s*\)\s*\{\s*\1\s*\|\s*\1\s*&\s*;?\s*\}\s*;?\s*\1(?=$|[\s;&|)])`;

function pattern(key: DangerousPatternKey, ...sources: string[]): DangerousPattern {
  const source = sources.length === 1 ? (sources[0] ?? '') : sources.map((s) => `(?:${s})`).join('|');
  return { key, regex: new RegExp(source) };
}

/** The table, in the spec's order; the first match wins. */
export const DANGEROUS_PATTERNS: readonly DangerousPattern[] = [
  // Any absolute path given to rm (the spec's example: `sudo rm -rf /opt`).
  pattern('delete in root path', String.raw`${CMD}rm\s+${ARGS}/`),
  pattern('recursive delete', String.raw`${CMD}rm\s+${ARGS}${RECURSIVE_SHORT}${END}`),
  pattern('recursive delete (long flag)', String.raw`${CMD}rm\s+${ARGS}${RECURSIVE_LONG}${END}`),
  pattern('world/other-writable permissions', String.raw`${CMD}chmod\s+${ARGS}${WORLD_WRITABLE_MODE}${END}`),
  pattern(
    'recursive chown to root',
    String.raw`${CMD}chown\s+(?=${ARGS}(?:${RECURSIVE_SHORT}|--recursive)${END})${ARGS}(?:root|0)(?::\S*)?${END}`,
  ),
  pattern(
    'format filesystem',
    String.raw`${CMD}(?:mkfs(?:\.\S+)?|mke2fs|mkswap|mkdosfs|mkntfs|mkexfatfs|wipefs|newfs(?:_\S+)?)${END}`,
    String.raw`${CMD}diskutil\s+(?:erase\S*|reformat|partitiondisk)${END}`,
  ),
  pattern('disk copy', String.raw`${CMD}dd\s+${ARGS}(?:if|of)=`),
  pattern(
    'write to block device',
    String.raw`${REDIRECT}${BLOCK_DEVICE}`,
    String.raw`${CMD}(?:tee|shred|blkdiscard)\s+${ARGS}${BLOCK_DEVICE}`,
    String.raw`${CMD}(?:cp|mv|install)\s+(?:\S+\s+)+${BLOCK_DEVICE}\S*\s*$`,
  ),
  pattern(
    'SQL DROP',
    String.raw`${WITH_SQL_CLIENT}\bdrop\s+(?:temporary\s+)?(?:table|database|schema|view|materialized\s+view|index|sequence|user|role|function|procedure|trigger|type|keyspace|collection)\b`,
  ),
  pattern(
    'SQL DELETE without WHERE',
    // The statement ends right after the table (and an optional alias).
    String.raw`${WITH_SQL_CLIENT}\bdelete\s+from\s+(?:only\s+)?[^\s;'"()]+(?:\s+(?:as\s+)?(?!where\b|using\b|returning\b)[a-z_][\w$]*)?\s*(?:;|'|"|\)|\n|$)`,
  ),
  pattern('SQL TRUNCATE', String.raw`${WITH_SQL_CLIENT}\btruncate\s+(?:table\s+)?(?:only\s+)?[a-z_"\x60\[]`),
  pattern('overwrite system config', String.raw`${REDIRECT}${ETC}`),
  pattern(
    'stop/restart system service',
    String.raw`${CMD}systemctl\s+(?:-\S+\s+)*(?:stop|restart|try-restart|reload-or-restart|try-reload-or-restart|condrestart|disable|mask|kill|isolate)${END}`,
    String.raw`${CMD}service\s+\S+\s+(?:stop|restart|force-reload|condrestart|try-restart)${END}`,
    String.raw`${CMD}(?:rc-service\s+\S+|initctl|sv)\s+(?:stop|restart|down|kill)${END}`,
    String.raw`${CMD}launchctl\s+(?:stop|unload|bootout|kill|remove)${END}`,
  ),
  pattern(
    'kill all processes',
    // kill with pid -1 (the first dash word is the signal, not a pid).
    String.raw`${CMD}kill\s+(?:-1\s*$|(?:-s\s+\S+|-n\s+\S+|-[^-\s]\S*|--)\s+${ARGS}-1${END})`,
    String.raw`${CMD}killall5${END}`,
    String.raw`${CMD}(?:pkill|killall|skill|slay)\s+${ARGS}(?:-u|--user)(?:=|\s|$)`,
  ),
  pattern(
    'force kill processes',
    String.raw`${CMD}(?:kill|pkill|killall|skill)\s+${ARGS}(?:-9|-kill|-sigkill|-s\s+(?:9|kill|sigkill)|--signal(?:=|\s+)(?:9|kill|sigkill)|-n\s+9)${END}`,
  ),
  pattern('fork bomb', FORK_BOMB),
  pattern(
    'shell command via -c/-lc flag',
    String.raw`${CMD}${SHELL}\s+(?:[-+]o\s+\S+\s+|[-+](?!o\s)\S+\s+)*?-[^-\s]*c[^-\s]*${END}`,
    String.raw`${CMD}(?:su|runuser)\s+${ARGS}(?:-c|--command)(?:=|\s|$)`,
  ),
  pattern(
    'script execution via -e/-c flag',
    String.raw`${CMD}(?:python[\d.]*|pypy[\d.]*)\s+(?:-[wx]\s+\S+\s+|-(?![wx]\s)\S+\s+)*?-[^-\s]*c\S*${END}`,
    String.raw`${CMD}(?:perl[\d.]*|ruby[\d.]*|lua(?:jit)?[\d.]*|rscript|julia|osascript|tclsh)\s+(?:-\S+\s+)*?-[^-\s]*e\S*${END}`,
    String.raw`${CMD}(?:node(?:js)?|bun|deno)\s+(?:-\S+\s+)*?(?:-e|-p|-pe|--eval|--print)(?:=|\s|$)`,
    String.raw`${CMD}deno\s+eval${END}`,
    String.raw`${CMD}php[\d.]*\s+(?:-\S+\s+)*?-r${END}`,
    String.raw`${CMD}(?:pwsh|powershell)\s+(?:-\S+\s+)*?-(?:c|command|ec|encodedcommand)${END}`,
  ),
  pattern(
    'pipe remote content to shell',
    String.raw`^(?=[\s\S]*?(?:^|\|\s+)(?:\S*/)?${FETCH}\s)(?=[\s\S]*?\|\s+(?:\S*/)?(?:${SHELL}|${INTERPRETER})(?:\s|$))`,
  ),
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
  pattern(
    'pipe decoded content to shell (possible command obfuscation)',
    String.raw`^(?=[\s\S]*?(?:^|\|\s+)(?:\S*/)?${DECODER})(?=[\s\S]*?\|\s+(?:\S*/)?(?:${SHELL}|${INTERPRETER})(?:\s|$))`,
    String.raw`${CMD}(?:${SHELL}|eval|source|\.)\s+(?=[\s\S]*?(?:\$\(|\x60|<\())(?=[\s\S]*?\b${DECODER})`,
  ),
  pattern('overwrite system file via tee', String.raw`${CMD}tee\s+${ARGS}(?:${ETC}|${SYSTEM_DIR}|${SENSITIVE})`),
  pattern('overwrite system file via redirection', String.raw`${REDIRECT}(?:${SYSTEM_DIR}|${SENSITIVE})`),
  pattern(
    'overwrite project env/config via redirection',
    String.raw`${REDIRECT}${PROJECT_CONFIG}`,
    // `| tee .env` is the redirection of choice when sudo is involved.
    String.raw`${CMD}tee\s+${ARGS}${PROJECT_CONFIG}`,
  ),
  pattern(
    'xargs with rm',
    String.raw`${CMD}xargs\s+(?:-[adeilnps]\s+[^-\s]\S*\s+|-\S+\s+)*?(?:sudo\s+)?(?:(?:\S*/)?${SHELL}\s+-[^-\s]*c\s+)?(?:\S*/)?rm${END}`,
  ),
  pattern(
    'find -exec/-execdir rm',
    String.raw`${CMD}find\s+${ARGS}-(?:exec|execdir|ok|okdir)\s+(?:sudo\s+)?(?:(?:\S*/)?${SHELL}\s+-[^-\s]*c\s+)?(?:\S*/)?rm${END}`,
  ),
  pattern('find -delete', String.raw`${CMD}find\s+${ARGS}-delete${END}`),
  pattern(
    'docker restart/stop/kill (container lifecycle)',
    String.raw`${CMD}(?:docker|podman|nerdctl)\s+${DOCKER_OPTIONS}(?:container\s+)?(?:restart|stop|kill)${END}`,
    String.raw`${CMD}(?:(?:docker|podman)\s+${DOCKER_OPTIONS}compose|docker-compose|podman-compose)\s+${DOCKER_OPTIONS}(?:restart|stop|kill)${END}`,
  ),
  pattern(
    'copy/move file into system config path',
    // The destination is the last word, or the -t directory.
    String.raw`${CMD}(?:cp|mv|install|rsync|ln|scp)\s+(?:\S+\s+)+(?:${ETC}\S*|${SENSITIVE})\s*$`,
    String.raw`${CMD}(?:cp|mv|install|ln)\s+${ARGS}(?:-t\s*|--target-directory[=\s]\s*)(?:${ETC}|${SENSITIVE})`,
  ),
  pattern('in-place edit of system config', String.raw`${IN_PLACE_EDITOR}${ARGS}${ETC}`),
  pattern(
    'in-place edit of sensitive credential/SSH/shell-rc path',
    String.raw`${IN_PLACE_EDITOR}${ARGS}(?:${SENSITIVE}|${PROJECT_CONFIG})`,
  ),
  pattern('script execution via heredoc', ...HEREDOC_INTO(INTERPRETER)),
  pattern('shell execution via heredoc', ...HEREDOC_INTO(SHELL)),
  pattern('git reset --hard (destroys uncommitted changes)', String.raw`${GIT}reset\s+${ARGS}--hard${END}`),
  pattern(
    'git force push (rewrites remote history)',
    String.raw`${GIT}push\s+${ARGS}(?:-[^-\s]*f\S*|--force(?:-with-lease|-if-includes)?(?:=\S*)?|\+\S+)${END}`,
  ),
  pattern('git clean with force (deletes untracked files)', String.raw`${GIT}clean\s+${ARGS}(?:-[^-\s]*f\S*|--force)${END}`),
  // Lower-casing (spec) makes -D and -d the same word, so both count.
  pattern('git branch force delete', String.raw`${GIT}branch\s+${ARGS}(?:-[^-\s]*d\S*|--delete)${END}`),
  pattern(
    'chmod +x followed by immediate execution',
    // Pair variants: `chmod +x f && ./f`; the second command runs a path.
    String.raw`${CMD}chmod\s+(?=${ARGS}${EXECUTABLE_MODE}${END})[\s\S]*\s(?:&&|;|\|\||&)\s+(?:\.{0,2}/|~/)\S*`,
  ),
  pattern(
    'sudo with privilege flag (stdin/askpass/shell/list)',
    // sudo's own options come before the command; -S -A -s -i -l (any case).
    String.raw`${CMD}(?:sudo|doas)\s+(?:-[ugpcdrt]\s+\S+\s+|-(?![ugpcdrt]\s)[^-\s]\S*\s+|--(?!stdin|askpass|shell|list|login)[^\s=]+(?:=\S*)?\s+)*(?:-[^-\s]*[sail]\S*|--(?:stdin|askpass|shell|list|login))${END}`,
  ),
];
