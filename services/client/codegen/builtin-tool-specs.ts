/**
 * The tools the generated client methods cover: those a dispatcher registers
 * with the default configuration, agent-loop tools left out (calling them
 * through Berth only ever returns an error), each with its old names. Build-time only: the client
 * itself never imports the dispatcher.
 */
import { loadConfig } from '../../common/config.js';
import { createLogger } from '../../common/logging.js';
import { AGENT_LOOP_TOOLS, ToolRegistry } from '../../dispatcher/registry.js';
import { registerBuiltinTools } from '../../dispatcher/tools/builtin-tools.js';
import { LEGACY_TOOL_ALIASES } from '../../dispatcher/tool-aliases.js';
import type { ToolSpec } from './schema-to-ts.js';

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
      const legacyNames = Object.keys(LEGACY_TOOL_ALIASES).filter((old) => LEGACY_TOOL_ALIASES[old] === name);
      return {
        name,
        description: schema.description,
        parameters: schema.parameters,
        ...(legacyNames.length > 0 ? { legacyNames } : {}),
      };
    });
}
