/**
 * A server holds in memory only what its deployment uses. gRPC reflection
 * (nice-grpc-server-reflection, google-protobuf and the parsed descriptor
 * set, 3–4 MiB of a server's resident memory) loads at its first request: a server that is
 * only started and called never loads it, and a reflection request still
 * gets its answer. `berth executor` runs as deployed (bin/berth in a child
 * process) with the module-load hook of test/support/module-log-hook.ts.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createChannel, createClient } from 'nice-grpc';
import { HealthDefinition } from 'nice-grpc-server-health';
import type * as Reflection from 'nice-grpc-server-reflection';
import type * as ReflectionPb from 'nice-grpc-server-reflection/lib/proto/grpc/reflection/v1/reflection_pb.js';
import { startListeningChild } from '../../services/cli/bench/listening-child.js';
import { SERVER_NODE_FLAGS } from '../../services/cli/server-node-flags.js';
import { MODULE_LOG_IMPORT, packageOf } from '../support/module-log-hook.js';
import { BERTH_BIN } from '../support/serve-process.js';

const REFLECTION_PACKAGES = ['nice-grpc-server-reflection', 'google-protobuf'];

/**
 * Starts `berth executor` on the local backend with the hook, runs `use`
 * against its address, stops it, and returns the packages it loaded.
 */
async function executorPackages(use: (address: string) => Promise<void>): Promise<Set<string>> {
  const dir = mkdtempSync(join(tmpdir(), 'berth-server-lazy-load-'));
  try {
    const home = join(dir, 'home');
    mkdirSync(home);
    const log = join(dir, 'modules.txt');
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      HOME: home,
      BERTH_STATE_ROOT: join(dir, 'state'),
      BERTH_EXECUTOR_SECRET: randomBytes(16).toString('hex'),
      BERTH_MODULE_LOG: log,
    };
    delete env.BERTH_CONFIG;
    const executor = await startListeningChild({
      name: 'berth executor',
      args: [...SERVER_NODE_FLAGS, '--import', MODULE_LOG_IMPORT, BERTH_BIN, 'executor', '--backend', 'local', '--port', '0', '--log-level', 'warn'],
      env,
      cwd: dir,
    });
    try {
      await use(executor.address);
    } finally {
      assert.equal(await executor.stop(), 0, executor.stderr());
    }
    return new Set(readFileSync(log, 'utf8').split('\n').filter(Boolean).map(packageOf).filter((p): p is string => p !== undefined));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('a server loads gRPC reflection at its first request', () => {
  test('a started executor that answers a health check has loaded no reflection package', async () => {
    const packages = await executorPackages(async (address) => {
      const channel = createChannel(address);
      try {
        const r = await createClient(HealthDefinition, channel).check({ service: '' });
        assert.equal(r.status, 1 /* SERVING */);
      } finally {
        channel.close();
      }
    });
    assert.ok(packages.has('@grpc/grpc-js'), `the hook saw ${[...packages].join(', ')}`);
    const loaded = REFLECTION_PACKAGES.filter((p) => packages.has(p));
    assert.deepEqual(loaded, [], `loaded ${loaded.join(', ')} without a reflection request`);
  });

  test('a reflection request loads it and gets the service list and the file that defines the service', async () => {
    const require = createRequire(import.meta.url);
    const { ServerReflectionService } = require('nice-grpc-server-reflection') as typeof Reflection;
    const pb = require('nice-grpc-server-reflection/lib/proto/grpc/reflection/v1/reflection_pb.js') as typeof ReflectionPb;
    const packages = await executorPackages(async (address) => {
      const channel = createChannel(address);
      try {
        const client = createClient(ServerReflectionService, channel);
        async function* requests() {
          yield new pb.ServerReflectionRequest().setListServices('*');
          yield new pb.ServerReflectionRequest().setFileContainingSymbol('berth.v1.Executor');
          yield new pb.ServerReflectionRequest().setFileContainingSymbol('berth.v1.NoSuchService');
        }
        const responses = [];
        for await (const r of client.serverReflectionInfo(requests())) responses.push(r);
        assert.equal(responses.length, 3);
        const names = responses[0]!.getListServicesResponse()?.getServiceList().map((s) => s.getName());
        assert.deepEqual(names, ['berth.v1.Executor']);
        assert.equal(responses[1]!.getFileDescriptorResponse()?.getFileDescriptorProtoList().length, 1);
        assert.equal(responses[2]!.getErrorResponse()?.getErrorMessage(), 'Symbol not found: berth.v1.NoSuchService');
      } finally {
        channel.close();
      }
    });
    assert.ok(packages.has('google-protobuf'), `the hook saw ${[...packages].join(', ')}`);
  });
});
