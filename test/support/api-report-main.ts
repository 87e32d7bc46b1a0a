/**
 * `make api-report`: writes the public API reports (docs/api/*.api.md) from
 * the build, for a change of `berth/backend-kit` or `berth/conformance`
 * that is meant (test/support/api-report.ts says what they hold).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { publicEntries, renderApiReport } from './api-report.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
for (const entry of publicEntries(root)) {
  const target = path.join(root, entry.report);
  mkdirSync(path.dirname(target), { recursive: true });
  writeFileSync(target, renderApiReport(root, entry));
  console.log(`${entry.report}: the public API of ${entry.specifier}`);
}
