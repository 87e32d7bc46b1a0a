import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import type { ToolArgs } from '../../services/dispatcher/registry/tool-types.js';
import { processToolRegistration } from '../../services/dispatcher/tools/process-tool.js';
import {
  ENVIRONMENT_RECREATED_NOTE,
  SILENT_BACKGROUND_HINT,
  terminalToolRegistration,
} from '../../services/dispatcher/tools/terminal/terminal-tool.js';
import { RecordingTaskClientDouble, call, contextFor } from '../support/recording-task-client.js';

const terminal = terminalToolRegistration({ defaultTimeoutSec: 180, maxForegroundTimeoutSec: 600, maxOutputChars: 50_000 });

void describe('terminal registration', () => {
  void it('is the terminal tool of the terminal toolset with the protocol parameters', () => {
    assert.equal(terminal.name, 'terminal');
    assert.equal(terminal.toolset, 'terminal');
    assert.equal(terminal.schema.name, 'terminal');
    const parameters = terminal.schema.parameters as { properties: Record<string, Record<string, unknown>>; required: string[] };
    // Upstream's order; notify_on_complete and watch_patterns are accepted but no longer advertised.
    assert.deepEqual(Object.keys(parameters.properties), [
      'command',
      'background',
      'timeout',
      'workdir',
      'pty',
      'notify',
      'heartbeat',
      'persist_on_release',
    ]);
    assert.deepEqual(parameters.properties.notify?.anyOf, [{ type: 'boolean' }, { type: 'array', items: { type: 'string' } }]);
    assert.deepEqual(
      [parameters.properties.heartbeat?.type, parameters.properties.heartbeat?.minimum, parameters.properties.heartbeat?.default],
      ['integer', 0, 0],
    );
    assert.deepEqual([parameters.properties.persist_on_release?.type, parameters.properties.persist_on_release?.default], ['boolean', false]);
    assert.deepEqual([parameters.properties.pty?.type, parameters.properties.pty?.default], ['boolean', false]);
    assert.deepEqual(parameters.required, ['command']);
    assert.equal(parameters.properties.timeout?.type, 'integer');
    assert.equal(parameters.properties.timeout?.minimum, 1);
    assert.equal(parameters.properties.timeout?.default, 180);
    assert.equal(parameters.properties.background?.default, false);
    for (const [name, property] of Object.entries(parameters.properties)) {
      assert.ok(typeof property.description === 'string' && property.description.length > 20, `${name} has a description`);
    }
  });

  void it('rejects a default timeout above the foreground cap', () => {
    assert.throws(() => terminalToolRegistration({ defaultTimeoutSec: 900, maxForegroundTimeoutSec: 600 }), RangeError);
  });
});

