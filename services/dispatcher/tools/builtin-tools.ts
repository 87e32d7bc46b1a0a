/** Registers the tools every dispatcher serves, configured from `terminal.*`. */
import type { BerthConfig } from '../../common/config.js';
import { executeCodeOptionsFromConfig, executeCodeToolRegistration } from '../code-execution/execute-code-tool.js';
import { registerAgentLoopToolStubs, type ToolRegistry } from '../registry.js';
import { SANDBOX_TOOLS } from '../toolsets.js';
import { fileToolRegistrations } from './file-tools.js';
import { processToolRegistration } from './process-tool.js';
import { terminalToolRegistration } from './terminal-tool.js';

export function registerBuiltinTools(registry: ToolRegistry, config: BerthConfig): void {
  const registrations = [
    terminalToolRegistration({
      defaultTimeoutSec: config.terminal.timeout,
      maxForegroundTimeoutSec: config.terminal.max_foreground_timeout,
      maxOutputChars: config.terminal.max_output_chars,
    }),
    processToolRegistration(),
    ...fileToolRegistrations(),
    executeCodeToolRegistration(
      executeCodeOptionsFromConfig(config, {
        availableTools: () => availableSandboxTools(registry),
        dispatch: (name, args, context) => registry.dispatch(name, args, context),
      }),
    ),
  ];
  for (const reg of registrations) {
    if (!registry.register(reg)) throw new Error(`built-in tool ${reg.name} was rejected by the registry`);
  }
  registerAgentLoopToolStubs(registry);
}

/** The sandbox tools execute_code scripts may call: those registered and available now. */
async function availableSandboxTools(registry: ToolRegistry): Promise<string[]> {
  const available = await Promise.all(SANDBOX_TOOLS.map((name) => registry.isAvailable(name)));
  return SANDBOX_TOOLS.filter((_, i) => available[i] === true);
}
