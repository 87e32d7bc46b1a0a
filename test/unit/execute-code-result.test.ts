import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  failureHint,
  shapeExecuteCodeResult,
  type ExecuteCodeOutcome,
} from '../../services/dispatcher/tools/code-execution/execute-code-result.js';
import {
  ScriptToolPolicy,
  stripTerminalArgs,
  toolCallLimitError,
  toolNotAvailableError,
} from '../../services/dispatcher/tools/code-execution/execute-code-tool.js';

const base: ExecuteCodeOutcome = {
  stdout: 'out\n',
  stderr: '',
  exitCode: 0,
  timedOut: false,
  interrupted: false,
  toolCallsMade: 3,
  durationMs: 1234.567,
  timeoutSec: 300,
};

describe('shapeExecuteCodeResult', () => {
  it('success: status, output, tool_calls_made, duration_seconds with 2 decimals, no error', () => {
    assert.deepEqual(shapeExecuteCodeResult(base), {
      status: 'success',
      output: 'out\n',
      tool_calls_made: 3,
      duration_seconds: 1.23,
    });
  });

  it('timeout: the ⏰ message after stdout, or alone when stdout is empty', () => {
    const r = shapeExecuteCodeResult({ ...base, timedOut: true, exitCode: 124, timeoutSec: 7 });
    assert.equal(r.status, 'timeout');
    assert.equal(r.error, 'Script timed out after 7s and was killed.');
    assert.equal(r.output, 'out\n\n\n⏰ Script timed out after 7s and was killed.');
    const empty = shapeExecuteCodeResult({ ...base, stdout: '', timedOut: true, exitCode: 124 });
    assert.equal(empty.output, '⏰ Script timed out after 300s and was killed.');
  });

  it('interrupt: the exact suffix', () => {
    const r = shapeExecuteCodeResult({ ...base, interrupted: true, exitCode: 130 });
    assert.equal(r.status, 'interrupted');
    assert.equal(r.output, 'out\n\n[execution interrupted — user sent a new message]');
    assert.ok(r.error);
  });

  it('non-zero exit: stderr as the error and after the separator, else the exit code', () => {
    const r = shapeExecuteCodeResult({ ...base, exitCode: 1, stderr: 'Traceback ...\nValueError: x\n' });
    assert.equal(r.status, 'error');
    assert.equal(r.error, 'Traceback ...\nValueError: x\n');
    assert.equal(r.output, 'out\n\n--- stderr ---\nTraceback ...\nValueError: x\n');
    const silent = shapeExecuteCodeResult({ ...base, exitCode: 3 });
    assert.equal(silent.error, 'Script exited with code 3');
    assert.equal(silent.output, 'out\n');
  });

  it('carries notices (where the script ran) in `notice`', () => {
    const r = shapeExecuteCodeResult({ ...base, notices: ['Ran on the host.'] });
    assert.equal(r.notice, 'Ran on the host.');
  });
});