void describe('terminal foreground', () => {
  void it('returns output, exit code and a null error, passing limits, signal and onOutput to exec', async () => {
    const task = new RecordingTaskClientDouble({ output: 'hello\n', exitCode: 0 });
    const controller = new AbortController();
    const onOutput = (_text: string) => undefined;
    const result = await call(terminal, { command: 'echo hello', timeout: 30, workdir: '/srv/app', pty: false }, task, {
      signal: controller.signal,
      onOutput,
    });
    assert.deepEqual(result, { output: 'hello', exit_code: 0, error: null }, 'trailing newlines are trimmed');
    assert.equal(task.execRequests.length, 1);
    const request = task.execRequests[0];
    assert.equal(request?.command, 'echo hello');
    assert.equal(request?.timeoutMs, 30_000);
    assert.equal(request?.workdir, '/srv/app');
    assert.equal(request?.pty, undefined);
    assert.equal(request?.maxOutputChars, 50_000);
    assert.equal(request?.signal, controller.signal);
    assert.equal(request?.onOutput, onOutput);
  });

  void it('uses the default timeout when none is given', async () => {
    const task = new RecordingTaskClientDouble();
    await call(terminal, { command: 'true' }, task);
    assert.equal(task.execRequests[0]?.timeoutMs, 180_000);
    assert.equal(task.execRequests[0]?.workdir, undefined);
  });

  void it('keeps a non-zero exit code as a result', async () => {
    const task = new RecordingTaskClientDouble({ output: 'ls: cannot access x\n', exitCode: 2 });
    assert.deepEqual(await call(terminal, { command: 'ls x' }, task), {
      output: 'ls: cannot access x',
      exit_code: 2,
      error: null,
    });
  });

  void it('adds exit_code_meaning when the exit code has a known meaning', async () => {
    const task = new RecordingTaskClientDouble({ output: '', exitCode: 1 });
    assert.deepEqual(await call(terminal, { command: 'grep needle haystack.txt' }, task), {
      output: '',
      exit_code: 1,
      error: null,
      exit_code_meaning: 'No matches found (not an error)',
    });
  });

  void it('appends the timeout notice and reports 124', async () => {
    const task = new RecordingTaskClientDouble({ output: 'partial output', exitCode: 137, timedOut: true });
    assert.deepEqual(await call(terminal, { command: 'sleep 100', timeout: 5 }, task), {
      output: 'partial output\n[Command timed out after 5s]',
      exit_code: 124,
      error: null,
      hint:
        'Exit 124: the command hit its timeout. Raise timeout= (foreground max 600s) or run it with background=true ' +
        'and notify_on_complete=true.',
    });
  });

  void it('puts the timeout notice after the output as printed, trailing newline included', async () => {
    const task = new RecordingTaskClientDouble({ output: 'partial\n', exitCode: 137, timedOut: true });
    const result = (await call(terminal, { command: 'sleep 100', timeout: 5 }, task)) as Record<string, unknown>;
    assert.equal(result.output, 'partial\n\n[Command timed out after 5s]');
  });

  void it('gives the timeout notice without a leading newline when nothing was printed', async () => {
    const task = new RecordingTaskClientDouble({ output: '', exitCode: 137, timedOut: true });
    assert.deepEqual(await call(terminal, { command: 'sleep 100', timeout: 5 }, task), {
      output: '[Command timed out after 5s]',
      exit_code: 124,
      error: null,
      hint:
        'Exit 124: the command hit its timeout. Raise timeout= (foreground max 600s) or run it with background=true ' +
        'and notify_on_complete=true.',
    });
  });

  void it('appends the interrupt notice and reports 130', async () => {
    const task = new RecordingTaskClientDouble({ output: 'step 1\n', exitCode: 143, interrupted: true });
    assert.deepEqual(await call(terminal, { command: 'make' }, task), {
      output: 'step 1\n\n[Command interrupted]',
      exit_code: 130,
      error: null,
    });
  });

  void it('gives the interrupt notice without a leading newline when nothing was printed', async () => {
    const task = new RecordingTaskClientDouble({ output: '', exitCode: 143, interrupted: true });
    const result = (await call(terminal, { command: 'make' }, task)) as Record<string, unknown>;
    assert.equal(result.output, '[Command interrupted]');
  });

  void it('strips whitespace around the output, as the reference tool does', async () => {
    const task = new RecordingTaskClientDouble({ output: '\n  indented\n\n' });
    const result = (await call(terminal, { command: 'cat x' }, task)) as Record<string, unknown>;
    assert.equal(result.output, 'indented');
  });

  void it('says so in the approval note when an approved command was interrupted', async () => {
    const task = new RecordingTaskClientDouble({ output: 'step 1', exitCode: 143, interrupted: true });
    const approval = () =>
      Promise.resolve({
        allowed: true as const,
        note: 'Command required approval (recursive delete) and was approved by the user.',
      });
    assert.deepEqual(await call(terminal, { command: 'rm -rf build' }, task, { approval }), {
      output: 'step 1\n[Command interrupted]',
      exit_code: 130,
      error: null,
      approval: 'Command required approval (recursive delete) and was approved by the user, then interrupted.',
    });
  });

  void it('explains a death by signal', async () => {
    const task = new RecordingTaskClientDouble({ output: 'Killed', exitCode: 137 });
    const result = (await call(terminal, { command: 'python train.py' }, task)) as Record<string, unknown>;
    assert.equal(
      result.exit_code_meaning,
      'Exit code 137 usually means the command was terminated by signal 9: SIGKILL — often the kernel OOM killer ' +
        'on memory exhaustion, or an explicit kill -9',
    );
  });

  void it('appends executor notices to the output', async () => {
    const task = new RecordingTaskClientDouble({ output: 'ok', notices: ['environment was recreated'] });
    assert.deepEqual(await call(terminal, { command: 'ls' }, task), {
      output: 'ok\n[Note: environment was recreated]',
      exit_code: 0,
      error: null,
    });
  });
});

