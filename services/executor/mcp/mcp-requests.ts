/**
 * The executor's McpRequest RPC: finds (or makes) the task's MCP servers and
 * runs one request as a foreground operation of the task (an Interrupt
 * cancels it; the task is not reaped meanwhile).
 */
import type { BerthConfig } from '../../common/config.js';
import type { Logger } from '../../common/logging.js';
import type { TaskKey } from '../backend.js';
import type { TaskEnvironments } from '../task-environment.js';
import { tenantPolicy } from '../backends/shared/network-policy.js';
import type { EgressPolicy } from './egress-fetch.js';
import type { McpOutcome, McpRequestInput } from './mcp-connections.js';

/** The tenant's effective egress policy: the operator's `docker.*`, narrowed by `tenants[].network`. */
export function egressPolicies(config: Pick<BerthConfig, 'docker' | 'tenants'>): (tenant: string) => EgressPolicy {
  const operator: EgressPolicy = { egress: config.docker.egress, egressAllow: config.docker.egress_allow };
  return (tenant) => tenantPolicy(operator, config.tenants.find((t) => t.id === tenant)?.network);
}

export interface McpRequestHost {
  readonly environments: TaskEnvironments;
  readonly egressFor: (tenant: string) => EgressPolicy;
  readonly logger: Logger;
}

export async function serveMcpRequest(host: McpRequestHost, key: TaskKey, request: McpRequestInput, signal: AbortSignal): Promise<McpOutcome> {
  // The MCP SDK (and the JSON-schema validator it brings) loads with the first request: most executors never serve one.
  const { MCP_COMPANION, McpConnections, parseServerSpec } = await import('./mcp-connections.js');
  const spec = parseServerSpec(request);
  return host.environments.withForeground(
    key,
    async (task) => {
      const servers = await task.companion(
        MCP_COMPANION,
        async () =>
          new McpConnections(
            { env: task.env, startBackground: (r) => task.runner.startBackground(r) },
            host.egressFor(key.tenant),
            host.logger.child({ tenant: key.tenant, task: key.taskId }),
          ),
      );
      return servers.request(request, spec, task.signal);
    },
    signal,
  );
}
