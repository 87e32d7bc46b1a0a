/**
 * Starts the bench server (bench-server.ts) as a child process on an
 * ephemeral port, in its own scratch directory, and gives cases a client.
 * A separate process, like a real deployment: the client's event loop and
 * the server's do not share one thread.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createChannel, createClient, type Channel } from 'nice-grpc';
import { HealthDefinition } from 'nice-grpc-server-health';
import type { BackendName } from '../../common/config.js';
import { CHANNEL_OPTIONS } from '../../common/channel-options.js';
import { DispatcherDefinition, type DispatcherClient } from '../../gen/berth/v1/dispatcher.js';
import { SERVER_NODE_FLAGS } from '../server-node-flags.js';
import { startListeningChild, type ListeningChild } from './listening-child.js';

export interface BenchServerOptions {
  /** Terminal backend; default local. */
  readonly backend?: BackendName;
  /** Extra config (the config.yaml shape, e.g. `{ docker: { warm_pool: 2 } }`), written to a file for the child. */
  readonly config?: Readonly<Record<string, unknown>>;
  /** Added to the server's environment (a test double's state directory, a provider's credentials and endpoint). */
  readonly env?: Readonly<Record<string, string>>;
  /** Each command's script logs its own timings in the task's state dir (the call-breakdown case). */
  readonly shellTiming?: boolean;
  /** How long it may take to serve (default 30 s; a backend that starts sandboxes ahead, a warm pool, may need more). */
  readonly startTimeoutMs?: number;
}

export interface BenchServer {
  readonly address: string;
  readonly pid: number;
  readonly channel: Channel;
  readonly client: DispatcherClient;
  readonly health: ReturnType<typeof createClient<typeof HealthDefinition>>;
  /** The child's JSON log file. */
  readonly logPath: string;
  /** CallTool; resolves to the result JSON string. */
  call(name: string, args: Readonly<Record<string, unknown>>, taskId: string): Promise<string>;
  endTask(taskId: string): Promise<void>;
  /** Whether ListTools of these toolsets offers the tool (registered and available). */
  offers(tool: string, toolsets: readonly string[]): Promise<boolean>;
  stop(): Promise<void>;
}

const ENTRY = fileURLToPath(new URL('./bench-server.js', import.meta.url));

/**
 * The environment of a server under measurement. The user's own setup must
 * not change what is measured: no BERTH_CONFIG, and an empty HOME, because a
 * new local task starts from a login shell, and a login profile that runs,
 * say, `pyenv init` costs seconds per task that Berth did not spend.
 */
export function benchServerEnv(scratch: string): NodeJS.ProcessEnv {
  const home = join(scratch, 'home');
  mkdirSync(home, { recursive: true });
  const env: NodeJS.ProcessEnv = { ...process.env, HOME: home, BERTH_STATE_ROOT: join(scratch, 'state') };
  delete env.BERTH_CONFIG;
  return env;
}

export async function startBenchServer(options: BenchServerOptions = {}): Promise<BenchServer> {
  const scratch = mkdtempSync(join(tmpdir(), 'berth-bench-'));
  const logPath = join(scratch, 'server.log');
  // As deployed: the image's Node flags.
  const args = [...SERVER_NODE_FLAGS, ENTRY, '--backend', options.backend ?? 'local', '--log', logPath];
  if (options.config !== undefined) {
    // JSON is YAML, so the config loader reads it as is.
    const configPath = join(scratch, 'config.yaml');
    writeFileSync(configPath, JSON.stringify(options.config));
    args.push('--config', configPath);
  }
  if (options.shellTiming === true) args.push('--shell-timing');
  const env = { ...benchServerEnv(scratch), ...options.env };
  let child: ListeningChild;
  try {
    child = await startListeningChild({
      name: `bench server (${options.backend ?? 'local'})`,
      args,
      env,
      cwd: scratch,
      ...(options.startTimeoutMs !== undefined ? { startTimeoutMs: options.startTimeoutMs } : {}),
    });
  } catch (err) {
    rmSync(scratch, { recursive: true, force: true });
    throw err;
  }
  const channel = createChannel(child.address, undefined, CHANNEL_OPTIONS);
  const client = createClient(DispatcherDefinition, channel);
  const health = createClient(HealthDefinition, channel);
  return {
    address: child.address,
    pid: child.pid,
    channel,
    client,
    health,
    logPath,
    async call(name, callArgs, taskId) {
      const r = await client.callTool({ name, argumentsJson: JSON.stringify(callArgs), taskId, sessionId: '' });
      return r.resultJson;
    },
    async endTask(taskId) {
      await client.endTask({ taskId });
    },
    async offers(tool, toolsets) {
      const r = await client.listTools({ enabledToolsets: [...toolsets], disabledToolsets: [] });
      const tools = JSON.parse(r.toolsJson) as Array<{ function?: { name?: string } }>;
      return tools.some((t) => t.function?.name === tool);
    },
    async stop() {
      channel.close();
      await child.stop();
      rmSync(scratch, { recursive: true, force: true });
    },
  };
}