void describe('terminal cwd and environment_recreated keys', () => {
  void it('gives the reference tool its exact environment_recreated text', () => {
    assert.equal(
      ENVIRONMENT_RECREATED_NOTE,
      'The execution environment was recreated while running this command (the previous container/sandbox was gone). ' +
        'Persistent files were restored where the backend supports it, but background processes and any files outside ' +
        'persisted paths from earlier commands may be lost — verify state before relying on prior work.',
    );
  });

  void it('echoes the end directory when it differs from the start, after error and before the other keys', async () => {
    const task = new RecordingTaskClientDouble({
      output: 'grep: x: No such file or directory',
      exitCode: 2,
      startCwd: '/work',
      endCwd: '/work/sub',
      environmentRecreated: true,
      notices: ["The task's container was removed; a new container was started."],
    });
    const approval = () => Promise.resolve({ allowed: true as const, note: 'approved by the user' });
    const raw = await terminal.handler({ command: 'cd sub && grep -r x x' }, contextFor(task, { approval }));
    const result = JSON.parse(raw) as Record<string, unknown>;
    assert.deepEqual(Object.keys(result), ['output', 'exit_code', 'error', 'cwd', 'environment_recreated', 'approval']);
    assert.equal(result.cwd, '/work/sub');
    assert.equal(result.environment_recreated, ENVIRONMENT_RECREATED_NOTE);
    // Berth's own note, which says what happened, stays in the output.
    assert.equal(
      result.output,
      "grep: x: No such file or directory\n[Note: The task's container was removed; a new container was started.]",
    );
  });

  void it('puts cwd ahead of exit_code_meaning and hint', async () => {
    const meaning = new RecordingTaskClientDouble({ exitCode: 1, startCwd: '/a', endCwd: '/' });
    const withMeaning = (await call(terminal, { command: 'cd / && grep x y' }, meaning)) as Record<string, unknown>;
    assert.deepEqual(Object.keys(withMeaning), ['output', 'exit_code', 'error', 'cwd', 'exit_code_meaning']);
    const hinted = new RecordingTaskClientDouble({ output: 'bash: nosuch: command not found', exitCode: 127, startCwd: '/a', endCwd: '/' });
    const withHint = (await call(terminal, { command: 'cd / && nosuch' }, hinted)) as Record<string, unknown>;
    assert.deepEqual(Object.keys(withHint), ['output', 'exit_code', 'error', 'cwd', 'hint']);
  });

  void it('leaves cwd out when the directory did not change or was not reported', async () => {
    for (const fields of [{ startCwd: '/w', endCwd: '/w' }, {}, { startCwd: '/w' }, { endCwd: '/w' }]) {
      const task = new RecordingTaskClientDouble({ output: 'ok', ...fields });
      assert.deepEqual(await call(terminal, { command: 'ls' }, task), { output: 'ok', exit_code: 0, error: null });
    }
  });

  void it('leaves cwd out after a timeout or an interrupt', async () => {
    for (const fields of [{ timedOut: true, exitCode: 124 }, { interrupted: true, exitCode: 130 }]) {
      const task = new RecordingTaskClientDouble({ startCwd: '/w', endCwd: '/', ...fields });
      const result = (await call(terminal, { command: 'cd / && sleep 9' }, task)) as Record<string, unknown>;
      assert.equal(result.cwd, undefined);
      assert.ok(!('cwd' in result), Object.keys(result).join());
    }
  });

  void it('does not echo a directory that is not one plausible absolute path', async () => {
    for (const endCwd of ['relative/dir', '/a\nb', '/x\0y', `/${'d'.repeat(5000)}`]) {
      const task = new RecordingTaskClientDouble({ startCwd: '/w', endCwd });
      const result = (await call(terminal, { command: 'cd elsewhere' }, task)) as Record<string, unknown>;
      assert.equal(result.cwd, undefined, JSON.stringify(endCwd));
    }
  });

  void it('leaves environment_recreated out unless the environment was replaced', async () => {
    const task = new RecordingTaskClientDouble({ environmentRecreated: false, notices: ['a limit was hit'] });
    assert.deepEqual(await call(terminal, { command: 'ls' }, task), {
      output: '[Note: a limit was hit]',
      exit_code: 0,
      error: null,
    });
  });
});

