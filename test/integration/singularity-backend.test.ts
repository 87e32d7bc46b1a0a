/**
 * The singularity backend through the apptainer test double: what the
 * conformance suite does not cover (argv as sent, image conversion once,
 * sweeping, environment passthrough, persistence). Neither apptainer nor
 * singularity can be installed where these tests run.
 */
import assert from 'node:assert/strict';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { BerthError } from '../../services/common/errors.js';
import type { BackendEnvironment, ExecOptions } from '../../services/executor/backend.js';
import { SingularityBackend, type SingularityBackendOptions } from '../../services/executor/backends/singularity/singularity-backend.js';
import { DOUBLE_IMAGE, doubleBackendOptions, doubleState, doubleUnavailableReason } from '../support/apptainer-double.js';

const skip = doubleUnavailableReason();

async function run(env: BackendEnvironment, script: string, extra: Partial<ExecOptions> = {}) {
  const chunks: Buffer[] = [];
  const r = await env.exec({ script, timeoutMs: 60_000, ...extra, onOutput: (c) => chunks.push(c) });
  return { ...r, output: Buffer.concat(chunks).toString('utf8') };
}

describe('singularity backend through the apptainer test double', { skip, timeout: 600_000 }, () => {
  let double: Awaited<ReturnType<typeof doubleState>>;
  const backends: SingularityBackend[] = [];
  const start = async (extra: Partial<SingularityBackendOptions> = {}) => {
    const b = await SingularityBackend.start(
      doubleBackendOptions(double, { cliEnv: { ...double.env, APPTAINER_DOUBLE_BUILD_DELAY: '1' }, ...extra }),
    );
    backends.push(b);
    return b;
  };

  before(async () => {
    double = await doubleState();
  });

  after(async () => {
    await Promise.all(backends.map((b) => b.close()));
    await rm(double.stateDir, { recursive: true, force: true });
  });

  it('converts the docker:// image once for two tasks starting together', async () => {
    const backend = await start();
    const [a, b] = await Promise.all([
      backend.createEnvironment({ tenant: 't', taskId: 'a' }),
      backend.createEnvironment({ tenant: 't', taskId: 'b' }),
    ]);
    const builds = (await double.calls()).filter((c) => c.startsWith('build '));
    assert.equal(builds.length, 1, builds.join('\n'));
    assert.match(builds[0] ?? '', /^build --force \S+\.sif\.tmp-[0-9a-f]+ docker:\/\/berth-sandbox:latest $/);
    await Promise.all([a.dispose(), b.dispose()]);
  });

  it('starts a contained instance with binds, env and limits, and execs with --cleanenv', async () => {
    const backend = await start();
    const env = await backend.createEnvironment({ tenant: 't', taskId: 'argv' });
    await run(env, 'true');
    const calls = await double.calls();
    const startCall = calls.filter((c) => c.startsWith('instance start ')).pop() ?? '';
    assert.match(startCall, /^instance start --containall --no-home --writable-tmpfs --bind \S+\/work:\/workspace --bind \S+\/state:\/berth\/state --bind \S+\/agent\/[0-9a-f]{16}:\/berth\/agent:ro --env HOME=\/workspace --env LANG=C\.UTF-8 --memory 768M --cpus 1 --pids-limit 300 \S+\.sif berth-[0-9a-f]{6}-[0-9a-f]{16} $/);
    const execCall = calls.filter((c) => c.startsWith('exec ')).pop() ?? '';
    assert.match(execCall, /^exec --cleanenv --env HOME=\/workspace --env LANG=C\.UTF-8 --pwd \/workspace instance:\/\/berth-/);
    await env.dispose();
  });

  it('passes only named variables into the instance, commas and all', async () => {
    const backend = await start({
      baseEnv: { ...process.env, MY_API_KEY: 'k1,k2', OTHER_TOKEN: 'never', PLAIN_HOST_VAR: 'host-only' },
      envPassthrough: ['MY_API_KEY'],
      env: { EXTRA: 'e' },
    });
    const env = await backend.createEnvironment({ tenant: 't', taskId: 'env' });
    const r = await run(env, 'echo "key=$MY_API_KEY extra=$EXTRA per-call=$PER_CALL other=${OTHER_TOKEN-unset} host=${PLAIN_HOST_VAR-unset} double=${APPTAINER_DOUBLE_STATE-unset}"', {
      env: { PER_CALL: 'p' },
    });
    assert.equal(r.output, 'key=k1,k2 extra=e per-call=p other=unset host=unset double=unset\n');
    await env.dispose();
  });

  it('keeps tasks in separate process namespaces and filesystems', async () => {
    const backend = await start();
    const a = await backend.createEnvironment({ tenant: 't', taskId: 'ns-a' });
    const b = await backend.createEnvironment({ tenant: 't', taskId: 'ns-b' });
    const bg = await a.startBackground({ script: 'sleep 987651', onOutput: () => undefined, onExit: () => undefined });
    assert.ok(bg.pid > 1);
    assert.equal((await run(b, 'ps -eo args | grep -c "^sleep 98765[1]" || true')).output.trim(), '0');
    assert.equal((await run(a, 'ps -eo args | grep -c "^sleep 98765[1]" || true')).output.trim(), '1');
    await run(a, 'echo a > /etc/berth-marker');
    assert.equal((await run(b, 'cat /etc/berth-marker 2>/dev/null || echo absent')).output, 'absent\n');
    await bg.kill();
    await Promise.all([a.dispose(), b.dispose()]);
  });

  it('stops instances an earlier executor left behind, and only its own', async () => {
    const crashed = await start();
    await crashed.createEnvironment({ tenant: 't', taskId: 'left-behind' });
    const other = await start({ stateRoot: path.join(double.stateDir, 'other-executor') });
    const otherEnv = await other.createEnvironment({ tenant: 't', taskId: 'keep' });
    assert.equal((await crashed.ownInstances()).length, 1);
    // A new executor with the same state root, as after a crash.
    const restarted = await start();
    assert.deepEqual(await restarted.ownInstances(), []);
    assert.equal((await other.ownInstances()).length, 1, "another executor's instance is not touched");
    await otherEnv.dispose();
  });

  it('keeps the overlay and workspace of a persistent task across release', async () => {
    const backend = await start({ persistent: true, stateRoot: path.join(double.stateDir, 'persistent') });
    const key = { tenant: 't', taskId: 'persist' };
    const first = await backend.createEnvironment(key);
    await run(first, 'echo kept > /etc/berth-persist; echo work > /workspace/file');
    await first.dispose();
    const second = await backend.createEnvironment(key);
    assert.equal((await run(second, 'cat /etc/berth-persist /workspace/file')).output, 'kept\nwork\n');
    await second.dispose();
  });

  it('fails clearly when the runtime is missing', async () => {
    await assert.rejects(
      SingularityBackend.start({ image: DOUBLE_IMAGE, stateRoot: path.join(double.stateDir, 'none'), baseEnv: { PATH: '/nonexistent' } }),
      (err: unknown) => err instanceof BerthError && err.code === 'FAILED_PRECONDITION' && /neither apptainer nor singularity/.test(err.message),
    );
    await assert.rejects(
      SingularityBackend.start({ binary: '/nonexistent/apptainer', image: DOUBLE_IMAGE, stateRoot: path.join(double.stateDir, 'none') }),
      (err: unknown) => err instanceof BerthError && err.code === 'FAILED_PRECONDITION' && /was not found/.test(err.message),
    );
  });
});
