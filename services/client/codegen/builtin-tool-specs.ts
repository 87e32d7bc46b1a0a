/**
 * The tools the generated client methods cover: those a dispatcher registers
 * with the default configuration, agent-loop tools left out (calling them
 * through Berth only ever returns an error), each with its old names. Build-time only: the client
 * itself never imports the dispatcher.
 */
import { loadConfig } from '../../common/config-load.js';
import { createLogger } from '../../common/logging.js';
import { AGENT_LOOP_TOOLS } from '../../dispatcher/registry/agent-loop-tools.js';
import { ToolRegistry } from '../../dispatcher/registry/registry.js';
import { registerBuiltinTools } from '../../dispatcher/tools/builtin-tools.js';
import { LEGACY_TOOL_ALIASES } from '../../dispatcher/registry/tool-aliases.js';
import type { ToolSpec } from './schema-to-ts.js';

export function builtinToolSpecs(): ToolSpec[] {
  const registry = new ToolRegistry({ logger: createLogger('silent') });
  // Defaults only: no file and no environment, so every machine generates the same text.
  registerBuiltinTools(registry, loadConfig(undefined, {}));
  return registry
    .names()
    .filter((name) => !AGENT_LOOP_TOOLS.has(name))
    .map((name) => {
      const registration = registry.get(name);
      const schema = registration?.schema;
      if (schema === undefined) throw new Error(`tool ${name} vanished from the registry`);
      const legacyNames = Object.keys(LEGACY_TOOL_ALIASES).filter((old) => LEGACY_TOOL_ALIASES[old] === name);
      const legacyParameters = registration?.legacyParameters;
      return {
        name,
        description: schema.description,
        parameters: schema.parameters,
        ...(legacyNames.length > 0 ? { legacyNames } : {}),
        ...(legacyParameters !== undefined ? { legacyParameters } : {}),
      };
    });
}
