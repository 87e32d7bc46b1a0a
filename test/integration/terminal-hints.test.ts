/**
 * The `terminal` tool's `hint` key as a model reads it, over a real local
 * backend's task environment: the silent-background nudge and the recovery
 * hints for failed (or falsely successful) foreground commands, with the
 * reference tool's texts (tools/terminal_tool_background.py,
 * tools/terminal_hints.py).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { terminalToolRegistration } from '../../services/dispatcher/tools/terminal/terminal-tool.js';
import { localToolTasks } from '../support/tool-tasks.js';

type Json = Record<string, unknown>;

const tasks = localToolTasks('terminal-hints');

/** A fresh task; `terminal(args)` calls the tool as the dispatcher does. */
function task() {
  const { context } = tasks.newTask();
  const terminal = terminalToolRegistration();
  return {
    async terminal(args: Json): Promise<Json> {
      return JSON.parse(await terminal.handler(args, context)) as Json;
    },
  };
}

const SILENT_BACKGROUND =
  'background=true without notify_on_complete=true means this process runs SILENTLY — you will not be told when it ' +
  'exits. If this is a bounded task (test suite, build, CI poller, deploy, anything with a defined end), you almost ' +
  'certainly wanted notify_on_complete=true so the system pings you on exit. Re-launch with notify_on_complete=true, ' +
  "or call process(action='poll') / process(action='wait') yourself to learn the outcome. Only ignore this hint for " +
  'genuine long-lived processes that never exit (servers, watchers, daemons).';

describe('terminal hints over a local task', () => {
  it('nudges a background start that asked for no notification, and not one that did', async () => {
    const t = task();
    const silent = await t.terminal({ command: 'echo quiet', background: true });
    assert.deepEqual(Object.keys(silent), ['output', 'session_id', 'pid', 'exit_code', 'error', 'hint']);
    assert.equal(silent.output, 'Background process started');
    assert.equal(silent.hint, SILENT_BACKGROUND);

    const notified = await t.terminal({ command: 'echo loud', background: true, notify_on_complete: true });
    assert.deepEqual(Object.keys(notified), ['output', 'session_id', 'pid', 'exit_code', 'error', 'notify_on_complete']);
    const watched = await t.terminal({ command: 'echo watched', background: true, watch_patterns: ['watched'] });
    assert.equal(watched.hint, undefined);
  });

  it('hints at a missing command', async () => {
    const result = await task().terminal({ command: 'berth_no_such_command_xyz --flag' });
    assert.equal(result.exit_code, 127);
    assert.equal(
      result.hint,
      '`berth_no_such_command_xyz` is not installed or not on PATH. Verify with `which berth_no_such_command_xyz`; ' +
        'install it or use an absolute path instead of retrying the same command.',
    );
  });

  it('reads the output before the exit code: a script without the execute bit is a permission problem', async () => {
    const t = task();
    const result = await t.terminal({ command: `printf 'echo hi\\n' > ${tasks.root}/plain.sh && ${tasks.root}/plain.sh` });
    assert.equal(result.exit_code, 126);
    assert.equal(
      result.hint,
      'Permission denied. Check ownership/mode of the target path (`ls -la`); prefer a user-writable location. Only ' +
        'escalate to sudo if the task genuinely requires it.',
    );
  });

  it('tells a timed-out command how to get more time', async () => {
    assert.deepEqual(await task().terminal({ command: 'sleep 30', timeout: 1 }), {
      output: '[Command timed out after 1s]',
      exit_code: 124,
      error: null,
      hint:
        'Exit 124: the command hit its timeout. Raise timeout= (foreground max 600s) or run it with background=true ' +
        'and notify_on_complete=true.',
    });
  });

  it('warns when a pipe hides a failure behind exit code 0', async () => {
    assert.deepEqual(await task().terminal({ command: "(echo 'npm ERR! missing script: build'; exit 1) | tail -5" }), {
      output: 'npm ERR! missing script: build',
      exit_code: 0,
      error: null,
      hint:
        'exit_code 0 here is the status of the last pipeline command (tail/head/cat/...), NOT of the command before ' +
        'the pipe — and the output contains failure indicators. Treat this run as FAILED until proven otherwise: ' +
        're-run the command WITHOUT the pipe (output is auto-truncated and the full text is saved to a file, so ' +
        'piping through tail/head is never needed) to get the real exit code.',
    });
  });

  it('gives no hint where the exit code has a meaning', async () => {
    assert.deepEqual(await task().terminal({ command: `grep -q needle ${tasks.root}/missing-file 2>/dev/null; test -e /nope` }), {
      output: '',
      exit_code: 1,
      error: null,
      exit_code_meaning: 'Condition evaluated to false (expected, not an error)',
    });
  });
});
