/**
 * Tenant B goes after what runs its own sandbox (docker backend): the exec
 * agent, which holds the executor's token and is the only way into the
 * sandbox, and PID 1. Commands run as the task's uid; the agent and PID 1
 * are the container root's, and the agent starts isolated from the
 * sandbox's Python.
 *
 * - B plants Python that runs wherever it is imported (a `.pth` and
 *   `usercustomize.py` in the user site of the persistent home, a
 *   `sitecustomize.py` and modules the agent imports in a PYTHONPATH
 *   directory of the persistent workspace, a PYTHONSTARTUP file; PYTHONPATH
 *   and PYTHONSTARTUP set in the container's environment and in B's shell),
 *   and checks that its own python3 runs every plant. Then the agent is
 *   killed (from outside: B cannot) and the next call replaces the
 *   container: the new agent ran none of it (each plant leaves a marker
 *   file and a log line wherever it runs), and serves B as before.
 * - B signals and ptraces PID 1 and the agent: refused, and both still run.
 * - The agent stops (from outside): B's next call finds out within a
 *   bounded time and gets a new container, with the usual notice, and A is
 *   served meanwhile.
 * - B renames, overwrites, plants and links files in /run/berth (the
 *   agent's archive, socket, token, the account files bound over /etc):
 *   every attempt refused. The task is suspended, and an archive and
 *   account files are planted in its host directory meanwhile (from
 *   outside: what a command could do under an older, world-writable
 *   layout); the resumed container's agent is a fresh copy of the
 *   executor's, its /etc/passwd and groups the executor's, and B is served.
 *   test/integration/docker-agent-hardening.test.ts does the same under an
 *   executor that is not root.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { appendFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { dockerUnavailableReason, execAsRoot, removeLabelled, taskNamesIn } from '../support/docker-fixtures.js';
import { HOST_DIR_ATTEMPTS, HOST_DIR_MODES, HOST_DIR_REFUSALS } from '../support/host-dir-attempts.js';
import { startTwoTenants, TENANT_B, type TwoTenants } from '../support/two-tenants.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);

/** The agent's process, as `pgrep -f` finds it. */
const AGENT_PATTERN = '^python3 -I -S /run/berth/berth_agent.pyz';
const PLANT_DIR = '/workspace/plant';

/** Python that leaves a marker (its name and effective uid) in /tmp and on stderr, wherever it runs. */
function payload(where: string): string {
  return [
    'import os, sys',
    'try:',
    `    sys.stderr.write("BERTH-PLANT-RAN ${where} euid=%d\\n" % os.geteuid())`,
    `    open("/tmp/berth-plant-${where}-%d" % os.geteuid(), "w").close()`,
    'except Exception:',
    '    pass',
    '',
  ].join('\n');
}

