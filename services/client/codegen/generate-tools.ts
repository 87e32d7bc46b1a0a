/**
 * Build step: writes services/client/generated/tools.ts from the schemas of
 * the built-in tools (see builtin-tool-specs.ts).
 * `--check` compares instead of writing and exits 1 when the committed file
 * is stale. Runs compiled: `node dist/services/client/codegen/generate-tools.js`.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { builtinToolSpecs } from './builtin-tool-specs.js';
import { generateToolModule } from './schema-to-ts.js';

/** The source tree's copy, found from dist/services/client/codegen/ or services/client/codegen/. */
const TARGET = fileURLToPath(new URL(import.meta.url.includes('/dist/') ? '../../../../services/client/generated/tools.ts' : '../generated/tools.ts', import.meta.url));

function main(argv: string[]): number {
  const text = generateToolModule(builtinToolSpecs(), 'services/client/codegen/generate-tools.ts');
  let current = '';
  try {
    current = readFileSync(TARGET, 'utf8');
  } catch {
    // absent: written below, or stale under --check
  }
  if (argv.includes('--check')) {
    if (current === text) return 0;
    process.stderr.write(`${TARGET} is stale: run 'make client-gen' and commit it\n`);
    return 1;
  }
  if (current !== text) writeFileSync(TARGET, text);
  return 0;
}

process.exitCode = main(process.argv.slice(2));
