/**
 * New local tasks share one login shell (services/executor/backends/local/
 * login-snapshot.ts): the login profile runs once per environment
 * definition, each task starts from its own copy of that snapshot, and a
 * changed profile is taken by the next new task. The profile here counts
 * its runs in a file, so the test sees how many login shells ran.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { BackendEnvironment } from '../../services/executor/backend.js';
import { LocalBackend } from '../../services/executor/backends/local/local-backend.js';
import { ShellStateRunner } from '../../services/executor/shell-state/shell-state-runner.js';

describe('local backend: one login shell for many new tasks', () => {
  let root: string;
  let home: string;
  let backend: LocalBackend;
  const envs: BackendEnvironment[] = [];
  let taskNo = 0;

  const profile = (value: string) =>
    writeFile(path.join(home, '.profile'), `echo ran >> "$HOME/profile-runs"\nexport PROFILE_VAR=${value}\nprofile_fn() { echo fn-${value}; }\n`);
  const runs = async () => (await readFile(path.join(home, 'profile-runs'), 'utf8').catch(() => '')).split('\n').filter(Boolean).length;

  /** A new task's runner, and the output of `command` as its first call. */
  async function newTask(command: string): Promise<{ runner: ShellStateRunner; output: string }> {
    const env = await backend.createEnvironment({ tenant: 't', taskId: `login-${++taskNo}` });
    envs.push(env);
    const runner = new ShellStateRunner(env);
    return { runner, output: await sh(runner, command) };
  }

  async function sh(runner: ShellStateRunner, command: string): Promise<string> {
    const chunks: Buffer[] = [];
    const r = await runner.run({ command, timeoutMs: 20_000, onOutput: (c) => chunks.push(c) });
    assert.equal(r.exitCode, 0, Buffer.concat(chunks).toString('utf8'));
    return Buffer.concat(chunks).toString('utf8');
  }

  before(async () => {
    root = await realpath(await mkdtemp(path.join(os.tmpdir(), 'berth-login-test-')));
    home = path.join(root, 'home');
    await mkdir(home);
    await mkdir(path.join(root, 'work'));
    await profile('one');
    backend = new LocalBackend({
      stateRoot: path.join(root, 'state'),
      initialCwd: path.join(root, 'work'),
      homeDir: home,
      baseEnv: { PATH: process.env.PATH, HOME: home, LANG: 'C.UTF-8' },
    });
  });

  after(async () => {
    for (const env of envs) await env.dispose();
    await backend.close();
    await rm(root, { recursive: true, force: true });
  });

  it('ten new tasks at once: the profile runs once, and every task has what it set', async () => {
    const tasks = await Promise.all(Array.from({ length: 10 }, () => newTask('echo "$PROFILE_VAR"; profile_fn; pwd')));
    for (const t of tasks) assert.equal(t.output, `one\nfn-one\n${path.join(root, 'work')}\n`);
    assert.equal(await runs(), 1);
    assert.equal(backend.loginShellsRun, 1);
  });

  it("what one task exports stays in that task: the next new task starts from the login shell's state", async () => {
    const a = await newTask('export ONLY_A=a; cd /; greet() { echo a; }');
    assert.equal(a.output, '');
    const b = await newTask('echo "${ONLY_A-unset}"; type greet >/dev/null 2>&1 || echo no-greet; pwd');
    assert.equal(b.output, `unset\nno-greet\n${path.join(root, 'work')}\n`);
    assert.equal(await sh(a.runner, 'echo "$ONLY_A"; pwd'), 'a\n/\n');
    assert.equal(await runs(), 1);
  });

  it('a changed profile is taken by the next new task; running tasks keep theirs', async () => {
    const before = await newTask('echo "$PROFILE_VAR"');
    await profile('second');
    const afterChange = await newTask('echo "$PROFILE_VAR"; profile_fn');
    assert.equal(afterChange.output, 'second\nfn-second\n');
    assert.equal(await sh(before.runner, 'echo "$PROFILE_VAR"'), 'one\n');
    assert.equal(await runs(), 2);
  });

  it('a profile that fails leaves each new task to start its own shell, as before', async () => {
    await writeFile(path.join(home, '.profile'), 'echo ran >> "$HOME/profile-runs"\nexit 3\n');
    const before = await runs();
    const t = await newTask('echo works');
    assert.equal(t.output, 'works\n');
    // The shared attempt, then the task's own login attempt (which fails too, so its runner falls back to a plain shell).
    assert.equal(await runs(), before + 2);
  });
});