void describe('terminal refusals', () => {
  const typeNames: [value: unknown, name: string][] = [
    [42, 'int'],
    [4.5, 'float'],
    [true, 'bool'],
    [['ls'], 'list'],
    [{ cmd: 'ls' }, 'dict'],
    [null, 'NoneType'],
    [undefined, 'NoneType'],
  ];
  for (const [value, name] of typeNames) {
    void it(`refuses a ${name} command`, async () => {
      const task = new RecordingTaskClientDouble();
      const args: ToolArgs = value === undefined ? {} : { command: value };
      assert.deepEqual(await call(terminal, args, task), {
        output: '',
        exit_code: -1,
        error: `Invalid command: expected string, got ${name}`,
        status: 'error',
      });
      assert.ok(task.untouched);
    });
  }

  void it('points a call that sent code instead of command at execute_code', async () => {
    const task = new RecordingTaskClientDouble();
    assert.deepEqual(await call(terminal, { code: 'print(1)' }, task), {
      error:
        "terminal received a 'code' parameter, but it requires a shell command in 'command'. Use " +
        'execute_code(code=...) for Python; for shell, retry as terminal(command=...).',
    });
    assert.ok(task.untouched);
    // With command present, a stray code argument is ignored.
    await call(terminal, { command: 'true', code: 'x' }, task);
    assert.equal(task.execRequests.length, 1);
  });

  void it('refuses an empty command', async () => {
    const task = new RecordingTaskClientDouble();
    assert.deepEqual(await call(terminal, { command: '   ' }, task), {
      output: '',
      exit_code: -1,
      error: 'Invalid command: command is empty',
      status: 'error',
    });
    assert.ok(task.untouched);
  });

  void it('runs a foreground call over the timeout cap in the background with notify, and says so', async () => {
    const task = new RecordingTaskClientDouble();
    const result = (await call(terminal, { command: 'make', timeout: 601 }, task)) as Record<string, unknown>;
    assert.deepEqual(Object.keys(result).slice(5), ['notify_on_complete', 'promoted_from_foreground']);
    assert.deepEqual([result.session_id, result.notify_on_complete], ['proc_0123456789ab', true]);
    assert.deepEqual(
      result.promoted_from_foreground,
        'Requested foreground timeout 601s exceeds the 600s cap, so this command was started as a tracked background ' +
        'process with notify_on_complete=true instead of being refused. Do NOT re-run it. Its completion (exit code + ' +
        'output tail) arrives as a notification; poll with process(action="poll", session_id=...) if you need it sooner.',
    );
    assert.deepEqual(task.backgroundRequests, [{ command: 'make', notifyOnComplete: true }]);
    assert.equal(task.execRequests.length, 0);
  });

  void it('still refuses a promoted call the foreground guidance refuses', async () => {
    const task = new RecordingTaskClientDouble();
    const result = (await call(terminal, { command: 'npm run dev', timeout: 3600 }, task)) as Record<string, unknown>;
    assert.equal(result.status, 'error');
    assert.match(String(result.error), /long-lived server/);
    assert.ok(task.untouched);
  });

  void it('refuses a timeout of zero or less with upstream\'s text, and one that is not a number', async () => {
    const task = new RecordingTaskClientDouble();
    assert.deepEqual(await call(terminal, { command: 'make', timeout: 0 }, task), {
      error: 'timeout must be a positive number of seconds (got 0).',
    });
    assert.deepEqual(await call(terminal, { command: 'make', timeout: -3, background: true }, task), {
      error: 'timeout must be a positive number of seconds (got -3).',
    });
    const result = (await call(terminal, { command: 'make', timeout: 'later' }, task)) as Record<string, unknown>;
    assert.equal(result.status, 'error');
    assert.equal(result.exit_code, -1);
    assert.match(String(result.error), /^Invalid timeout/);
    assert.ok(task.untouched);
  });

  void it('refuses a foreground hazard with guidance to use background=true', async () => {
    const task = new RecordingTaskClientDouble();
    const result = (await call(terminal, { command: 'npm run dev' }, task)) as Record<string, unknown>;
    assert.equal(result.output, '');
    assert.equal(result.exit_code, -1);
    assert.equal(result.status, 'error');
    assert.match(String(result.error), /^This foreground command appears to start a long-lived server\/watch process\./);
    assert.ok(task.untouched);
  });

  void it('blocks a workdir with shell metacharacters', async () => {
    const task = new RecordingTaskClientDouble();
    assert.deepEqual(await call(terminal, { command: 'ls', workdir: '/tmp; rm -rf /' }, task), {
      output: '',
      exit_code: -1,
      error: "Blocked: workdir contains disallowed character ';'. Use a simple filesystem path without shell metacharacters.",
      status: 'blocked',
    });
    assert.ok(task.untouched);
  });

  void it('blocks a bad workdir for background commands too', async () => {
    const task = new RecordingTaskClientDouble();
    const result = (await call(terminal, { command: 'serve', background: true, workdir: '/srv/$HOME' }, task)) as Record<
      string,
      unknown
    >;
    assert.equal(result.status, 'blocked');
    assert.ok(task.untouched);
  });

  void it('refuses a relative workdir', async () => {
    const task = new RecordingTaskClientDouble();
    const result = (await call(terminal, { command: 'ls', workdir: 'src' }, task)) as Record<string, unknown>;
    assert.equal(result.status, 'error');
    assert.equal(result.error, 'Invalid workdir: expected an absolute path, got src');
    assert.ok(task.untouched);
  });
});

