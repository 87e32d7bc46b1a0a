/**
 * The shared resources cases draw on: bench servers (one per distinct
 * options, started on first use), the Docker engine check and the probe of
 * which backends this build has. Closed once, after the last case.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { type BackendName } from '../../common/config.js';
import { parseConfig } from '../../common/config-load.js';
import { silentLogger } from '../../common/logging.js';
import { createBackend } from '../../executor/backends/create-backend.js';
import type { BenchContext, BenchMode } from './bench-case.js';
import { startBenchServer, type BenchServer, type BenchServerOptions } from './bench-server-process.js';

export interface ClosableBenchContext extends BenchContext {
  close(): Promise<void>;
}

/** Backends that need the Docker engine before createBackend can say whether they work. */
const DOCKER_BACKED: ReadonlySet<BackendName> = new Set(['docker']);

export function createBenchContext(options: {
  mode: BenchMode;
  repoRoot: string;
  note: (message: string) => void;
}): ClosableBenchContext {
  const { mode, repoRoot, note } = options;
  const servers = new Map<string, Promise<BenchServer>>();
  const backendProbes = new Map<BackendName, Promise<string | undefined>>();
  let docker: Promise<string | undefined> | undefined;

  const dockerUnavailable = () => {
    docker ??= (async () => {
      try {
        await promisify(execFile)('bash', [join(repoRoot, 'scripts', 'ensure-docker.sh')], { timeout: 300_000 });
        return undefined;
      } catch (err) {
        const e = err as { stderr?: string; message: string };
        const last = (e.stderr ?? '').trim().split('\n').pop();
        return `Docker engine not available: ${last || e.message}`;
      }
    })();
    return docker;
  };

  const probeBackend = async (name: BackendName): Promise<string | undefined> => {
    if (!existsSync(join(repoRoot, 'services', 'executor', 'backends', name))) return `${name} backend not built yet`;
    if (DOCKER_BACKED.has(name)) {
      const reason = await dockerUnavailable();
      if (reason !== undefined) return reason;
    }
    // A state root of the probe's own: the default one (under the temp dir) would outlive it.
    const stateRoot = mkdtempSync(join(tmpdir(), 'berth-bench-probe-'));
    try {
      const backend = await createBackend(parseConfig({ terminal: { backend: name }, executor: { state_root: stateRoot } }), silentLogger());
      await backend.close();
      return undefined;
    } catch (err) {
      // Any other refusal (an ssh backend without ssh_host, say) means it is built but needs settings the case supplies.
      const message = err instanceof Error ? err.message : String(err);
      return /not available in this version/.test(message) ? `${name} backend not built yet` : undefined;
    } finally {
      rmSync(stateRoot, { recursive: true, force: true });
    }
  };

  return {
    mode,
    repoRoot,
    note,
    scaled: (values) => values[mode],
    dockerUnavailable,
    backendMissing(name) {
      let probe = backendProbes.get(name);
      if (probe === undefined) {
        probe = probeBackend(name);
        backendProbes.set(name, probe);
      }
      return probe;
    },
    server(serverOptions: BenchServerOptions = {}) {
      const key = JSON.stringify([
        serverOptions.backend ?? 'local',
        serverOptions.config ?? {},
        serverOptions.env ?? {},
        serverOptions.shellTiming === true,
      ]);
      let server = servers.get(key);
      if (server === undefined) {
        server = startBenchServer(serverOptions);
        servers.set(key, server);
        // A failed start is not cached: the next case gets its own error, not a stale one.
        server.catch(() => servers.delete(key));
      }
      return server;
    },
    async close() {
      const started = await Promise.allSettled(servers.values());
      servers.clear();
      await Promise.all(started.map((s) => (s.status === 'fulfilled' ? s.value.stop() : undefined)));
    },
  };
}
