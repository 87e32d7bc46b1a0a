/**
 * The README and the pages under docs/ link to each other and to files of
 * the repository; a page moved or a heading renamed must not leave a link
 * pointing at nothing.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { docFiles, headingSlug, headingSlugs, relativeLinks, resolveLink } from '../support/markdown-docs.js';

describe('documentation links', () => {
  test('every relative link names a file that exists, and an anchor a heading of that page', () => {
    const broken: string[] = [];
    for (const file of docFiles()) {
      for (const link of relativeLinks(file)) {
        const { target, anchor, exists } = resolveLink(file, link);
        if (!exists) broken.push(`${file}: ${link} (no such file ${target})`);
        else if (anchor !== undefined && target.endsWith('.md') && !headingSlugs(target).has(anchor)) {
          broken.push(`${file}: ${link} (no heading '#${anchor}' in ${target})`);
        }
      }
    }
    assert.deepEqual(broken, []);
  });

  test('the checker itself catches a missing page and a missing anchor', () => {
    assert.equal(resolveLink('README.md', 'docs/no-such-page.md').exists, false);
    assert.equal(headingSlugs('docs/backends/docker.md').has('no-such-heading'), false);
    assert.equal(headingSlug('Upgrades, drain and failure'), 'upgrades-drain-and-failure');
    assert.equal(headingSlug('`execute_code`'), 'execute_code');
  });

  test('the index links every page under docs/', () => {
    const linked = new Set(relativeLinks('docs/README.md').map((l) => resolveLink('docs/README.md', l).target));
    const pages = docFiles().filter((f) => f.startsWith('docs/') && f !== 'docs/README.md');
    assert.deepEqual(pages.filter((p) => !linked.has(p)), []);
  });
});