describe("tenant B's commands cannot reach the exec agent or PID 1 (docker backend)", { skip: unavailable, timeout: 600_000 }, () => {
  let t: TwoTenants;
  const run = randomBytes(4).toString('hex');
  const aTask = `iso-agent-a-${run}`;
  const bTask = `iso-agent-b-${run}`;
  let bContainer = '';
  const json = (text: string) => JSON.parse(text) as Record<string, unknown>;
  const bTerminal = async (command: string) => json(await t.call(t.b, 'terminal', { command, timeout: 120 }, bTask));
  const aTerminal = async (command: string) => json(await t.call(t.a, 'terminal', { command }, aTask));
  const containerId = async () => (await docker.getContainer(bContainer).inspect()).Id;
  const agentPid = async () => (await execAsRoot(docker, bContainer, `pgrep -f '${AGENT_PATTERN}' | head -1`)).stdout.trim();

  before(async () => {
    t = await startTwoTenants({
      backend: 'docker',
      env: {
        TERMINAL_CONTAINER_PERSISTENT: 'true',
        // In the container's own environment, which the agent inherits.
        TERMINAL_DOCKER_ENV: JSON.stringify({ PYTHONPATH: PLANT_DIR, PYTHONSTARTUP: `${PLANT_DIR}/startup.py` }),
      },
    });
    bContainer = (await taskNamesIn(t.serve.stateRoot)).container({ tenant: TENANT_B, taskId: bTask });
    assert.equal((await aTerminal('true')).exit_code, 0);
    assert.equal((await bTerminal('true')).exit_code, 0);
  });
  after(async () => {
    await t?.stop();
    for (const id of [aTask, bTask]) await removeLabelled(docker, LABEL.task, id);
  });

  test('Python planted in the home and workspace volumes and the environment never runs in a new agent', async () => {
    const userSite = String((await bTerminal('python3 -m site --user-site')).output).trim();
    assert.match(userSite, /^\/home\/sandbox\/\.local\/lib\/python3\.\d+\/site-packages$/);
    const plants: Record<string, string> = {
      [`${userSite}/berth-plant.pth`]: `import os, sys; exec(${JSON.stringify(payload('pth'))})\n`,
      [`${userSite}/usercustomize.py`]: payload('usercustomize'),
      [`${PLANT_DIR}/sitecustomize.py`]: payload('sitecustomize'),
      [`${PLANT_DIR}/startup.py`]: payload('startup'),
      // Modules the agent imports, first on a PYTHONPATH that honoured it.
      [`${PLANT_DIR}/selectors.py`]: payload('selectors'),
      [`${PLANT_DIR}/ctypes.py`]: payload('ctypes'),
      // The agent's working directory.
      '/workspace/sitecustomize.py': payload('cwd-sitecustomize'),
      '/workspace/selectors.py': payload('cwd-selectors'),
    };
    for (const [path, content] of Object.entries(plants)) {
      const r = json(await t.call(t.b, 'write_file', { path, content }, bTask));
      assert.equal(r.error, undefined, `${path}: ${JSON.stringify(r)}`);
    }
    // The script's own directory is the container root's: nothing can be planted beside the agent.
    const beside = await bTerminal('touch /run/berth/selectors.py 2>/dev/null && echo planted || echo refused');
    assert.equal(beside.output, 'refused');
    // The same variables in B's shell, which every later command inherits.
    await bTerminal(`export PYTHONPATH=${PLANT_DIR} PYTHONSTARTUP=${PLANT_DIR}/startup.py`);

    // Control: B's own python3 runs the plants (so a planted agent would have).
    const control = await bTerminal('python3 -c "import selectors, ctypes" 2>/dev/null; ls /tmp | grep "^berth-plant-" | sort; rm -f /tmp/berth-plant-*');
    const uid = String((await bTerminal('id -u')).output).trim();
    assert.deepEqual(
      String(control.output).split('\n'),
      // `python3 -c` looks in its working directory (the workspace) first, then on PYTHONPATH.
      ['ctypes', 'cwd-selectors', 'pth', 'sitecustomize', 'usercustomize'].map((where) => `berth-plant-${where}-${uid}`),
    );

    // The agent dies (B cannot kill it: see the next test); B's next call gets a new container, whose agent starts
    // with every plant in place.
    const before = await containerId();
    assert.equal((await execAsRoot(docker, bContainer, `kill -9 $(pgrep -f '${AGENT_PATTERN}')`)).exitCode, 0);
    const after = json(await t.call(t.b, 'terminal', { command: 'ls /tmp | grep -c "^berth-plant-" || true; cat ~/.local/lib/python3*/site-packages/berth-plant.pth | wc -l' }, bTask));
    assert.notEqual(await containerId(), before, 'the container was replaced');
    assert.match(String(after.output), /^0\n1\n/, 'no plant ran in the new container; the plants are still there');
    assert.match(JSON.stringify(after), /a new container was started/);
    const logs = ((await docker.getContainer(bContainer).logs({ stdout: true, stderr: true, follow: false })) as Buffer).toString('latin1');
    assert.doesNotMatch(logs, /BERTH-PLANT-RAN/);
    // The new agent: the container root's, isolated, and it serves B's calls (the executor took its hello).
    const pid = await agentPid();
    const status = await execAsRoot(docker, bContainer, `grep -E '^Uid:' /proc/${pid}/status | cut -f2; tr '\\0' ' ' < /proc/${pid}/cmdline`);
    assert.deepEqual(status.stdout.split('\n'), ['0', `python3 -I -S /run/berth/berth_agent.pyz --user ${uid}:${uid} /run/berth/agent.sock `]);
    assert.equal((await bTerminal('echo served')).output, 'served');
    assert.equal((await aTerminal('echo a-served')).output, 'a-served');
  });

  test('B can neither signal nor ptrace PID 1 or the agent; both keep running and reaping', async () => {
    const pid = await agentPid();
    const r = await bTerminal(
      [
        `agent=${pid}`,
        'for target in 1 $agent; do for sig in STOP KILL TERM; do kill -$sig $target 2>/dev/null && echo "$target $sig sent" || echo "$target $sig refused"; done; done',
        // PTRACE_ATTACH (16) and PTRACE_SEIZE (0x4206): EPERM (1) for both targets. (-I: B's plants stay out of it.)
        'python3 -I -c "import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); [print(p, r, l.ptrace(r,int(p),0,0), ctypes.get_errno()) for p in sys.argv[1:] for r in (16,0x4206)]" 1 $agent',
        'grep -E "^State:" /proc/1/status /proc/$agent/status | cut -f2 | cut -c1',
      ].join('\n'),
    );
    assert.equal(
      r.output,
      ['1 STOP refused', '1 KILL refused', '1 TERM refused', `${pid} STOP refused`, `${pid} KILL refused`, `${pid} TERM refused`, `1 16 -1 1`, `1 16902 -1 1`, `${pid} 16 -1 1`, `${pid} 16902 -1 1`, 'S', 'S'].join('\n'),
    );
    // Orphans are still reaped by PID 1: no zombie is left behind.
    // A child left behind by its exiting parent: PID 1 inherits it and must reap it when it ends.
    const reaped = await bTerminal(
      'python3 -I -c "import os, time; os.fork() and os._exit(0); time.sleep(0.2)"; sleep 1; ps -eo stat= | grep -c "^Z" || true',
    );
    assert.equal(reaped.output, '0', JSON.stringify(reaped));
    assert.equal(await agentPid(), pid, 'the same agent serves B');
  });

  test('an agent that stops answering is found out by the next call, which gets a new container with the usual notice', async () => {
    const before = await containerId();
    // Stopped from outside: what a wedged agent looks like (B cannot stop it: see above).
    assert.equal((await execAsRoot(docker, bContainer, `kill -STOP $(pgrep -f '${AGENT_PATTERN}')`)).exitCode, 0);
    const bCall = bTerminal('echo after-wedge');
    // A is served while B's call waits on its wedged agent.
    assert.equal((await aTerminal('echo a-meanwhile')).output, 'a-meanwhile');
    const r = await bCall;
    assert.equal(r.exit_code, 0, JSON.stringify(r));
    assert.match(String(r.output), /after-wedge/);
    assert.match(JSON.stringify(r), /The task's container lost its exec agent; a new container was started/);
    assert.notEqual(await containerId(), before);
    assert.equal((await bTerminal('echo next')).output, 'next');
  });

  test('B can rename, overwrite or plant nothing in /run/berth, and a resumed container starts a fresh copy of the agent', async () => {
    const attempts = await bTerminal(HOST_DIR_ATTEMPTS);
    assert.deepEqual(String(attempts.output).split('\n'), HOST_DIR_REFUSALS);
    // The executor runs as root here: all of it is root's, the archive readable by root alone.
    const modes = await bTerminal(HOST_DIR_MODES);
    assert.deepEqual(String(modes.output).split('\n'), [
      '/run/berth 755 0',
      '/run/berth/berth_agent.pyz 600 0',
      '/run/berth/passwd 644 0',
      '/run/berth/agent-unavailable 600 0',
    ]);
    const identity = String((await bTerminal('id -u; id -G')).output);
    const archive = async () => (await execAsRoot(docker, bContainer, 'sha256sum /run/berth/berth_agent.pyz | cut -c1-64')).stdout.trim();
    const shipped = await archive();
    const hostDir = (await docker.getContainer(bContainer).inspect()).Config.Labels[LABEL.hostDir]!;

    assert.equal((await t.b.suspend({ taskId: bTask })).suspended, true);
    // What a command could leave under an older layout (a world-writable /run/berth), for the root that starts next.
    await writeFile(path.join(hostDir, 'berth_agent.pyz'), 'planted\n');
    await appendFile(path.join(hostDir, 'passwd'), 'planted:x:0:0::/root:/bin/sh\n');
    await writeFile(path.join(hostDir, 'group'), `root:x:0:sandbox\nsandbox:x:${identity.split('\n')[0]}:\n`);
    await writeFile(path.join(hostDir, 'agent-unavailable'), 'planted\n');

    // The next call resumes the task: through its agent (no docker exec fallback), which is the executor's archive.
    const resumed = await bTerminal('id -u; id -G; grep -c planted /etc/passwd /etc/group || true');
    assert.equal(resumed.exit_code, 0, JSON.stringify(resumed));
    assert.equal(String(resumed.output), `${identity}\n/etc/passwd:0\n/etc/group:0`);
    assert.equal(await archive(), shipped);
    assert.match(await agentPid(), /^\d+$/, 'the agent runs');
    const again = await bTerminal(HOST_DIR_ATTEMPTS);
    assert.deepEqual(String(again.output).split('\n'), HOST_DIR_REFUSALS);
  });
});
