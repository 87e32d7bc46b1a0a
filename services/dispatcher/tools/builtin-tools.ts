/** Registers the tools every dispatcher serves, configured from `terminal.*`. */
import type { BerthConfig } from '../../common/config.js';
import { executeCodeOptionsFromConfig, executeCodeToolRegistration } from './code-execution/execute-code-tool.js';
import { registerAgentLoopToolStubs } from '../registry/agent-loop-tools.js';
import type { ToolRegistry } from '../registry/registry.js';
import { SANDBOX_TOOLS } from '../registry/toolsets.js';
import { fileToolRegistrations } from './file-tools.js';
import { processToolRegistration } from './process-tool.js';
import { terminalToolRegistration } from './terminal/terminal-tool.js';
import { WebBackends } from './web/web-backends.js';
import type { Resolver } from './web/safe-fetch.js';
import { webToolRegistrations } from './web/web-tools.js';

export interface BuiltinToolsOptions {
  /** Where web providers find their credentials: the dispatcher's own environment. */
  readonly env?: NodeJS.ProcessEnv;
  /** Name resolution of the web tools' address checks; tests inject one. */
  readonly resolve?: Resolver;
}

export function registerBuiltinTools(registry: ToolRegistry, config: BerthConfig, options: BuiltinToolsOptions = {}): void {
  const resolve = options.resolve ? { resolve: options.resolve } : {};
  const web = new WebBackends(config.web, { env: options.env ?? {}, ...resolve });
  const registrations = [
    terminalToolRegistration({
      defaultTimeoutSec: config.terminal.timeout,
      maxForegroundTimeoutSec: config.terminal.max_foreground_timeout,
      maxOutputChars: config.terminal.max_output_chars,
      redactSecrets: config.security.redact_secrets,
    }),
    processToolRegistration({ redactSecrets: config.security.redact_secrets }),
    ...fileToolRegistrations({ redactSecrets: config.security.redact_secrets }),
    ...webToolRegistrations({ backends: web, egressAllow: config.web.egress_allow, ...resolve }),
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
