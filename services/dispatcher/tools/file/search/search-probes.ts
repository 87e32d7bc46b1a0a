/**
 * Follow-up probes for a search that found nothing, with upstream's texts:
 * similar names for a missing path, and count-only ripgrep retries that say
 * why a content search matched nothing.
 */
import { shellQuote } from '../../../../common/shell/quote.js';
import type { ToolContext } from '../../../registry/tool-types.js';
import { parseCounts } from './search-output.js';
import { SEARCH_EXCLUDED_DIRS, type SearchPlan } from './search-plan.js';

const PROBE_TIMEOUT_MS = 30_000;
/**
 * Directory names the hidden/ignored probe prunes before it recurses (upstream `SEARCH_PRUNE_DIR_NAMES`):
 * `--no-ignore` would otherwise walk whole dependency and build trees.
 */
const PROBE_PRUNE_DIR_NAMES = [
  '.git', '.hg', '.svn',
  'node_modules', 'venv', '.venv', 'site-packages', 'dist-packages', 'vendor', 'third_party',
  'build', 'dist', 'target', 'out', 'coverage', '.next', '.turbo', '.parcel-cache', '.nuxt', '.svelte-kit',
  '.archive',
  '__pycache__', '.cache', '.Trash', '.tox', '.nox', '.mypy_cache', '.pytest_cache', '.ruff_cache', '.npm', '.yarn',
  '.pnpm-store', '.gradle', '.m2', '.nuget',
  'backups', 'backup', '.backups',
] as const;

/** Count-only ripgrep probes for a content search that found nothing, in upstream order; the first hit is reported. */
const ZERO_MATCH_PROBES = [
  {
    flags: '-i',
    message: (total: number, n: number, paths: string) =>
      `0 exact matches, but ${total} case-insensitive match(es) in ${n} file(s): ${paths} — ` +
      "the pattern's casing may be wrong.",
  },
  {
    flags: '--hidden --no-ignore',
    message: (total: number, n: number, paths: string) =>
      `0 matches in visible files, but ${total} match(es) in ${n} hidden or gitignored file(s): ${paths} — ` +
      'these are excluded by default.',
  },
  {
    flags: '-F',
    message: (total: number, n: number, paths: string) =>
      `0 regex matches, but ${total} literal match(es) in ${n} file(s): ${paths} — the pattern contains regex ` +
      'metacharacters that likely need escaping (or pass a simpler substring).',
  },
] as const;

/** `os.path.dirname` / `basename` as Python computes them (a trailing slash leaves an empty base name). */
function splitPythonPath(path: string): { parent: string; base: string } {
  const cut = path.lastIndexOf('/') + 1;
  let head = path.slice(0, cut);
  if (head !== '' && !/^\/+$/.test(head)) head = head.replace(/\/+$/, '');
  return { parent: head === '' ? '.' : head, base: path.slice(cut) };
}

/** `Path not found: {path}` plus, when the parent directory lists names like it, `Similar paths: …` (upstream rule). */
export async function pathNotFound(path: string, context: ToolContext): Promise<string> {
  const parts = [`Path not found: ${path}`];
  const { parent, base } = splitPythonPath(path);
  if (base !== '') {
    const q = shellQuote(parent);
    const listing = await context.task
      .exec({
        command: `if [ -d ${q} ]; then ls -1 -- ${q} 2>/dev/null | head -n 20; fi`,
        stateless: true,
        timeoutMs: PROBE_TIMEOUT_MS,
        maxOutputChars: 64_000,
        signal: context.signal,
      })
      .catch(() => undefined);
    if (listing !== undefined && listing.exitCode === 0) {
      const wanted = base.toLowerCase();
      const candidates = listing.output
        .split('\n')
        .filter((entry) => {
          const name = entry.toLowerCase();
          return entry !== '' && (name.includes(wanted) || wanted.includes(name) || name.startsWith(wanted.slice(0, 3)));
        })
        .map((entry) => (parent.endsWith('/') ? `${parent}${entry}` : `${parent}/${entry}`));
      if (candidates.length > 0) parts.push(`Similar paths: ${candidates.slice(0, 5).join(', ')}`);
    }
  }
  return parts.join('. ');
}

/**
 * Upstream's steering hint for a content search that found nothing: count-only
 * ripgrep runs (case-insensitive, hidden/ignored, fixed-string when the pattern
 * has regex metacharacters), in one script that stops at the first that hits.
 */
export async function zeroMatchProbe(
  plan: SearchPlan,
  display: (p: string) => string,
  context: ToolContext,
): Promise<string | undefined> {
  const q = shellQuote;
  const hasMeta = /[.[\](){}?*+^$\\|]/.test(plan.pattern);
  const roots = plan.roots.map(q).join(' ');
  const excludes = SEARCH_EXCLUDED_DIRS.map((dir) => `-g ${q(`!${dir}`)}`).join(' ');
  const base = `rg --no-config --color never --null --with-filename ${excludes}`;
  const glob = plan.fileGlob !== undefined ? ` --glob ${q(plan.fileGlob)}` : '';
  const prune = PROBE_PRUNE_DIR_NAMES.flatMap((dir) => [`--glob ${q(`!${dir}/**`)}`, `--glob ${q(`!**/${dir}/**`)}`])
    .join(' ');
  const steps = ZERO_MATCH_PROBES.map((probe, index) => ({ probe, index })).filter(
    ({ probe }) => probe.flags !== '-F' || hasMeta,
  );
  const script = [
    `t=$(mktemp -d 2>/dev/null) || { t="\${TMPDIR:-/tmp}/berth-probe.$$"; mkdir -p "$t" || exit 90; }`,
    `trap 'rm -rf "$t"' EXIT`,
    ...steps.map(({ probe, index }) => {
      // Only the hidden/ignored probe may see hidden files; the file glob would otherwise let them through.
      const extra = probe.flags.startsWith('--hidden') ? ` ${prune}` : glob !== '' ? " --glob '!.*'" : '';
      return (
        `${base} ${probe.flags} --count-matches${glob}${extra} -e ${q(plan.pattern)} -- ${roots} 2>/dev/null ` +
        '| head -n 50 >"$t/out"; ' +
        `if [ -s "$t/out" ]; then printf 'probe=%d\\n' ${index}; cat "$t/out"; exit 0; fi`
      );
    }),
  ].join('\n');
  const result = await context.task.exec({
    command: script,
    stateless: true,
    timeoutMs: PROBE_TIMEOUT_MS,
    maxOutputChars: 200_000,
    signal: context.signal,
  });
  if (result.timedOut || result.interrupted) return undefined;
  const header = /^probe=(\d+)\n/.exec(result.output);
  const probe = header === null ? undefined : ZERO_MATCH_PROBES[Number(header[1])];
  if (header === null || probe === undefined) return undefined;
  let total = 0;
  const files: string[] = [];
  for (const [file, count] of parseCounts(result.output.slice(header[0].length))) {
    total += count;
    files.push(display(file));
  }
  if (total === 0) return undefined;
  const extra = files.length - 5;
  const paths = files.slice(0, 5).join(', ') + (extra > 0 ? ` (+${extra} more)` : '');
  return probe.message(total, files.length, paths);
}
