/**
 * `make config-doc`: rewrites the generated reference in docs/configuration.md.
 * Usage: node dist/services/common/config-reference-main.js PAGE
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { renderConfigReference, spliceReference } from './config-reference.js';

const page = process.argv[2];
if (page === undefined) {
  process.stderr.write('usage: config-reference-main.js docs/configuration.md\n');
  process.exit(2);
}
const before = readFileSync(page, 'utf8');
const after = spliceReference(before, renderConfigReference());
if (after !== before) writeFileSync(page, after);
