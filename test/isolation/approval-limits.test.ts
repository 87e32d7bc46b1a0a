/**
 * Tenant B, with approvals on, tries to get a destructive command past the
 * approval guard (docker backend, `approvals.skip_in_containers: false`).
 *
 * - A command whose name is built at run time (`c=r; ${c}m -r -f x`,
 *   `$(echo rm) -rf x`, backquotes, `eval "$x"`): each waits for an
 *   approval under Berth's own key, and the directory is still there.
 * - Indirect execution the guard cannot read (a script written with
 *   write_file, then run; an execute_code script calling `subprocess` and
 *   `os.system`): it runs, with no approval asked, as docs/security.md
 *   says, and what it does stays in B's sandbox: A's files are intact.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Dockerode from 'dockerode';
import { LABEL } from '../../services/executor/backends/docker/container-spec.js';
import { dockerUnavailableReason, removeLabelled, runTaskIds } from '../support/docker-fixtures.js';
import { startTwoTenants, type TwoTenants } from '../support/two-tenants.js';

const docker = new Dockerode();
const unavailable = await dockerUnavailableReason(docker);
const KEY = 'command name built at run time (variable, substitution or eval of one)';

describe('tenant B cannot get a command with a built name past the approval guard (docker backend)', { skip: unavailable, timeout: 300_000 }, () => {
  let t: TwoTenants;
  const ids = runTaskIds();
  const aTask = ids.task('approval-a');
  const bTask = ids.task('approval-b');
  const json = (text: string) => JSON.parse(text) as Record<string, unknown>;
  const bTerminal = async (command: string) => json(await t.call(t.b, 'terminal', { command }, bTask));
  const aTerminal = async (command: string) => json(await t.call(t.a, 'terminal', { command }, aTask));

  before(async () => {
    t = await startTwoTenants({ backend: 'docker', configLines: ['approvals: { skip_in_containers: false }'] });
    assert.equal((await aTerminal('mkdir -p /workspace/victim && echo alpha > /workspace/victim/a.txt')).exit_code, 0);
    assert.equal((await bTerminal('mkdir -p /workspace/victim && echo beta > /workspace/victim/b.txt')).exit_code, 0);
  });
  after(async () => {
    await t?.stop();
    for (const id of ids.ids) await removeLabelled(docker, LABEL.task, id);
  });

  for (const command of [
    'c=r; ${c}m -r -f /workspace/victim',
    '$(echo rm) -rf /workspace/victim',
    '`echo rm` -rf /workspace/victim',
    'x="rm -rf /workspace/victim"; eval "$x"',
  ]) {
    test(`${command}: waits for an approval, and nothing was deleted`, async () => {
      const r = await bTerminal(command);
      assert.equal(r.status, 'pending_approval', JSON.stringify(r));
      assert.equal(r.pattern_key, KEY);
      const still = await bTerminal('cat /workspace/victim/b.txt');
      assert.deepEqual([still.output, still.exit_code], ['beta', 0]);
    });
  }

  test('a script written with write_file and then run is not read by the guard; it stays in B\'s sandbox', async () => {
    const written = json(await t.call(t.b, 'write_file', { path: '/workspace/wipe.sh', content: 'rm -rf /workspace/victim\n' }, bTask));
    assert.equal(written.error ?? null, null, JSON.stringify(written));
    // No approval was asked (no pending_approval answer): the script ran, and the directory is gone.
    const ran = await bTerminal('bash /workspace/wipe.sh; echo "script exit $?"; ls -d /workspace/victim');
    assert.deepEqual(ran, { output: "script exit 0\nls: cannot access '/workspace/victim': No such file or directory", exit_code: 2, error: null });
    const a = await aTerminal('cat /workspace/victim/a.txt');
    assert.deepEqual([a.output, a.exit_code], ['alpha', 0]);
  });

  test('an execute_code script running rm -rf through subprocess and os.system is not read by the guard; it stays in B\'s sandbox', async () => {
    assert.equal((await bTerminal('mkdir -p /workspace/by-subprocess /workspace/by-system && touch /workspace/by-subprocess/f /workspace/by-system/f')).exit_code, 0);
    const code = [
      'import os, subprocess',
      'done = subprocess.run(["rm", "-rf", "/workspace/by-subprocess"]).returncode',
      'status = os.system("rm -rf /workspace/by-system")',
      'print(done, status, os.path.exists("/workspace/by-subprocess"), os.path.exists("/workspace/by-system"))',
    ].join('\n');
    const r = json(await t.call(t.b, 'execute_code', { code }, bTask));
    // What the guard stops in a command (the terminal tool's `rm -rf` asks first) ran here at once: the script's text is not matched.
    assert.equal(r.status, 'success', JSON.stringify(r));
    assert.equal(r.output, '0 0 False False\n');
    const gone = await bTerminal('ls /workspace/by-subprocess /workspace/by-system 2>&1 | wc -l');
    assert.deepEqual([gone.output, gone.exit_code], ['2', 0]);
    const a = await aTerminal('cat /workspace/victim/a.txt');
    assert.deepEqual([a.output, a.exit_code], ['alpha', 0]);
  });

  test('the same rm -rf as a terminal command waits for an approval (the guard reads commands, not scripts)', async () => {
    assert.equal((await bTerminal('mkdir -p /workspace/kept && touch /workspace/kept/f')).exit_code, 0);
    const r = await bTerminal('rm -rf /workspace/kept');
    assert.equal(r.status, 'pending_approval', JSON.stringify(r));
    const still = await bTerminal('ls /workspace/kept');
    assert.deepEqual([still.output, still.exit_code], ['f', 0]);
  });
});
