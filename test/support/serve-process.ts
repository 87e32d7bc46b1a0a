/**
 * Starts `bin/berth serve` as a child process on an ephemeral port, as a user
 * would, and stops it afterwards. The server's stderr (JSON logs) is kept and
 * shown when a test fails to start it.
 */
import assert from 'node:assert/strict';
import { execFile, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createChannel, createClient, type Channel } from 'nice-grpc';
import { DispatcherDefinition, type DispatcherClient } from '../../services/gen/berth/v1/dispatcher.js';
import { startListeningChild } from '../../services/cli/bench/listening-child.js';

export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const BERTH_BIN = join(REPO_ROOT, 'bin', 'berth');

export interface ServeProcess extends AsyncDisposable {
  readonly address: string;
  /** BERTH_STATE_ROOT of the server (removed when it stops). */
  readonly stateRoot: string;
  /** http://host:port/metrics, when the server was started with metrics on. */
  readonly metricsUrl: string | undefined;
  readonly child: ChildProcess;
  /** What the server printed on stdout up to its "serving on" line. */
  readonly startupOutput: string;
  readonly client: DispatcherClient;
  readonly channel: Channel;
  /** Everything the server wrote to stderr so far (its JSON log lines). */
  logs(): string;
  /** Runs `bin/berth ARGS` against this server; never rejects on non-zero exit. */
  cli(args: string[], options?: { env?: NodeJS.ProcessEnv; timeoutMs?: number }): Promise<{ code: number; stdout: string; stderr: string }>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** Resolves with the exit code once the server exits by itself (null when killed by a signal). */
  exited: Promise<number | null>;
}

export async function startServe(
  extraArgs: string[] = [],
  options: { env?: NodeJS.ProcessEnv } = {},
): Promise<ServeProcess> {
  const stateRoot = mkdtempSync(join(tmpdir(), 'berth-e2e-'));
  const server = await startListeningChild({
    name: 'berth serve',
    args: [BERTH_BIN, 'serve', '--port', '0', '--log-level', 'info', ...extraArgs],
    cwd: REPO_ROOT,
    env: { ...process.env, BERTH_STATE_ROOT: stateRoot, ...options.env },
    startTimeoutMs: 20_000,
    stderrKeepBytes: Infinity,
  }).catch((err: unknown) => {
    // A server that never listened is never stopped: its state root goes here.
    rmSync(stateRoot, { recursive: true, force: true });
    throw err;
  });
  const { address, child, exited } = server;
  // The server prints its metrics line before the serving line.
  const metricsUrl = /berth metrics on (\S+)/.exec(server.startupOutput)?.[1];
  const channel = createChannel(address);
  const client = createClient(DispatcherDefinition, channel);
  const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
    channel.close();
    // A clean shutdown may take a while on a loaded machine; tests that check its exit code must not see a SIGKILL.
    const code = await server.stop(signal, 60_000);
    rmSync(stateRoot, { recursive: true, force: true });
    return code;
  };
  return {
    address,
    stateRoot,
    metricsUrl,
    child,
    startupOutput: server.startupOutput,
    client,
    channel,
    logs: () => server.stderr(),
    async cli(args, cliOptions = {}) {
      try {
        const { stdout, stderr: err } = await promisify(execFile)(process.execPath, [BERTH_BIN, ...args], {
          env: { ...process.env, BERTH_SERVER: address, ...cliOptions.env },
          timeout: cliOptions.timeoutMs ?? 30_000,
          maxBuffer: 64 * 1024 * 1024,
        });
        return { code: 0, stdout, stderr: err };
      } catch (e) {
        const x = e as { code?: number; stdout?: string; stderr?: string };
        return { code: typeof x.code === 'number' ? x.code : 1, stdout: x.stdout ?? '', stderr: x.stderr ?? '' };
      }
    },
    stop,
    exited,
    [Symbol.asyncDispose]: async () => {
      await stop();
    },
  };
}

/**
 * Waits until the server's log matches `pattern` (a line written after the
 * call's result went out, such as execute_code's summary, may trail the
 * answer the client already has); fails with the log after `timeoutMs`.
 */
export async function waitForLog(serve: Pick<ServeProcess, 'logs'>, pattern: RegExp, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!pattern.test(serve.logs())) {
    if (Date.now() > deadline) assert.match(serve.logs(), pattern);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