void describe('terminal failure hints', () => {
  void it('adds a hint after the exit code fields for a failure with a known output shape', async () => {
    const task = new RecordingTaskClientDouble({ output: 'bash: line 1: python: command not found\n', exitCode: 127 });
    assert.deepEqual(await call(terminal, { command: 'python script.py' }, task), {
      output: 'bash: line 1: python: command not found',
      exit_code: 127,
      error: null,
      hint: "This system has no bare `python` — use `python3`, or the project venv's interpreter (e.g. .venv/bin/python).",
    });
  });

  void it('gives no hint when the exit code has a meaning, or for an unknown failure', async () => {
    const grep = new RecordingTaskClientDouble({ output: 'grep: x: Permission denied', exitCode: 1 });
    const grepResult = (await call(terminal, { command: 'grep -r needle x' }, grep)) as Record<string, unknown>;
    assert.equal(grepResult.exit_code_meaning, 'No matches found (not an error)');
    assert.equal(grepResult.hint, undefined);
    const other = new RecordingTaskClientDouble({ output: 'something odd', exitCode: 3 });
    assert.deepEqual(await call(terminal, { command: './run' }, other), { output: 'something odd', exit_code: 3, error: null });
  });

  void it('does not scan the environment notices appended after the output', async () => {
    const task = new RecordingTaskClientDouble({ output: 'failed', exitCode: 2, notices: ['Permission denied'] });
    const result = (await call(terminal, { command: './run' }, task)) as Record<string, unknown>;
    assert.equal(result.output, 'failed\n[Note: Permission denied]');
    assert.equal(result.hint, undefined);
  });

  void it('warns when exit code 0 comes from a pipe consumer and the output shows a failure', async () => {
    const task = new RecordingTaskClientDouble({ output: 'error: could not compile `app`\n', exitCode: 0 });
    assert.deepEqual(await call(terminal, { command: 'cargo build 2>&1 | tail -20' }, task), {
      output: 'error: could not compile `app`',
      exit_code: 0,
      error: null,
      hint:
        'exit_code 0 here is the status of the last pipeline command (tail/head/cat/...), NOT of the command before ' +
        'the pipe — and the output contains failure indicators. Treat this run as FAILED until proven otherwise: ' +
        're-run the command WITHOUT the pipe (output is auto-truncated and the full text is saved to a file, so ' +
        'piping through tail/head is never needed) to get the real exit code.',
    });
    const reader = (await call(terminal, { command: 'grep -r "could not compile" logs | tail' }, task)) as Record<
      string,
      unknown
    >;
    assert.equal(reader.hint, undefined, 'a command that only reads is expected to show error text');
  });
});

