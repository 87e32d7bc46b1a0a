/**
 * Build step: writes services/client/generated/tools.ts from the schemas of
 * the tools a dispatcher registers with the default configuration (agent-loop
 * tools left out: calling them through Berth only ever returns an error).
 * `--check` compares instead of writing and exits 1 when the committed file
 * is stale. Runs compiled: `node dist/services/client/codegen/generate-tools.js`.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../../common/config.js';
import { createLogger } from '../../common/logging.js';
import { AGENT_LOOP_TOOLS, ToolRegistry } from '../../dispatcher/registry.js';
import { registerBuiltinTools } from '../../dispatcher/tools/builtin-tools.js';
import { generateToolModule, type ToolSpec } from './schema-to-ts.js';

/** The source tree's copy, found from dist/services/client/codegen/ or services/client/codegen/. */
const TARGET = fileURLToPath(new URL(import.meta.url.includes('/dist/') ? '../../../../services/client/generated/tools.ts' : '../generated/tools.ts', import.meta.url));

export function builtinToolSpecs(): ToolSpec[] {
  const registry = new ToolRegistry({ logger: createLogger('silent') });
  // Defaults only: no file and no environment, so every machine generates the same text.
  registerBuiltinTools(registry, loadConfig(undefined, {}));
  return registry
    .names()
    .filter((name) => !AGENT_LOOP_TOOLS.has(name))
    .map((name) => {
      const schema = registry.get(name)?.schema;
      if (schema === undefined) throw new Error(`tool ${name} vanished from the registry`);
      return { name, description: schema.description, parameters: schema.parameters };
    });
}

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
