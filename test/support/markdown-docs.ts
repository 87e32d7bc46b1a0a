/**
 * The project's markdown documentation read as data: its files, their
 * headings, links and fenced blocks, so tests can hold the docs to what the
 * code does (links resolve, every command block is run or says why not).
 */
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { REPO_ROOT } from './serve-process.js';

/** README.md, CHANGELOG.md, every page under docs/, the sandbox image's and the Python client's READMEs. */
export function docFiles(): string[] {
  const pages: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (name.endsWith('.md')) pages.push(relative(REPO_ROOT, path));
    }
  };
  walk(join(REPO_ROOT, 'docs'));
  return ['README.md', 'CHANGELOG.md', ...pages, 'sandbox-image/README.md', 'clients/python/README.md'];
}

export function readDoc(file: string): string {
  return readFileSync(join(REPO_ROOT, file), 'utf8');
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
export function headingSlug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/`/g, '')
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** A fenced block: its info string (`sh`, `console`, ...), body, first line (1-based) and the comment right above it. */
export interface FencedBlock {
  readonly lang: string;
  readonly body: string;
  readonly line: number;
  /** The text of an HTML comment on the line right above the fence (blank lines allowed between), if any. */
  readonly note: string | undefined;
}

interface Scanned {
  readonly blocks: FencedBlock[];
  readonly headings: string[];
  /** Text outside fenced blocks, where links live. */
  readonly prose: string;
}

function scan(text: string): Scanned {
  const lines = text.split('\n');
  const blocks: FencedBlock[] = [];
  const headings: string[] = [];
  const prose: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    const fence = /^(\s*)(`{3,})\s*([\w-]*)/.exec(line);
    if (!fence) {
      const h = /^#{1,6} (.*)$/.exec(line);
      if (h) headings.push(h[1]!);
      prose.push(line);
      continue;
    }
    let j = i + 1;
    while (j < lines.length && !new RegExp(`^\\s*${fence[2]}\\s*$`).test(lines[j]!)) j++;
    let k = i - 1;
    while (k >= 0 && lines[k]!.trim() === '') k--;
    const comment = k >= 0 ? /^<!--\s*(.*?)\s*-->$/.exec(lines[k]!.trim()) : null;
    blocks.push({
      lang: fence[3] ?? '',
      body: lines.slice(i + 1, j).map((l) => l.slice(fence[1]!.length)).join('\n'),
      line: i + 1,
      note: comment?.[1],
    });
    i = j;
  }
  return { blocks, headings, prose: prose.join('\n') };
}

export function fencedBlocks(file: string): FencedBlock[] {
  return scan(readDoc(file)).blocks;
}

export function headingSlugs(file: string): Set<string> {
  return new Set(scan(readDoc(file)).headings.map(headingSlug));
}

/** Relative links of a page (no scheme), as written: `path`, `path#anchor` or `#anchor`. */
export function relativeLinks(file: string): string[] {
  const prose = scan(readDoc(file)).prose.replace(/`[^`\n]*`/g, '');
  return [...prose.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!).filter((t) => !/^[a-z][a-z0-9+.-]*:/i.test(t));
}

/** Where a relative link of `file` points: the file (repository-relative) and the anchor, if any. */
export function resolveLink(file: string, link: string): { target: string; anchor: string | undefined; exists: boolean } {
  const [path, anchor] = link.split('#', 2) as [string, string | undefined];
  const absolute = path === '' ? join(REPO_ROOT, file) : resolve(dirname(join(REPO_ROOT, file)), path);
  return { target: relative(REPO_ROOT, absolute), anchor: anchor === '' ? undefined : anchor, exists: existsSync(absolute) };
}

/** Fenced blocks of these languages are commands a reader may type: each must say how it is tested. */
export const COMMAND_LANGUAGES: ReadonlySet<string> = new Set(['sh', 'console', 'bash', 'shell']);

/**
 * How a command block is tested, from the HTML comment right above it:
 * `<!-- doc-test: run -->` (test/e2e/docs-commands.test.ts runs it),
 * `<!-- doc-test: covered by PATH[, PATH] -->` (a named test runs the same
 * commands), `<!-- doc-test: not run: REASON -->` (it cannot run here).
 */
export type DocTest =
  | { readonly kind: 'run' }
  | { readonly kind: 'covered'; readonly paths: readonly string[] }
  | { readonly kind: 'not-run'; readonly reason: string }
  | { readonly kind: 'missing' }
  | { readonly kind: 'malformed'; readonly note: string };

export function docTestOf(block: FencedBlock): DocTest {
  const note = block.note;
  if (note === undefined || !note.startsWith('doc-test:')) return { kind: 'missing' };
  const body = note.slice('doc-test:'.length).trim();
  if (body === 'run') return { kind: 'run' };
  const covered = /^covered by (.+)$/.exec(body);
  if (covered) return { kind: 'covered', paths: covered[1]!.split(',').map((p) => p.trim()).filter(Boolean) };
  const notRun = /^not run: (.+)$/.exec(body);
  if (notRun) return { kind: 'not-run', reason: notRun[1]!.trim() };
  return { kind: 'malformed', note };
}

/** Every command block of the docs, with where it is and how it is tested. */
export function commandBlocks(): Array<{ file: string; block: FencedBlock; test: DocTest }> {
  return docFiles().flatMap((file) =>
    fencedBlocks(file)
      .filter((b) => COMMAND_LANGUAGES.has(b.lang))
      .map((block) => ({ file, block, test: docTestOf(block) })),
  );
}
