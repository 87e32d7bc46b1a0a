/**
 * The singularity backend through the apptainer test double: what the
 * conformance suite does not cover (argv as sent, image conversion once,
 * sweeping, environment passthrough, persistence). Neither apptainer nor
 * singularity can be installed where these tests run.
 */
import assert from 'node:assert/strict';
import { createHash, randomInt } from 'node:crypto';
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { runDoctor, type Finding } from '../../services/cli/doctor.js';
import { parseConfig } from '../../services/common/config-load.js';
import { BerthError } from '../../services/common/errors.js';
import { createLogger } from '../../services/common/logging.js';
import type { BackendEnvironment, ExecOptions } from '../../services/executor/backend.js';
import { findAgentScript } from '../../services/executor/backends/shared/agent/agent-script.js';
import { SingularityAgentEnvironment } from '../../services/executor/backends/singularity/singularity-agent-environment.js';
import { SingularityBackend, type SingularityBackendOptions } from '../../services/executor/backends/singularity/singularity-backend.js';
import {
  APPTAINER_DOUBLE,
  DOUBLE_IMAGE,
  doubleBackendOptions,
  doubleImageWithoutPython,
  doubleState,
  doubleUnavailableReason,
} from '../support/apptainer-double.js';
import { countProcessesScript } from '../../services/conformance/process-probe.js';

const skip = doubleUnavailableReason();

async function run(env: BackendEnvironment, script: string, extra: Partial<ExecOptions> = {}) {
  const chunks: Buffer[] = [];
  const r = await env.exec({ script, timeoutMs: 60_000, ...extra, onOutput: (c) => chunks.push(c) });
  return { ...r, output: Buffer.concat(chunks).toString('utf8') };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A `sleep` argument no other test uses, so process counts find only ours. */
const uniqueSeconds = () => String(800_000 + randomInt(0, 99_999));

async function countOf(env: BackendEnvironment, arg: string): Promise<number> {
  const out = (await run(env, countProcessesScript(arg))).output;
  return Number(/count=(\d+)/.exec(out)?.[1] ?? NaN);
}

async function waitForCount(env: BackendEnvironment, arg: string, want: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if ((await countOf(env, arg)) === want) return;
    await sleep(100);
  }
  assert.equal(await countOf(env, arg), want, `processes running sleep ${arg}`);
}

/** A group whose leader waits on two members, one of them deaf to SIGTERM: only SIGKILL of the whole group ends it. */
const stubbornGroup = (a: string, b: string) => `sleep ${a} & (trap '' TERM; exec sleep ${b}) & wait`;

/** Checks that a timed-out command and a killed background process leave nothing of their group running. */
function processGroupKillTests(getEnv: () => BackendEnvironment): void {
  it('kills the whole process group of a timed-out command, a member ignoring SIGTERM too', async () => {
    const env = getEnv();
    const [a, b] = [uniqueSeconds(), uniqueSeconds()];
    const r = await run(env, stubbornGroup(a, b), { timeoutMs: 1500 });
    assert.equal(r.exitCode, 124);
    assert.equal(r.timedOut, true);
    assert.equal(await countOf(env, a), 0);
    assert.equal(await countOf(env, b), 0);
  });

  it('kills the whole process group of a background process', async () => {
    const env = getEnv();
    const [a, b] = [uniqueSeconds(), uniqueSeconds()];
    const exits: number[] = [];
    const bg = await env.startBackground({ script: stubbornGroup(a, b), onOutput: () => undefined, onExit: (c) => exits.push(c) });
    await waitForCount(env, a, 1);
    await waitForCount(env, b, 1);
    await bg.kill();
    assert.equal(await countOf(env, a), 0);
    assert.equal(await countOf(env, b), 0);
    assert.deepEqual(exits, [-15]);
  });
}