void describe('terminal background', () => {
  void it('starts the process and reports its session id and pid', async () => {
    const task = new RecordingTaskClientDouble();
    const result = await call(terminal, { command: 'npm run dev', background: true, workdir: '/srv/web' }, task);
    assert.deepEqual(result, {
      output: 'Background process started',
      session_id: 'proc_0123456789ab',
      pid: 4242,
      exit_code: 0,
      error: null,
      hint: SILENT_BACKGROUND_HINT,
    });
    assert.deepEqual(task.backgroundRequests, [{ command: 'npm run dev', workdir: '/srv/web', notifyOnComplete: false }]);
    assert.equal(task.execRequests.length, 0);
  });

  void it('reports notify_on_complete and watch_patterns back when set', async () => {
    const task = new RecordingTaskClientDouble();
    assert.deepEqual(await call(terminal, { command: 'make', background: true, notify_on_complete: true }, task), {
      output: 'Background process started',
      session_id: 'proc_0123456789ab',
      pid: 4242,
      exit_code: 0,
      error: null,
      notify_on_complete: true,
    });
    const watched = await call(terminal, { command: 'npm run dev', background: true, watch_patterns: ['ready on'] }, task);
    assert.deepEqual((watched as Record<string, unknown>).watch_patterns, ['ready on']);
    assert.deepEqual(task.backgroundRequests[1]?.watchPatterns, ['ready on']);
  });

  void it('drops watch_patterns when notify_on_complete is also set, and says why', async () => {
    const task = new RecordingTaskClientDouble();
    const result = await call(
      terminal,
      {
        command: 'npm run dev',
        background: true,
        workdir: '/srv/web',
        notify_on_complete: true,
        watch_patterns: ['ready on', 'ERROR'],
      },
      task,
    );
    assert.deepEqual(result, {
      output: 'Background process started',
      session_id: 'proc_0123456789ab',
      pid: 4242,
      exit_code: 0,
      error: null,
      watch_patterns_ignored:
        'watch_patterns ignored because notify_on_complete=True; these two flags produce duplicate notifications ' +
        'when combined',
      notify_on_complete: true,
    });
    assert.deepEqual(task.backgroundRequests, [{ command: 'npm run dev', workdir: '/srv/web', notifyOnComplete: true }]);
  });

  void it('reports the approval note for an approved background command', async () => {
    const task = new RecordingTaskClientDouble();
    const approval = () => Promise.resolve({ allowed: true as const, note: 'approved by the user' });
    const result = (await call(terminal, { command: 'rm -rf build', background: true }, task, { approval })) as Record<
      string,
      unknown
    >;
    assert.equal(result.approval, 'approved by the user');
  });

  void it('puts the silent-process hint after the approval note, and leaves it out when notified or watched', async () => {
    const task = new RecordingTaskClientDouble();
    const approval = () => Promise.resolve({ allowed: true as const, note: 'approved by the user' });
    const result = (await call(terminal, { command: 'rm -rf build', background: true }, task, { approval })) as Record<
      string,
      unknown
    >;
    assert.deepEqual(Object.keys(result), ['output', 'session_id', 'pid', 'exit_code', 'error', 'approval', 'hint']);
    assert.equal(
      result.hint,
      'background=true without notify_on_complete=true means this process runs SILENTLY — you will not be told ' +
        'when it exits. If this is a bounded task (test suite, build, CI poller, deploy, anything with a defined ' +
        'end), you almost certainly wanted notify_on_complete=true so the system pings you on exit. Re-launch with ' +
        "notify_on_complete=true, or call process(action='poll') / process(action='wait') yourself to learn the " +
        'outcome. Only ignore this hint for genuine long-lived processes that never exit (servers, watchers, daemons).',
    );
    const watched = (await call(terminal, { command: 'npm run dev', background: true, watch_patterns: ['ready'] }, task)) as Record<
      string,
      unknown
    >;
    assert.equal(watched.hint, undefined);
    const emptyWatch = (await call(terminal, { command: 'npm run dev', background: true, watch_patterns: [] }, task)) as Record<
      string,
      unknown
    >;
    assert.equal(emptyWatch.hint, SILENT_BACKGROUND_HINT, 'an empty pattern list watches nothing');
  });

  void it('is not subject to the foreground timeout cap', async () => {
    const task = new RecordingTaskClientDouble();
    const result = (await call(terminal, { command: 'make all', background: true, timeout: 3600 }, task)) as Record<
      string,
      unknown
    >;
    assert.equal(result.error, null);
    assert.equal(task.backgroundRequests.length, 1);
  });

  void it('rewrites `A && B &` before starting it', async () => {
    const task = new RecordingTaskClientDouble();
    await call(terminal, { command: 'cd /srv && ./server &', background: true }, task);
    assert.equal(task.backgroundRequests[0]?.command, 'cd /srv && { ./server & }');
  });
});