describe('failure hints', () => {
  const tools = ['terminal', 'read_file', 'patch'];
  const cases: [stderr: string, hint: string | undefined][] = [
    [
      'Traceback (most recent call last):\n  File "script.py", line 1\n' +
        "ImportError: cannot import name 'browser_navigate' from 'hermes_tools' (/tmp/x/hermes_tools.py)",
      "'browser_navigate' is not available inside the execute_code sandbox. Importable tools here: patch, " +
        'read_file, terminal. For anything else, use the normal tool call instead of execute_code.',
    ],
    [
      "ImportError: cannot import name 'json_parse' from 'hermes_tools'",
      'json_parse is a BUILT-IN helper in the sandbox — no import needed. Remove it from the import line and call ' +
        'json_parse(...) directly.',
    ],
    [
      "NameError: name 'retry' is not defined",
      // Berth's wording: here the helpers are imported from hermes_tools, not put in scope.
      'Import retry before calling it: from hermes_tools import retry',
    ],
    [
      "ModuleNotFoundError: No module named 'matplotlib.pyplot'",
      "'matplotlib.pyplot' is not installed in the sandbox interpreter. Use Python stdlib inside execute_code, or " +
        "run the code via terminal() with the project venv's python instead.",
    ],
    [
      'TypeError: string indices must be integers, not \'str\'',
      'Tool functions in the sandbox return DICTS (already parsed) — do not json.loads() them or index them like ' +
        "strings. Example: read_file(path)['content'].",
    ],
    [
      "AttributeError: 'str' object has no attribute 'get'",
      'Tool functions in the sandbox return DICTS (already parsed) — do not json.loads() them or index them like ' +
        "strings. Example: read_file(path)['content'].",
    ],
    ['ZeroDivisionError: division by zero', undefined],
    ['', undefined],
    // Only the first 4,000 characters are scanned.
    [`${'x'.repeat(4000)}NameError: name 'retry' is not defined`, undefined],
  ];
  for (const [stderr, hint] of cases) {
    it(`${JSON.stringify(stderr.slice(-50))} → ${hint === undefined ? 'no hint' : 'a hint'}`, () => {
      assert.equal(failureHint(stderr, tools), hint);
    });
  }

  it('a failed script carries the hint in `hint`; a successful one has none', () => {
    const failed = shapeExecuteCodeResult({
      ...base,
      exitCode: 1,
      stderr: "ModuleNotFoundError: No module named 'pandas'\n",
      importableTools: tools,
    });
    assert.deepEqual(Object.keys(failed), ['status', 'output', 'tool_calls_made', 'duration_seconds', 'error', 'hint']);
    assert.match(failed.hint ?? '', /^'pandas' is not installed in the sandbox interpreter\./);
    assert.equal(shapeExecuteCodeResult(base).hint, undefined);
    assert.equal(shapeExecuteCodeResult({ ...base, exitCode: 1, stderr: 'ValueError: x' }).hint, undefined);
  });
});

describe('ScriptToolPolicy', () => {
  it('refuses tools outside the whitelist with the sorted list, without counting them', () => {
    const policy = new ScriptToolPolicy(['terminal', 'read_file', 'patch'], 2);
    assert.equal(
      policy.admit('execute_code'),
      JSON.stringify({ error: "Tool 'execute_code' is not available in execute_code. Available: patch, read_file, terminal" }),
    );
    assert.equal(policy.callsMade, 0);
  });

  it('admits up to the limit, then refuses with the exact message', () => {
    const policy = new ScriptToolPolicy(['terminal'], 2);
    assert.equal(policy.admit('terminal'), undefined);
    assert.equal(policy.admit('terminal'), undefined);
    assert.equal(
      policy.admit('terminal'),
      JSON.stringify({ error: 'Tool call limit reached (2). No more tool calls allowed in this execution.' }),
    );
    assert.equal(policy.callsMade, 2);
    assert.equal(toolCallLimitError(50), '{"error":"Tool call limit reached (50). No more tool calls allowed in this execution."}');
    assert.equal(toolNotAvailableError('x', []), '{"error":"Tool \'x\' is not available in execute_code. Available: "}');
  });
});

describe('ScriptToolPolicy with old tool names', () => {
  it('takes an old name on either side as the current one: a whitelist naming process admits process_manage', () => {
    const policy = new ScriptToolPolicy(['terminal', 'process'], 5);
    assert.equal(policy.admit('process_manage'), undefined);
    assert.equal(policy.admit('process'), undefined);
    assert.equal(policy.callsMade, 2);
    // The refusal names the tool as the script sent it and lists the current names.
    assert.equal(
      policy.admit('todo'),
      JSON.stringify({ error: "Tool 'todo' is not available in execute_code. Available: process_manage, terminal" }),
    );
  });

  it('still refuses an old name whose current tool is not whitelisted', () => {
    const policy = new ScriptToolPolicy(['terminal'], 5);
    assert.equal(
      policy.admit('process'),
      JSON.stringify({ error: "Tool 'process' is not available in execute_code. Available: terminal" }),
    );
    assert.equal(policy.callsMade, 0);
  });
});

describe('stripTerminalArgs', () => {
  it('removes background, pty, notify_on_complete and watch_patterns only', () => {
    assert.deepEqual(
      stripTerminalArgs({
        command: 'ls',
        timeout: 5,
        workdir: '/tmp',
        background: true,
        pty: true,
        notify_on_complete: true,
        watch_patterns: ['x'],
      }),
      { command: 'ls', timeout: 5, workdir: '/tmp' },
    );
  });
});
