/** docs/ci.md's exit-status table is the one berth call uses. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EXIT_TABLE } from '../../services/cli/call-outcome.js';
import { readDoc } from '../support/markdown-docs.js';

test('docs/ci.md lists exactly the exit statuses of berth call', () => {
  const page = readDoc('docs/ci.md');
  const table = page.slice(page.indexOf('<!-- BEGIN exit-statuses'), page.indexOf('<!-- END exit-statuses -->'));
  const rows = [...table.matchAll(/^\| (\d+) \| (.+) \|$/gm)].map((m) => [Number(m[1]), m[2]]);
  assert.deepEqual(rows, EXIT_TABLE.map(([code, meaning]) => [code, meaning]));
});
