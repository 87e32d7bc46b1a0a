/**
 * `berth` starts fast because it loads only what a command uses: help and
 * flag parsing load no gRPC stack, no config schema and no backend client;
 * `berth call` and `berth tools` speak gRPC over node:http2 and load neither
 * @grpc/grpc-js nor nice-grpc, nor any server, backend, MCP or tracing code.
 * Each command runs as a person runs it (bin/berth in a child process), with
 * a module-load hook (test/support/module-log-hook.ts) that lists every
 * module the process loaded, ES modules and CommonJS alike.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MODULE_LOG_IMPORT, packageOf } from '../support/module-log-hook.js';
import { REPO_ROOT } from '../support/serve-process.js';

/** The packages a command may load only when it uses them. */
const HEAVY = {
  grpc: ['@grpc/grpc-js', 'nice-grpc', '@bufbuild/protobuf'],
  /** The gRPC stack whose start-up `berth call` and `berth tools` do without (http2-client.ts). */
  grpcJs: ['@grpc/grpc-js', 'nice-grpc'],
  config: ['zod', 'yaml', 'smol-toml', 'ajv'],
  backends: ['dockerode', 'ssh2', '@kubernetes/client-node', '@daytonaio/sdk', 'testcontainers'],
  servers: ['prom-client', 'pino', 'nice-grpc-server-health', 'nice-grpc-server-reflection', 'hono'],
  mcp: ['@modelcontextprotocol/sdk'],
  tracing: ['@opentelemetry/api', '@opentelemetry/otlp-exporter-base'],
};

interface Run {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly modules: readonly string[];
  readonly packages: ReadonlySet<string>;
}

function runBerth(args: readonly string[]): Run {
  const dir = mkdtempSync(join(tmpdir(), 'berth-lazy-load-'));
  try {
    const log = join(dir, 'modules.txt');
    const r = spawnSync(process.execPath, ['--import', MODULE_LOG_IMPORT, join(REPO_ROOT, 'bin', 'berth'), ...args], {
      cwd: dir,
      encoding: 'utf8',
      env: { ...process.env, BERTH_MODULE_LOG: log, BERTH_SERVER: '' },
      timeout: 60_000,
    });
    const modules = readFileSync(log, 'utf8').split('\n').filter(Boolean);
    const packages = new Set(modules.map(packageOf).filter((p): p is string => p !== undefined));
    return { status: r.status, stdout: r.stdout, stderr: r.stderr, modules, packages };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function assertNoneLoaded(run: Run, groups: readonly (keyof typeof HEAVY)[], what: string): void {
  const loaded = groups.flatMap((g) => HEAVY[g]).filter((p) => run.packages.has(p));
  assert.deepEqual(loaded, [], `${what} loaded ${loaded.join(', ')}; all packages it loaded: ${[...run.packages].join(', ')}`);
}

function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

const ALL = Object.keys(HEAVY) as (keyof typeof HEAVY)[];

describe('berth loads only what a command uses', () => {
  for (const args of [['call', 'terminal', '{"command":"true"}'], ['tools']]) {
    test(`berth ${args[0]} loads the message encoders and the HTTP/2 client, not grpc-js, even to say nothing listens`, async () => {
      const port = await closedPort();
      const run = runBerth([...args, '--server', `127.0.0.1:${port}`]);
      assert.equal(run.status, 6, run.stderr);
      assert.match(run.stderr, /cannot reach the Berth server at 127\.0\.0\.1:\d+ \(.*ECONNREFUSED/);
      // The hook sees what a command loads: the encoders' package and the client.
      assert.ok(run.packages.has('@bufbuild/protobuf'), `no @bufbuild/protobuf among ${[...run.packages].join(', ')}`);
      assert.ok(run.modules.some((m) => m.endsWith('/dist/services/cli/http2-client.js')));
      assertNoneLoaded(run, ['grpcJs', 'config', 'backends', 'servers', 'mcp', 'tracing'], `berth ${args[0]}`);
    });
  }

  test('berth shell still goes through grpc-js (the hook sees it)', async () => {
    const port = await closedPort();
    const run = runBerth(['shell', '--server', `127.0.0.1:${port}`]);
    assert.ok(run.packages.has('@grpc/grpc-js'), `no @grpc/grpc-js among ${[...run.packages].join(', ')}`);
  });

  test('berth --help loads no gRPC, config schema, backend, server, MCP or tracing package', () => {
    const run = runBerth(['--help']);
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stdout, /^Usage: berth/m);
    assertNoneLoaded(run, ALL, 'berth --help');
  });

  for (const command of ['call', 'tools', 'shell', 'mcp', 'serve', 'dispatcher', 'executor', 'doctor', 'check-command', 'bench']) {
    test(`berth ${command} --help loads none of them either`, () => {
      const run = runBerth([command, '--help']);
      assert.equal(run.status, 0, run.stderr);
      assert.match(run.stdout, new RegExp(`berth ${command}`));
      assertNoneLoaded(run, ALL, `berth ${command} --help`);
    });
  }

  test('a usage error in berth call loads no gRPC stack', () => {
    const run = runBerth(['call', '--bogus']);
    assert.equal(run.status, 2);
    assert.match(run.stderr, /unknown flag --bogus for 'berth call'/);
    assertNoneLoaded(run, ALL, 'berth call --bogus');
  });
});
