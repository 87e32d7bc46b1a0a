/**
 * The `terminal` tool's optional `cwd` and `environment_recreated` keys as a
 * model reads them, over a real local backend's task environment (the shared
 * shell-state runner every backend uses). The reference tool
 * (tools/terminal_tool_result.py) echoes `cwd` when the directory a command
 * ended in differs, symlinks resolved, from where it started (the workdir,
 * else the session's cwd), and never lets a workdir become the session's cwd.
 */
import assert from 'node:assert/strict';
import { mkdir, realpath, symlink } from 'node:fs/promises';
import path from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { silentLogger } from '../../services/common/logging.js';
import type { ToolContext } from '../../services/dispatcher/registry/tool-types.js';
import { ENVIRONMENT_RECREATED_NOTE, terminalToolRegistration } from '../../services/dispatcher/tools/terminal/terminal-tool.js';
import type { TaskKey } from '../../services/executor/backend.js';
import { TaskEnvironments } from '../../services/executor/task-environment.js';
import { localToolTasks, taskClientOf, toolContextOf } from '../support/tool-tasks.js';

type Json = Record<string, unknown>;

let root: string;
let work: string;
let otherTasks = 0;

const tasks = localToolTasks('terminal-cwd', async (dir) => {
  root = dir;
  work = path.join(root, 'work');
  await mkdir(path.join(work, 'sub'), { recursive: true });
  // A symlinked name for the work dir and one for its subdirectory.
  await symlink(work, path.join(root, 'work-link'));
  await symlink(path.join(work, 'sub'), path.join(root, 'sub-link'));
  return { initialCwd: work };
});

/** A fresh task (on `environments` when given; the caller releases those); `terminal(args)` calls the tool as the dispatcher does. */
function task(environments?: TaskEnvironments) {
  let context: ToolContext;
  if (environments === undefined) {
    context = tasks.newTask().context;
  } else {
    const key: TaskKey = { tenant: 'tenant', taskId: `terminal-cwd-other-${++otherTasks}` };
    context = toolContextOf(key, taskClientOf(environments, key));
  }
  const terminal = terminalToolRegistration();
  return {
    async terminal(args: Json): Promise<Json> {
      return JSON.parse(await terminal.handler(args, context)) as Json;
    },
  };
}

describe('terminal cwd key over a local task', () => {
  it('echoes the new directory after a cd, in the key order of the reference tool', async () => {
    const t = task();
    const result = await t.terminal({ command: 'cd /tmp && echo moved' });
    assert.deepEqual(Object.keys(result), ['output', 'exit_code', 'error', 'cwd']);
    assert.deepEqual(result, { output: 'moved', exit_code: 0, error: null, cwd: await realpath('/tmp') });
    // The task stays there, and a command that does not move says nothing about the cwd.
    assert.deepEqual(await t.terminal({ command: 'pwd' }), { output: await realpath('/tmp'), exit_code: 0, error: null });
  });

  it('leaves cwd out when the command did not change directory', async () => {
    const t = task();
    assert.deepEqual(await t.terminal({ command: 'true' }), { output: '', exit_code: 0, error: null });
    // A cd that comes back where it started is no change.
    assert.deepEqual(await t.terminal({ command: 'cd / && cd - >/dev/null' }), { output: '', exit_code: 0, error: null });
  });

  it('puts cwd before exit_code_meaning for a failing command that moved', async () => {
    const result = await task().terminal({ command: 'cd / && grep -q nothing-here /dev/null' });
    assert.deepEqual(Object.keys(result), ['output', 'exit_code', 'error', 'cwd', 'exit_code_meaning']);
    assert.equal(result.cwd, '/');
  });

  it('compares directories with symlinks resolved and reports the resolved one', async () => {
    const t = task();
    // The task starts in `work`: a cd to a symlink naming it is no move.
    assert.equal((await t.terminal({ command: `cd ${path.join(root, 'work-link')}` })).cwd, undefined);
    // A cd through a symlink to elsewhere reports the real directory.
    assert.equal((await t.terminal({ command: `cd ${path.join(root, 'sub-link')}` })).cwd, path.join(work, 'sub'));
    // A workdir given by its symlinked name, where the command stays, is no move either.
    assert.deepEqual(await t.terminal({ command: 'true', workdir: path.join(root, 'work-link') }), {
      output: '',
      exit_code: 0,
      error: null,
    });
  });

  it('compares with the workdir, and a workdir never becomes the task cwd', async () => {
    const t = task();
    const tmp = await realpath('/tmp');
    assert.deepEqual(await t.terminal({ command: 'pwd', workdir: '/tmp' }), { output: tmp, exit_code: 0, error: null });
    assert.deepEqual(await t.terminal({ command: 'pwd' }), { output: work, exit_code: 0, error: null });
    assert.deepEqual(await t.terminal({ command: 'cd / && echo moved', workdir: '/tmp' }), {
      output: 'moved',
      exit_code: 0,
      error: null,
      cwd: '/',
    });
    // The cd inside the workdir command did not move the task either.
    assert.deepEqual(await t.terminal({ command: 'pwd' }), { output: work, exit_code: 0, error: null });
  });

  it('refuses a foreground PTY before anything runs, as upstream does, and the directory stays', async () => {
    const t = task();
    assert.deepEqual(await t.terminal({ command: 'cd / && echo moved', pty: true }), {
      error:
        "pty requires background=true (a PTY session is interacted with via process(action='write'/'submit'), which " +
        'needs a tracked background process). Retry as terminal(command=..., background=true, pty=true).',
    });
    assert.notEqual((await t.terminal({ command: 'pwd' })).output, '/');
  });

  it('reports the directory a command that calls exit left the shell in', async () => {
    const result = await task().terminal({ command: 'cd / && exit 3' });
    assert.deepEqual(result, { output: '', exit_code: 3, error: null, cwd: '/' });
  });

  it('leaves cwd out after a timeout', async () => {
    const result = await task().terminal({ command: 'cd / && sleep 30', timeout: 1 });
    assert.equal(result.exit_code, 124);
    assert.equal(result.output, '[Command timed out after 1s]');
    assert.equal(result.cwd, undefined);
  });
});

describe('terminal environment_recreated key over a local task', () => {
  it('is absent for a task whose environment was never replaced', async () => {
    const t = task();
    assert.equal((await t.terminal({ command: 'true' })).environment_recreated, undefined);
    assert.equal((await t.terminal({ command: 'true' })).environment_recreated, undefined);
  });

  it("carries the reference tool's warning after an idle release, once, next to Berth's own note", async () => {
    const reaping = new TaskEnvironments({ backend: tasks.backend, logger: silentLogger(), lifetimeSeconds: 1 });
    try {
      const t = task(reaping);
      assert.deepEqual(await t.terminal({ command: 'cd / && echo first' }), {
        output: 'first',
        exit_code: 0,
        error: null,
        cwd: '/',
      });
      await sleep(1500); // past the 1 s idle lifetime: the environment is released
      const result = await t.terminal({ command: 'pwd' });
      assert.deepEqual(Object.keys(result), ['output', 'exit_code', 'error', 'environment_recreated']);
      assert.equal(result.environment_recreated, ENVIRONMENT_RECREATED_NOTE);
      assert.match(String(result.output), new RegExp(`^${work}\\n\\[Note: The task's environment had been idle`));
      const again = await t.terminal({ command: 'true' });
      assert.equal(again.environment_recreated, undefined);
    } finally {
      await reaping.closeAll();
    }
  });
});