void describe('terminal rewrite reaching exec', () => {
  void it('hands exec the command after rewriteBackgroundChain', async () => {
    // Backgrounding a --help command is the one `&` the guardrail lets through.
    const task = new RecordingTaskClientDouble();
    await call(terminal, { command: 'cd /srv && ./tool --help &' }, task);
    assert.equal(task.execRequests[0]?.command, 'cd /srv && { ./tool --help & }');
  });

  void it('leaves a command without a trailing chain & unchanged', async () => {
    const task = new RecordingTaskClientDouble();
    await call(terminal, { command: 'echo "a && b &" && ls' }, task);
    assert.equal(task.execRequests[0]?.command, 'echo "a && b &" && ls');
  });
});

void describe('process tool', () => {
  const processTool = processToolRegistration();

  void it('is the process_manage tool of the terminal toolset', () => {
    assert.equal(processTool.name, 'process_manage');
    assert.equal(processTool.schema.name, 'process_manage');
    assert.equal(processTool.toolset, 'terminal');
    const parameters = processTool.schema.parameters as { properties: Record<string, { enum?: string[]; minimum?: number }> };
    assert.deepEqual(parameters.properties.action?.enum, [
      'list',
      'poll',
      'log',
      'wait',
      'kill',
      'write',
      'submit',
      'close',
      'handoff',
    ]);
    assert.equal(parameters.properties.timeout?.minimum, 1);
  });

  void it('is the name the terminal schema sends the model to', () => {
    const text = JSON.stringify(terminal.schema);
    assert.match(text, /process_manage tool/);
    assert.doesNotMatch(text, /\bprocess tool\b|\bprocess\(/);
  });

  void it('refuses an unknown action', async () => {
    const task = new RecordingTaskClientDouble();
    assert.deepEqual(await call(processTool, { action: 'restart', session_id: 'proc_1' }, task), {
      error: 'Unknown process action: restart. Use: list, poll, log, wait, kill, write, submit, close, handoff',
    });
    assert.ok(task.untouched);
  });

  for (const action of ['poll', 'log', 'wait', 'kill', 'write', 'submit', 'close', 'handoff']) {
    void it(`requires session_id for ${action}`, async () => {
      const task = new RecordingTaskClientDouble();
      assert.deepEqual(await call(processTool, { action, data: 'x' }, task), {
        error: `session_id is required for ${action}`,
      });
      assert.ok(task.untouched);
    });
  }

  void it('sends empty input when write or submit has no data (submit then just presses Enter)', async () => {
    const task = new RecordingTaskClientDouble();
    await call(processTool, { action: 'write', session_id: 'proc_1' }, task);
    await call(processTool, { action: 'submit', session_id: 'proc_1', data: null }, task);
    assert.deepEqual(task.processRequests, [
      { action: 'write', sessionId: 'proc_1', data: '' },
      { action: 'submit', sessionId: 'proc_1', data: '' },
    ]);
  });

  void it('answers handoff as for a non-subagent, without asking the executor', async () => {
    const task = new RecordingTaskClientDouble();
    assert.deepEqual(await call(processTool, { action: 'handoff', session_id: 'proc_1', data: 'the dev server' }, task), {
      error: 'handoff is only available to a running subagent with a live parent; you are not one.',
    });
    assert.ok(task.untouched);
  });

  for (const timeout of [0, -5]) {
    void it(`refuses a wait timeout of ${timeout}`, async () => {
      const task = new RecordingTaskClientDouble();
      assert.deepEqual(await call(processTool, { action: 'wait', session_id: 'proc_1', timeout }, task), {
        status: 'error',
        error: `timeout must be positive (got ${timeout})`,
      });
      assert.ok(task.untouched);
    });
  }

  void it('ignores timeout on actions other than wait', async () => {
    const task = new RecordingTaskClientDouble();
    await call(processTool, { action: 'poll', session_id: 'proc_1', timeout: 0 }, task);
    assert.deepEqual(task.processRequests, [{ action: 'poll', sessionId: 'proc_1' }]);
  });

  void it('takes a numeric session id as its text', async () => {
    const task = new RecordingTaskClientDouble();
    await call(processTool, { action: 'poll', session_id: 4321 }, task);
    assert.deepEqual(task.processRequests, [{ action: 'poll', sessionId: '4321' }]);
  });

  void it('lists without a session id and returns the executor JSON as is', async () => {
    const task = new RecordingTaskClientDouble({}, '{"processes":[{"session_id":"proc_1"}]}');
    const result = await processTool.handler({ action: 'list' }, contextFor(task));
    assert.equal(result, '{"processes":[{"session_id":"proc_1"}]}');
    assert.deepEqual(task.processRequests, [{ action: 'list' }]);
  });

  void it('converts the wait timeout from seconds to milliseconds', async () => {
    const task = new RecordingTaskClientDouble();
    await call(processTool, { action: 'wait', session_id: 'proc_1', timeout: 30 }, task);
    assert.deepEqual(task.processRequests, [{ action: 'wait', sessionId: 'proc_1', timeoutMs: 30_000 }]);
  });

  void it('passes data, offset and limit through', async () => {
    const task = new RecordingTaskClientDouble();
    await call(processTool, { action: 'submit', session_id: 'proc_1', data: 'yes' }, task);
    await call(processTool, { action: 'log', session_id: 'proc_1', offset: 10, limit: 50 }, task);
    assert.deepEqual(task.processRequests, [
      { action: 'submit', sessionId: 'proc_1', data: 'yes' },
      { action: 'log', sessionId: 'proc_1', offset: 10, limit: 50 },
    ]);
  });
});
