/** Registers the tools every dispatcher serves, configured from `terminal.*`. */
import type { BerthConfig } from '../../common/config.js';
import { registerAgentLoopToolStubs, type ToolRegistry } from '../registry.js';
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
  ];
  for (const reg of registrations) {
    if (!registry.register(reg)) throw new Error(`built-in tool ${reg.name} was rejected by the registry`);
  }
  registerAgentLoopToolStubs(registry);
}
