/**
 * The Modal stand-in (a test double of Modal's control plane, backed by the
 * local Docker engine), driven by the pinned `modal` SDK exactly as a user's
 * code would drive Modal: started as `npm run standin -- modal` starts it,
 * reached through MODAL_SERVER_URL only.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import Dockerode from 'dockerode';
import type * as ModalSdk from 'modal';
import { modalDefinitions } from '../standins/modal/sdk-definitions.js';
import { dockerUnavailableReason, SANDBOX_IMAGE } from '../support/docker-fixtures.js';
import { startModalStandin, type StandinProcess } from '../support/modal-standin-process.js';

type Modal = typeof ModalSdk;

const docker = new Dockerode();
const skip = await dockerUnavailableReason(docker);

describe('Modal stand-in', { skip }, () => {
  let standin: StandinProcess;
  let modal: Modal;
  let client: InstanceType<Modal['ModalClient']>;
  const saved = { ...process.env };

  before(async () => {
    standin = await startModalStandin();
    Object.assign(process.env, standin.env);
    modal = await import('modal');
    client = new modal.ModalClient({ logger: { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} } });
  });

  after(async () => {
    for (const key of Object.keys(standin?.env ?? {})) {
      if (saved[key] === undefined) delete process.env[key];
      else process.env[key] = saved[key];
    }
    await standin?.stop();
  });

  it("uses the installed SDK's own service definitions", () => {
    const require = createRequire(import.meta.url);
    const pkg = JSON.parse(readFileSync(path.join(path.dirname(require.resolve('modal')), '..', 'package.json'), 'utf8')) as {
      version: string;
    };
    const defs = modalDefinitions();
    assert.equal(defs.sdkVersion, pkg.version);
    assert.equal(defs.controlPlane.fullName, 'modal.client.ModalClient');
    assert.equal(defs.commandRouter.fullName, 'modal.task_command_router.TaskCommandRouter');
    assert.ok(defs.commandRouter.methods.taskExecStart && defs.controlPlane.methods.sandboxCreateV2);
  });

  it('creates a named sandbox, execs with stdin through the command router, finds it by name, snapshots and restores', { timeout: 120_000 }, async () => {
    const app = await client.apps.fromName('berth', { createIfMissing: true });
    const image = client.images.fromRegistry(SANDBOX_IMAGE);
    const sb = await client.sandboxes.create(app, image, { name: 'standin-test-1', cpu: 0.5, memoryMiB: 256, timeoutMs: 600_000 });
    try {
      const proc = await sb.exec(['bash', '-c', 'echo out; cat; echo err >&2; exit 3'], { mode: 'binary' });
      const writer = proc.stdin.getWriter();
      await writer.write(new TextEncoder().encode('from stdin\n'));
      await writer.close();
      assert.equal(Buffer.from(await proc.stdout.readBytes()).toString(), 'out\nfrom stdin\n');
      assert.equal(Buffer.from(await proc.stderr.readBytes()).toString(), 'err\n');
      assert.equal(await proc.wait(), 3);

      const found = await client.sandboxes.fromName('berth', 'standin-test-1');
      assert.equal(found.sandboxId, sb.sandboxId);
      // The container has the limits the SDK asked for.
      const [containerId] = await standin.containers();
      const info = await docker.getContainer(containerId!).inspect();
      assert.equal(info.HostConfig.NanoCpus, 500_000_000);
      assert.equal(info.HostConfig.Memory, 256 * 1024 * 1024);

      await (await found.exec(['bash', '-c', 'echo kept > /tmp/kept'])).wait();
      const snapshot = await found.snapshotFilesystem();
      await sb.terminate();
      await assert.rejects(client.sandboxes.fromName('berth', 'standin-test-1'), modal.NotFoundError);

      const restored = await client.sandboxes.create(app, await client.images.fromId(snapshot.imageId), { name: 'standin-test-1' });
      try {
        assert.equal(await (await restored.exec(['cat', '/tmp/kept'])).stdout.readText(), 'kept\n');
      } finally {
        await restored.terminate();
      }
    } finally {
      await sb.terminate().catch(() => undefined);
    }
  });

  it('blocks the network when the SDK asks', { timeout: 60_000 }, async () => {
    const app = await client.apps.fromName('berth', { createIfMissing: true });
    const sb = await client.sandboxes.create(app, client.images.fromRegistry(SANDBOX_IMAGE), { blockNetwork: true });
    try {
      const proc = await sb.exec(['bash', '-c', 'ls /sys/class/net']);
      assert.equal((await proc.stdout.readText()).trim(), 'lo');
    } finally {
      await sb.terminate();
    }
  });

  it('answers a call it does not implement with UNIMPLEMENTED, and a bad token with UNAUTHENTICATED', async () => {
    await assert.rejects(client.secrets.fromName('anything'), (err: Error & { code?: number }) => {
      assert.equal(err.code, 12, String(err));
      assert.match(err.message, /not implemented by the Modal stand-in/);
      return true;
    });
    const bad = new modal.ModalClient({ tokenId: 'ak-wrong', tokenSecret: 'as-wrong', logger: { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} } });
    await assert.rejects(bad.apps.fromName('berth', { createIfMissing: true }), (err: Error & { code?: number }) => {
      assert.equal(err.code, 16, String(err));
      return true;
    });
  });

  it('fails an image the engine does not have, naming it', { timeout: 30_000 }, async () => {
    const app = await client.apps.fromName('berth', { createIfMissing: true });
    await assert.rejects(
      client.sandboxes.create(app, client.images.fromRegistry('berth-no-such-image:nope')),
      /berth-no-such-image:nope was not found/,
    );
  });

  it('removes its containers when it gets SIGTERM', { timeout: 60_000 }, async () => {
    const app = await client.apps.fromName('berth', { createIfMissing: true });
    await client.sandboxes.create(app, client.images.fromRegistry(SANDBOX_IMAGE), { name: 'left-running' });
    assert.equal((await standin.containers()).length, 1);
    assert.equal(await standin.stop(), 0);
    assert.deepEqual(await standin.containers(), []);
  });
});
