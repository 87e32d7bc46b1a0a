/**
 * search_files behaviours taken over from upstream hermes-agent (target
 * aliases, hidden/ignored files, several paths in one argument, not-found
 * hints, multiline patterns, zero-match probes, densified matches, the
 * truncation hint), against real files through LocalTaskClientDouble, once
 * with ripgrep and once forced onto the grep/find fallback.
 */
import { execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import { mkdir, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { silentLogger } from '../../services/common/logging.js';
import { fileToolRegistrations, type SearchEngine } from '../../services/dispatcher/tools/file-tools.js';
import type { ToolContext } from '../../services/dispatcher/registry/tool-types.js';
import { LocalTaskClientDouble } from '../fixtures/local-task-client.js';

type Result = Record<string, unknown>;

const MULTILINE_NOTE =
  'Pattern contains \\n — multiline mode (-U) was enabled automatically so the regex can match across line boundaries.';
const LINE_ORIENTED_NOTE =
  '0 results found. Note: search_files content search is line-oriented and does not run ripgrep with -U/--multiline, ' +
  'so `\\n` in the regex does not match line breaks. Use context=N to inspect neighboring lines, or escape as `\\\\n` ' +
  'when searching for a literal backslash+n.';

function hasRipgrep(): boolean {
  try {
    execFileSync('bash', ['-c', 'command -v rg'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

class SearchHarness {
  private readonly context: ToolContext;

  constructor(
    readonly task: LocalTaskClientDouble,
    private readonly engine: SearchEngine,
  ) {
    this.context = {
      tenant: 'tenant-test',
      taskId: 'task-test',
      sessionId: 'session-test',
      task,
      signal: new AbortController().signal,
      logger: silentLogger(),
    };
  }

  async text(args: Record<string, unknown>): Promise<string> {
    const registration = fileToolRegistrations({ searchEngine: this.engine }).find((reg) => reg.name === 'search_files');
    assert.ok(registration);
    return registration.handler(args, this.context);
  }

  async search(args: Record<string, unknown>): Promise<Result> {
    return JSON.parse(await this.text(args)) as Result;
  }

  async write(relative: string, content: string): Promise<void> {
    await mkdir(join(this.task.root, relative, '..'), { recursive: true });
    await writeFile(join(this.task.root, relative), content);
  }
}

function suite(label: string, engine: SearchEngine, ripgrep: boolean): void {
  describe(`search_files upstream behaviours (${label})`, () => {
    let h: SearchHarness;
    before(async () => {
      h = new SearchHarness(await LocalTaskClientDouble.create('berth-search-'), engine);
      // A .git directory makes ripgrep honour .gitignore, as in a checkout.
      await h.write('.git/HEAD', 'ref: refs/heads/main\n');
      await h.write('.gitignore', 'ignored.log\n');
      await h.write('src/alpha.ts', 'const needle = 1;\n');
      await h.write('src/beta.py', 'needle = True\n');
      await h.write('docs/guide.md', 'needle in the docs\n');
      await h.write('visible.txt', 'plain text\n');
      await h.write('ignored.log', 'hiddenword in an ignored file\n');
      await h.write('.dot.txt', 'hiddenword in a dotfile\n');
      await h.write('.hidden/h.txt', 'hiddenword in a hidden dir\n');
      await h.write('.hidden/.deeper/d.txt', 'hiddenword two levels down\n');
      await h.write('.hidden/sub/s.txt', 'hiddenword under a hidden dir\n');
      await h.write('br[a]ck/file.txt', 'bracketword\n');
      await h.write('ml.txt', 'foo\nbar\n');
      await h.write('lit.txt', 'a literal x+y here\n');
      await h.write('long.txt', `needlelong${'a'.repeat(3000)}\n`);
      await h.write('many/seq.txt', Array.from({ length: 10 }, (_, i) => `item ${i + 1}`).join('\n') + '\n');
      await h.write('.env', 'API_KEY=sk-123\n');
      for (let i = 1; i <= 7; i++) await h.write(`cased/f${i}.txt`, 'MiXeDword\n');
    });
    after(async () => h.task.dispose());

    it('maps target "grep" to content and "find" to files', async () => {
      const content = await h.search({ pattern: 'needle', path: 'src' });
      assert.equal(content.total_count, 2);
      assert.deepEqual(await h.search({ pattern: 'needle', path: 'src', target: 'grep' }), content);
      assert.deepEqual(await h.search({ pattern: '*.py', target: 'find' }), { total_count: 1, files: ['src/beta.py'] });
      assert.deepEqual(await h.search({ pattern: 'x', target: 'everything' }), {
        error: 'Parameter target must be one of: content, files',
      });
    });

    it('skips hidden files and directories below the root, but searches a hidden root it is given', async () => {
      const visible = await h.search({ pattern: 'hiddenword', output_mode: 'files_only' });
      // ripgrep also skips the .gitignore'd file; grep cannot read .gitignore (upstream's fallback neither).
      if (ripgrep) assert.deepEqual(visible.files, undefined);
      else assert.deepEqual(visible.files, ['ignored.log']);
      // A file_glob is a whitelist for ripgrep, which would let hidden files matching it through.
      const globbed = await h.search({ pattern: 'hiddenword', file_glob: '*.txt' });
      assert.equal(globbed.total_count, 0);
      assert.equal(globbed.matches, undefined);
      if (ripgrep) {
        assert.match(String(globbed.warning), /^0 matches in visible files, but 4 match\(es\) in 4 hidden or gitignored file\(s\)/);
      }
      const root = await h.search({ pattern: 'hiddenword', path: '.hidden', output_mode: 'files_only' });
      assert.deepEqual(root.files, ['.hidden/h.txt', '.hidden/sub/s.txt']);
      // grep's --exclude-dir='.*' would skip this root too, as it lies below a hidden directory.
      const below = await h.search({ pattern: 'hiddenword', path: '.hidden/sub' });
      assert.deepEqual(below.matches, [{ path: '.hidden/sub/s.txt', line: 1, content: 'hiddenword under a hidden dir' }]);
      const names = await h.search({ pattern: '*.txt', target: 'files', path: '.hidden' });
      assert.deepEqual(names.files, ['.hidden/h.txt', '.hidden/sub/s.txt']);
      const everywhere = await h.search({ pattern: '*.txt', target: 'files' });
      const listed = everywhere.files as string[];
      assert.ok(listed.includes('visible.txt'), JSON.stringify(everywhere));
      assert.ok(!listed.some((file) => file.includes('.dot') || file.includes('.hidden')), JSON.stringify(everywhere));
    });

    it('takes a root whose name has glob characters literally', async () => {
      const result = await h.search({ pattern: 'bracketword', path: 'br[a]ck' });
      assert.deepEqual(result.matches, [{ path: 'br[a]ck/file.txt', line: 1, content: 'bracketword' }]);
    });

    it('searches the existing parts of several paths given in one argument', async () => {
      const commas = await h.search({ pattern: 'needle', path: 'src, docs, nope' });
      assert.deepEqual(commas, {
        total_count: 3,
        matches: [
          { path: 'docs/guide.md', line: 1, content: 'needle in the docs' },
          { path: 'src/alpha.ts', line: 1, content: 'const needle = 1;' },
          { path: 'src/beta.py', line: 1, content: 'needle = True' },
        ],
        warning: 'path contained 3 entries; searched 2 that exist; skipped missing: nope',
      });
      const spaces = await h.search({ pattern: 'needle', path: 'src docs', output_mode: 'files_only' });
      assert.deepEqual(spaces, {
        total_count: 3,
        files: ['docs/guide.md', 'src/alpha.ts', 'src/beta.py'],
        warning: 'path contained 2 entries; searched 2 that exist',
      });
      const many = await h.search({ pattern: '*.py', target: 'files', path: 'src a b c d' });
      assert.deepEqual(many, {
        total_count: 1,
        files: ['src/beta.py'],
        warning: 'path contained 5 entries; searched 1 that exist; skipped missing: a, b, c (+1 more)',
      });
    });

    it('answers a missing path with similar names from its parent directory', async () => {
      assert.deepEqual(await h.search({ pattern: 'x', path: 'sr' }), {
        total_count: 0,
        error: 'Path not found: sr. Similar paths: ./src',
      });
      assert.deepEqual(await h.search({ pattern: 'x', path: 'src/alpah.ts' }), {
        total_count: 0,
        error: 'Path not found: src/alpah.ts. Similar paths: src/alpha.ts',
      });
      assert.deepEqual(await h.search({ pattern: 'x', path: 'zzz-none' }), {
        total_count: 0,
        error: 'Path not found: zzz-none',
      });
      assert.deepEqual(await h.search({ pattern: 'x', path: 'nope1 nope2' }), {
        total_count: 0,
        error: 'Path not found: nope1 nope2',
      });
    });

    it('refuses to search inside a project .env file', async () => {
      assert.deepEqual(await h.search({ pattern: 'API_KEY', path: '.env' }), {
        error:
          `Access denied: ${join(h.task.root, '.env')} is a secret-bearing environment file and cannot be read to ` +
          'prevent credential leakage. If you need to check the file structure, read .env.example instead. ' +
          '(Defense-in-depth — not a security boundary; the terminal tool can still bypass.)',
      });
    });

    it('handles \\n in a pattern: multiline with ripgrep, a line-oriented note with grep', async () => {
      const escaped = await h.search({ pattern: 'foo\\nbar', path: 'ml.txt' });
      const literal = await h.search({ pattern: 'foo\nbar', path: 'ml.txt' });
      if (ripgrep) {
        const expected = {
          total_count: 2,
          matches: [
            { path: 'ml.txt', line: 1, content: 'foo' },
            { path: 'ml.txt', line: 2, content: 'bar' },
          ],
          warning: MULTILINE_NOTE,
        };
        assert.deepEqual(escaped, expected);
        assert.deepEqual(literal, expected);
      } else {
        assert.deepEqual(escaped, { total_count: 0, warning: LINE_ORIENTED_NOTE });
        assert.deepEqual(literal, { total_count: 0, warning: LINE_ORIENTED_NOTE });
      }
      // An escaped backslash before n is a literal backslash and n, not a newline.
      assert.deepEqual(await h.search({ pattern: 'foo\\\\nbar', path: 'ml.txt' }), { total_count: 0 });
    });

    it('explains a zero-match content search when a looser search would hit (ripgrep only)', async () => {
      const casing = await h.search({ pattern: 'NEEDLE', path: 'src' });
      const hidden = await h.search({ pattern: 'hiddenword' });
      const literal = await h.search({ pattern: 'x+y', path: 'lit.txt' });
      const several = await h.search({ pattern: 'mixedword', path: 'cased' });
      if (!ripgrep) {
        for (const result of [casing, literal, several]) assert.deepEqual(result, { total_count: 0 });
        return;
      }
      assert.equal(casing.total_count, 0);
      assert.match(
        String(casing.warning),
        new RegExp(
          '^0 exact matches, but 2 case-insensitive match\\(es\\) in 2 file\\(s\\): ' +
            "src/(alpha\\.ts, src/beta\\.py|beta\\.py, src/alpha\\.ts) — the pattern's casing may be wrong\\.$",
        ),
      );
      assert.equal(hidden.total_count, 0);
      const hiddenWarning = String(hidden.warning);
      assert.match(
        hiddenWarning,
        /^0 matches in visible files, but 5 match\(es\) in 5 hidden or gitignored file\(s\): .* — these are excluded by default\.$/,
      );
      for (const file of ['ignored.log', '.dot.txt', '.hidden/h.txt', '.hidden/.deeper/d.txt', '.hidden/sub/s.txt']) {
        assert.ok(hiddenWarning.includes(file), file);
      }
      assert.deepEqual(literal, {
        total_count: 0,
        warning:
          '0 regex matches, but 1 literal match(es) in 1 file(s): lit.txt — the pattern contains regex metacharacters ' +
          'that likely need escaping (or pass a simpler substring).',
      });
      assert.match(
        String(several.warning),
        /^0 exact matches, but 7 case-insensitive match\(es\) in 7 file\(s\): (cased\/f\d\.txt, ){4}cased\/f\d\.txt \(\+2 more\) — /,
      );
    });

    it('cuts match content to 500 characters', async () => {
      const result = await h.search({ pattern: 'needlelong', path: 'long.txt' });
      assert.deepEqual(result.matches, [{ path: 'long.txt', line: 1, content: `needlelong${'a'.repeat(490)}` }]);
    });

    it('groups five or more matches by path, context lines included', async () => {
      const result = await h.search({ pattern: 'item [13579]$', path: 'many', context: 1 });
      assert.equal(result.total_count, 5);
      assert.equal(result.matches, undefined);
      assert.equal(
        result.matches_text,
        ['many/seq.txt', ...Array.from({ length: 10 }, (_, i) => `  ${i + 1}: item ${i + 1}`)].join('\n'),
      );
    });

    it('marks a truncated page with the next-offset hint as the last key of the JSON', async () => {
      const text = await h.text({ pattern: 'item', path: 'many', limit: 4, offset: 2 });
      assert.deepEqual(JSON.parse(text), {
        total_count: 10,
        matches: [3, 4, 5, 6].map((n) => ({ path: 'many/seq.txt', line: n, content: `item ${n}` })),
        truncated: true,
        total_count_is_lower_bound: true,
        _hint: 'Results truncated. Use offset=6 to see more, or narrow with a more specific pattern or file_glob.',
      });
    });

    it('lists files in path order by default and newest first with order="modified"', async () => {
      const base = Date.now() / 1000;
      await utimes(join(h.task.root, 'src/alpha.ts'), base - 10, base - 10);
      await utimes(join(h.task.root, 'src/beta.py'), base - 100, base - 100);
      const listing = async (order?: string) =>
        (await h.search({ pattern: '*', target: 'files', path: 'src', ...(order === undefined ? {} : { order }) })).files;
      assert.deepEqual(await listing(), ['src/alpha.ts', 'src/beta.py']);
      await utimes(join(h.task.root, 'src/beta.py'), base, base);
      assert.deepEqual(await listing(), ['src/alpha.ts', 'src/beta.py']);
      assert.deepEqual(await listing('discovery'), ['src/alpha.ts', 'src/beta.py']);
      assert.deepEqual(await listing('modified'), ['src/beta.py', 'src/alpha.ts']);
    });
  });
}

const ripgrep = hasRipgrep();
suite(ripgrep ? 'auto: ripgrep' : 'auto: ripgrep missing, fallback', 'auto', ripgrep);
suite('forced grep/find fallback', 'grep', false);
