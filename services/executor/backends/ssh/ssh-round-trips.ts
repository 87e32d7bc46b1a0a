/**
 * Round-trip timing over one ssh connection, for the bench: `count`
 * sequential runs of `true`, each on its own channel of the same connection,
 * as the backend runs commands. Compare with OpenSSH connection sharing:
 *
 *     ssh -o ControlMaster=auto -o ControlPath=/tmp/cm-%C -o ControlPersist=60 HOST true   # once, to open it
 *     for i in $(seq 100); do /usr/bin/time -f %e ssh -o ControlPath=/tmp/cm-%C HOST true; done
 */
import { performance } from 'node:perf_hooks';
import type { SshConnection } from './ssh-connection.js';
import { runShort } from './ssh-background.js';
import { buildExecCommand } from './ssh-scripts.js';

export interface RoundTripOptions {
  /**
   * `plain`: the channel runs `true` (what `ssh HOST true` costs on an open
   * connection). `wrapped`: through the same setsid wrapper foreground
   * commands use (what the backend adds). Default plain.
   */
  readonly mode?: 'plain' | 'wrapped';
}

/** Milliseconds per round trip, in run order. The first call also opens the connection if needed. */
export async function sshRoundTrips(connection: SshConnection, count: number, options: RoundTripOptions = {}): Promise<number[]> {
  await connection.connect();
  const command =
    options.mode === 'wrapped' ? buildExecCommand({ script: 'true', cwd: '/', nonce: 'bench' }) : 'true';
  const samples: number[] = [];
  for (let i = 0; i < count; i++) {
    const started = performance.now();
    const { exitCode, signal, output } = await runShort(connection, command);
    samples.push(performance.now() - started);
    if (exitCode !== 0) throw new Error(`round trip ${i + 1} failed with exit ${exitCode ?? signal}: ${output.trim()}`);
  }
  return samples;
}