/** Runs `berth doctor` on the singularity backend through the double, with `image`. */
async function doctorOn(double: Awaited<ReturnType<typeof doubleState>>, image: string): Promise<Finding[]> {
  const config = parseConfig({
    terminal: { backend: 'singularity', singularity_binary: APPTAINER_DOUBLE, singularity_image: image, container_persistent: false },
    executor: { state_root: path.join(double.stateDir, 'doctor') },
  });
  // The doctor runs the CLI with the executor's own environment, as an executor would.
  const saved = Object.fromEntries(Object.keys(double.env).map((k) => [k, process.env[k]]));
  Object.assign(process.env, double.env);
  try {
    return await runDoctor(config, () => undefined);
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

describe('singularity backend: commands through the exec agent', { skip, timeout: 300_000 }, () => {
  let double: Awaited<ReturnType<typeof doubleState>>;
  let backend: SingularityBackend;
  let env: SingularityAgentEnvironment;
  const key = { tenant: 't', taskId: 'agent' };
  const execCalls = async () => (await double.calls()).filter((c) => c.startsWith('exec '));

  before(async () => {
    double = await doubleState();
    backend = await SingularityBackend.start(doubleBackendOptions(double, { killGraceMs: 500 }));
    const created = await backend.createEnvironment(key);
    assert.ok(created instanceof SingularityAgentEnvironment, created.description);
    env = created;
  });

  after(async () => {
    await backend?.close();
    await rm(double.stateDir, { recursive: true, force: true });
  });

  it('starts one agent per task with apptainer exec, and sends it every command and file operation', async () => {
    assert.equal(backend.transportOf(key), 'agent');
    const before = (await execCalls()).length;
    assert.match((await execCalls()).pop() ?? '', / instance:\/\/berth-[0-9a-f]{6}-[0-9a-f]{16} python3 \/berth\/agent\/berth_agent\.pyz --stdio --linger \/berth\/state\/agent\/linger\.sock $/);
    const parents: string[] = [];
    for (let i = 0; i < 3; i++) parents.push((await run(env, 'echo $PPID')).output.trim());
    await env.writeFile('/workspace/agent-file', Buffer.from('through the agent'));
    assert.equal((await env.readFile('/workspace/agent-file')).toString(), 'through the agent');
    assert.equal((await env.stat('/workspace/agent-file')).sizeBytes, 17);
    // The commands ran as children of the one agent, and no new apptainer exec was started for them.
    assert.deepEqual(parents, [String(env.agentPid), String(env.agentPid), String(env.agentPid)]);
    assert.equal((await run(env, 'tr "\\0" " " < /proc/$PPID/cmdline')).output, 'python3 /berth/agent/berth_agent.pyz --stdio --linger /berth/state/agent/linger.sock ');
    assert.equal((await execCalls()).length, before);
  });

  it("binds this executor's agent file read-only into the instance", async () => {
    const ours = createHash('sha256').update(await readFile(findAgentScript())).digest('hex');
    assert.equal((await run(env, 'sha256sum < /berth/agent/berth_agent.pyz')).output.split(' ')[0], ours);
    const r = await run(env, 'echo changed > /berth/agent/berth_agent.pyz 2>&1; echo "exit=$?"');
    assert.match(r.output, /Read-only file system/);
    assert.match(r.output, /exit=1/);
  });

  it('runs a command under a terminal', async () => {
    const r = await run(env, 'test -t 0 && test -t 1 && echo tty; read line; echo "got $line"', { pty: true, stdin: 'typed\n' });
    assert.equal(r.exitCode, 0);
    assert.match(r.output, /tty/);
    assert.match(r.output, /got typed/);
  });

  processGroupKillTests(() => env);

  it('starts a new agent when the old one went away, and says so', async () => {
    const old = env.agentPid;
    const r = await run(env, 'kill -9 $PPID; sleep 30');
    assert.equal(r.exitCode, 137);
    assert.deepEqual(env.takeNotices(), [
      `The exec agent in ${env.description} went away while a command ran; a new one was started: ` +
        'background processes started before are no longer tracked.',
    ]);
    assert.notEqual(env.agentPid, old);
    assert.equal((await run(env, 'echo $PPID')).output.trim(), String(env.agentPid));
  });

  it('berth doctor says commands reach the instance through the agent', async () => {
    const findings = await doctorOn(double, DOUBLE_IMAGE);
    assert.deepEqual(findings.filter((f) => f.verdict === 'fail'), []);
    assert.ok(
      findings.some((f) => f.verdict === 'ok' && f.text === 'commands reach the instance through the exec agent (one apptainer exec per task); execute_code runs in the instance'),
      JSON.stringify(findings),
    );
  });
});

describe('singularity backend on an image without python3', { skip, timeout: 300_000 }, () => {
  let double: Awaited<ReturnType<typeof doubleState>>;
  let image: string;
  let backend: SingularityBackend;
  let env: BackendEnvironment;
  const logLines: string[] = [];
  const execCalls = async () => (await double.calls()).filter((c) => c.startsWith('exec ')).length;

  before(async () => {
    double = await doubleState();
    image = await doubleImageWithoutPython(double);
    const logger = createLogger('warn', new Writable({ write: (c: Buffer, _e, cb) => (logLines.push(c.toString()), cb()) }));
    backend = await SingularityBackend.start(doubleBackendOptions(double, { image, killGraceMs: 500, logger }));
    env = await backend.createEnvironment({ tenant: 't', taskId: 'no-python-a' });
  });

  after(async () => {
    await backend?.close();
    await rm(double.stateDir, { recursive: true, force: true });
  });

  it('falls back to one apptainer exec per command, said once per image in the log', async () => {
    const other = await backend.createEnvironment({ tenant: 't', taskId: 'no-python-b' });
    assert.equal(backend.transportOf({ tenant: 't', taskId: 'no-python-a' }), 'apptainer-exec');
    assert.equal(backend.transportOf({ tenant: 't', taskId: 'no-python-b' }), 'apptainer-exec');
    const before = await execCalls();
    assert.equal((await run(env, 'echo one; command -v python3 || echo no-python3')).output, 'one\nno-python3\n');
    assert.equal((await run(other, 'echo two')).output, 'two\n');
    assert.equal(await execCalls(), before + 2);
    await env.writeFile('/workspace/f', Buffer.from('per command'));
    assert.equal((await env.readFile('/workspace/f')).toString(), 'per command');
    // Atomically, as through the agent: a new inode with the old mode, nothing left beside it.
    const inode = (await run(env, 'chmod 754 /workspace/f && stat -c %i /workspace/f')).output;
    await env.writeFile('/workspace/f', Buffer.from('again'));
    const after = (await run(env, "stat -c '%a %i' /workspace/f; cat /workspace/f; ls -A /workspace | grep -c berth-")).output;
    assert.equal(after.split('\n')[0]?.split(' ')[0], '754');
    assert.notEqual(`${after.split('\n')[0]?.split(' ')[1]}\n`, inode);
    assert.equal(after.split('\n').slice(1).join('\n'), 'again0\n');
    const said = logLines.filter((l) => l.includes('the exec agent cannot run here'));
    assert.equal(said.length, 1, said.join(''));
    assert.match(said[0] ?? '', /"reason":"no-python"/);
    assert.match(said[0] ?? '', /executable file not found in \$PATH/);
    await other.dispose();
  });

  processGroupKillTests(() => env);

  it('berth doctor says each command starts its own apptainer exec', async () => {
    const findings = await doctorOn(double, image);
    assert.deepEqual(findings.filter((f) => f.verdict === 'fail'), []);
    assert.ok(
      findings.some(
        (f) =>
          f.verdict === 'warn' &&
          f.text ===
            'the image cannot run the exec agent (no python3?): each command starts its own apptainer exec (slower), ' +
              'and execute_code runs in a per-task code container',
      ),
      JSON.stringify(findings),
    );
  });
});

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
