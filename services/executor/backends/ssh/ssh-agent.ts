/**
 * The exec agent on an ssh host: copied once to `~/.berth/agent-<hash>.pyz`
 * (content-addressed: an upgraded executor copies its own version beside
 * the old one, and executors of different versions never overwrite each
 * other's file), then started per task on one channel of the tenant's
 * connection as `python3 ~/.berth/agent-<hash>.pyz --stdio`. Everything
 * after the start (hello, version check, framing, the "no python3"
 * verdict) is the shared stdio agent's.
 */
import { posix } from 'node:path';
import type { ClientChannel } from 'ssh2';
import type { Logger } from '../../../common/logging.js';
import type { DiagnosticFinding } from '../../backend.js';
import { shellQuote } from '../../../common/shell/quote.js';
import type { AgentChannel } from '../shared/agent/agent-channel.js';
import type { AgentScript } from '../shared/agent/agent-script.js';
import { startStdioAgent, type AgentProcess } from '../shared/agent/stdio-agent.js';
import type { SshConnection } from './ssh-connection.js';

/** Where copies of the agent live, relative to the remote home. */
export const AGENT_DIR = '.berth';

/** The agent's path on the host. */
export function remoteAgentPath(homeDir: string, script: AgentScript): string {
  return posix.join(homeDir, AGENT_DIR, script.fileName);
}

/**
 * Copies the agent from stdin to its content-addressed path: written to a
 * file of its own first and renamed into place, so a reader (another task,
 * another executor copying the same version at the same moment) sees the
 * whole file or none. POSIX sh: it runs in the login shell.
 */
export function buildAgentCopyCommand(homeDir: string, script: AgentScript): string {
  const dir = posix.join(homeDir, AGENT_DIR);
  const target = remoteAgentPath(homeDir, script);
  const temp = posix.join(dir, `.${script.fileName}.`);
  return [
    'umask 077',
    `mkdir -p -- ${shellQuote(dir)}`,
    `t=${shellQuote(temp)}$$`,
    `cat > "$t" && mv -f -- "$t" ${shellQuote(target)} || { rm -f -- "$t"; exit 1; }`,
  ].join(' && ');
}

/** The command that starts the agent on its channel; `exec` so the login shell does not stay in between. */
export function buildAgentStartCommand(argv: readonly string[]): string {
  return ['exec', ...argv.map(shellQuote)].join(' ');
}

/** An open exec channel as the process the stdio agent starter expects. */
function channelProcess(channel: ClientChannel): AgentProcess {
  const proc: AgentProcess = {
    stdin: channel,
    stdout: channel,
    stderr: channel.stderr,
    once(event: string, listener: (...args: never[]) => void) {
      if (event === 'close') {
        // ssh2 passes the exit status (or signal name) with 'close'; undefined when the connection dropped.
        channel.once('close', (code?: number | null, signal?: string) =>
          (listener as (code: number | null, signal: NodeJS.Signals | null) => void)(
            typeof code === 'number' ? code : null,
            (signal as NodeJS.Signals | undefined) ?? null,
          ),
        );
      } else {
        channel.once(event, listener as (err: Error) => void);
      }
      return proc;
    },
    kill() {
      channel.close();
      return true;
    },
  };
  return proc;
}

export interface StartSshAgentOptions {
  readonly connection: SshConnection;
  readonly agentPath: string;
  /** Names the host in errors and logs. */
  readonly description: string;
  /** The no-python3 line is logged once per key (the host). */
  readonly fallbackLogKey: string;
  readonly logger?: Logger;
}

/**
 * Opens a channel and starts the agent on it. Rejects with the shared
 * AgentUnavailableError (its `canFallBack` tells a host without a usable
 * python3 from a fault), or with the connection's own errors.
 */
export async function startSshAgent(options: StartSshAgentOptions): Promise<AgentChannel> {
  const argv = ['python3', options.agentPath, '--stdio'];
  const { channel } = await options.connection.exec(buildAgentStartCommand(argv));
  return startStdioAgent({
    spawn: () => channelProcess(channel),
    agentPath: options.agentPath,
    description: options.description,
    fallbackLogKey: options.fallbackLogKey,
    ...(options.logger ? { logger: options.logger } : {}),
  });
}

/** `berth doctor`: whether commands reach the ssh host through the exec agent, or one channel each (no usable python3 there). */
export function sshAgentFinding(usesAgent: boolean | undefined, whyNot: string | undefined): DiagnosticFinding | undefined {
  if (usesAgent === undefined) return undefined;
  if (usesAgent) return { verdict: 'ok', text: 'commands reach the ssh host through the exec agent (one channel per task)' };
  return {
    verdict: 'warn',
    text:
      'the ssh host cannot run the exec agent' +
      (whyNot ? ` (${whyNot})` : '') +
      ': commands open one ssh channel each (slower), and execute_code runs in a per-task code container; ' +
      'install python3 (3.8 or newer) on the host',
  };
}
