/** The shell script that runs one search in the task's environment, ripgrep or the find/grep fallback. */
import { shellQuote } from '../../../../common/shell/quote.js';
import { READ_MAX_LINE_CHARS } from '../read-file.js';
import { SEARCH_EXCLUDED_DIRS, type SearchPlan } from './search-plan.js';

/** Raw search output kept from the environment; more makes total_count a lower bound. */
export const SEARCH_OUTPUT_CAP_BYTES = 2_000_000;

/** find's -path takes a glob; a root is matched literally. */
function escapeFindGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/**
 * One shell script that picks the engine (`command -v rg`), runs the search
 * with NUL-separated paths (so spaces, colons and quotes in names parse
 * unambiguously), caps its output, then prints a sentinel, the exit status
 * and stderr. Exec output merges stdout and stderr, so stderr is held in a
 * temp file and printed after the sentinel where it cannot corrupt results.
 *
 * Hidden files and directories are skipped below the roots (a root the caller
 * names is searched even when hidden): ripgrep does that by default and also
 * honours .gitignore; the fallback prunes them with find, since grep's
 * --exclude-dir also matches the roots themselves and any root below a
 * hidden directory.
 */
export function buildSearchScript(plan: SearchPlan, sentinel: string): string {
  const q = shellQuote;
  const roots = plan.roots.map(q).join(' ');
  const rgExcludes = SEARCH_EXCLUDED_DIRS.map((dir) => `-g ${q(`!${dir}`)}`).join(' ');
  const exemptRoots = plan.roots.map((root) => `-path ${q(escapeFindGlob(root))}`).join(' -o ');
  const hiddenNames = ['.*', ...SEARCH_EXCLUDED_DIRS.filter((dir) => !dir.startsWith('.'))];
  const findWalk =
    `find ${roots} \\( -type d \\( ${hiddenNames.map((name) => `-name ${q(name)}`).join(' -o ')} \\) ` +
    `! \\( ${exemptRoots} \\) \\) -prune -o -type f \\( ! -name '.*' -o ${exemptRoots} \\)`;

  let rgCommand: string;
  let fallbackCommand: string;
  let fallbackSelect: string;
  if (plan.mode === 'files') {
    const glob = /[*?[]/.test(plan.pattern) ? plan.pattern : `*${plan.pattern}*`;
    // find's -name sees only the base name; a glob with a slash goes to -ipath,
    // whose `*` already crosses directories, so `**/` collapses into it.
    const findTest = glob.includes('/')
      ? `-ipath ${q(`*${glob.replaceAll('**/', '').replaceAll('**', '*')}`)}`
      : `-iname ${q(glob)}`;
    const sort = plan.order === 'modified' ? '--sortr modified' : '--sort path';
    // A whitelisting glob overrides rg's hidden-file rule, so hidden names are excluded again after it (a later
    // glob of the same kind wins; roots named explicitly are not subject to globs).
    rgCommand = `rg --no-config --files --null ${sort} ${rgExcludes} --iglob ${q(glob)} --iglob '!.*' -- ${roots}`;
    if (plan.order === 'modified') {
      fallbackSelect =
        "if find . -maxdepth 0 -printf '' >/dev/null 2>&1; then engine=find-mtime; else engine=find-no-mtime; fi";
      fallbackCommand = `if [ "$engine" = find-mtime ]; then ${findWalk} ${findTest} -printf '%T@ %p\\0'; fi`;
    } else {
      fallbackSelect = 'engine=find';
      fallbackCommand = `${findWalk} ${findTest} -print0`;
    }
  } else {
    const rgGlob = plan.fileGlob !== undefined ? ` -g ${q(plan.fileGlob)} -g '!.*'` : '';
    const globTest =
      plan.fileGlob === undefined
        ? ''
        : plan.fileGlob.includes('/')
          ? `-path ${q(`*/${plan.fileGlob}`)}`
          : `-name ${q(plan.fileGlob)}`;
    // An explicitly named file root is searched whatever the glob says, as rg does.
    const findGlob = globTest === '' ? '' : ` \\( ${globTest} -o ${exemptRoots} \\)`;
    const context = plan.context > 0 ? ` -C ${plan.context}` : '';
    const rgMode =
      plan.mode === 'files_only'
        ? '--files-with-matches'
        : plan.mode === 'count'
          ? '--count'
          : `--no-heading --line-number --sort path --max-columns ${READ_MAX_LINE_CHARS} --max-columns-preview${context}`;
    const grepMode = plan.mode === 'files_only' ? '-l' : plan.mode === 'count' ? '-c' : `-n${context}`;
    const multiline = plan.multiline ? ' --multiline' : '';
    rgCommand =
      `rg --no-config --color never --null --with-filename ${rgExcludes} ${rgMode}${multiline}${rgGlob} ` +
      `-e ${q(plan.pattern)} -- ${roots}`;
    fallbackSelect = 'engine=grep';
    // PCRE is the closest grep dialect to ripgrep's (\d, \s, lazy quantifiers); ERE otherwise.
    fallbackCommand =
      `if printf 'x\\n' | grep -qP 'x' 2>/dev/null; then flavor=-P; else flavor=-E; fi; ` +
      `${findWalk}${findGlob} -exec grep -H -Z -I -D skip $flavor --color=never ${grepMode} -e ${q(plan.pattern)} -- {} +`;
  }
  const select =
    plan.engine === 'rg'
      ? 'engine=rg'
      : plan.engine === 'grep'
        ? fallbackSelect
        : `if command -v rg >/dev/null 2>&1; then engine=rg; else ${fallbackSelect}; fi`;
  const search =
    plan.engine === 'rg'
      ? rgCommand
      : plan.engine === 'grep'
        ? fallbackCommand
        : `if [ "$engine" = rg ]; then ${rgCommand}; else ${fallbackCommand}; fi`;
  return [
    // A FIFO or device named as the path would be read by rg or grep until the timeout (a FIFO) or forever
    // (/dev/zero); inside a directory both skip them (find by -type f, rg by itself).
    ...plan.roots.map(
      (root) =>
        `if [ ! -d ${q(root)} ] && [ ! -f ${q(root)} ]; then printf 'engine=refused\\n\\n%s\\n2\\n%s\\n' ${q(sentinel)} ` +
        `${q(`${root} is not a regular file or directory; search_files only reads regular files`)}; exit 0; fi`,
    ),
    `t=$(mktemp -d 2>/dev/null) || { t="\${TMPDIR:-/tmp}/berth-search.$$"; mkdir -p "$t" || exit 90; }`,
    `trap 'rm -rf "$t"' EXIT`,
    select,
    `printf 'engine=%s\\n' "$engine"`,
    `{ { ${search}; } 2>"$t/err"; echo $? >"$t/rc"; } | head -c ${SEARCH_OUTPUT_CAP_BYTES}`,
    `printf '\\n%s\\n' ${q(sentinel)}`,
    `cat "$t/rc" 2>/dev/null`,
    `head -c 2000 "$t/err" 2>/dev/null`,
  ].join('\n');
}
