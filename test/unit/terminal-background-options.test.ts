import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { stripTerminalArgs } from '../../services/dispatcher/tools/code-execution/execute-code-tool.js';
import {
  FOREGROUND_NOTIFY_ERROR,
  FOREGROUND_PERSIST_ERROR,
  FOREGROUND_PTY_ERROR,
  commandRequiresPipeStdin,
} from '../../services/dispatcher/tools/terminal/background-options.js';
import { SILENT_BACKGROUND_HINT, terminalToolRegistration } from '../../services/dispatcher/tools/terminal/terminal-tool.js';
import { RecordingTaskClientDouble, call } from '../support/recording-task-client.js';

const terminal = terminalToolRegistration({ defaultTimeoutSec: 180, maxForegroundTimeoutSec: 600, maxOutputChars: 50_000 });

const STARTED = { output: 'Background process started', session_id: 'proc_0123456789ab', pid: 4242, exit_code: 0, error: null };
const STARTED_KEYS = Object.keys(STARTED);

void describe('terminal: modifiers that need background=true', () => {
  const refusals: Array<[string, Record<string, unknown>, string]> = [
    ['notify=true', { notify: true }, FOREGROUND_NOTIFY_ERROR],
    ['notify=[...]', { notify: ['ready'] }, FOREGROUND_NOTIFY_ERROR],
    ['notify_on_complete', { notify_on_complete: true }, FOREGROUND_NOTIFY_ERROR],
    ['watch_patterns', { watch_patterns: ['ready'] }, FOREGROUND_NOTIFY_ERROR],
    ['heartbeat', { heartbeat: 60 }, FOREGROUND_NOTIFY_ERROR],
    ['pty', { pty: true }, FOREGROUND_PTY_ERROR],
    ['persist_on_release', { persist_on_release: true }, FOREGROUND_PERSIST_ERROR],
  ];
  for (const [name, args, error] of refusals) {
    void it(`refuses ${name} on a foreground call with the corrected call`, async () => {
      const task = new RecordingTaskClientDouble();
      assert.deepEqual(await call(terminal, { command: 'make', ...args }, task), { error });
      assert.ok(task.untouched);
    });
  }

  void it('has upstream\'s texts', () => {
    assert.equal(
      FOREGROUND_NOTIFY_ERROR,
      'notify/heartbeat only apply to background commands (foreground results return directly). Either drop them, ' +
        'or run as terminal(command=..., background=true, notify=...).',
    );
    assert.equal(
      FOREGROUND_PTY_ERROR,
      "pty requires background=true (a PTY session is interacted with via process(action='write'/'submit'), which " +
        'needs a tracked background process). Retry as terminal(command=..., background=true, pty=true).',
    );
    assert.equal(
      FOREGROUND_PERSIST_ERROR,
      'persist_on_release only applies to background commands (a foreground process is awaited inline and has ' +
        'nothing to persist). Retry as terminal(command=..., background=true, persist_on_release=true).',
    );
  });

  void it('lets false and empty values through on a foreground call', async () => {
    const task = new RecordingTaskClientDouble({ output: 'ok' });
    const result = await call(
      terminal,
      { command: 'make', notify: false, watch_patterns: [], notify_on_complete: false, heartbeat: 0, pty: false, persist_on_release: false },
      task,
    );
    assert.deepEqual(result, { output: 'ok', exit_code: 0, error: null });
  });

  void it('refuses a heartbeat that is not a whole number of seconds, and a notify of another type', async () => {
    const task = new RecordingTaskClientDouble();
    for (const heartbeat of [-1, 1.5, true, 'soon']) {
      assert.deepEqual(await call(terminal, { command: 'make', background: true, heartbeat }, task), {
        error: 'heartbeat must be a whole number of seconds (0 disables; positive values are clamped to min 60).',
      });
    }
    assert.deepEqual(await call(terminal, { command: 'make', background: true, notify: 'yes' }, task), {
      error: 'notify must be true/false (notify on exit) or a list of strings (notify on output pattern match).',
    });
    assert.ok(task.untouched);
  });
});

void describe('terminal background: notify, heartbeat, persist_on_release, pty', () => {
  void it('notify=true asks for the completion notice', async () => {
    const task = new RecordingTaskClientDouble();
    assert.deepEqual(await call(terminal, { command: 'make', background: true, notify: true }, task), {
      ...STARTED,
      notify_on_complete: true,
    });
    assert.deepEqual(task.backgroundRequests, [{ command: 'make', notifyOnComplete: true }]);
  });

  void it('notify=[...] watches for the patterns; an explicit notify wins over the legacy arguments', async () => {
    const task = new RecordingTaskClientDouble();
    const watched = await call(
      terminal,
      { command: 'npm run dev', background: true, notify: ['ready on'], notify_on_complete: true },
      task,
    );
    assert.deepEqual(watched, { ...STARTED, watch_patterns: ['ready on'] });
    const quiet = await call(terminal, { command: 'npm run dev', background: true, notify: false, watch_patterns: ['x'] }, task);
    assert.deepEqual(quiet, { ...STARTED, hint: SILENT_BACKGROUND_HINT });
    assert.deepEqual(task.backgroundRequests, [
      { command: 'npm run dev', notifyOnComplete: false, watchPatterns: ['ready on'] },
      { command: 'npm run dev', notifyOnComplete: false },
    ]);
  });

  void it('still accepts the legacy notify_on_complete and watch_patterns, strings included', async () => {
    const task = new RecordingTaskClientDouble();
    assert.deepEqual(await call(terminal, { command: 'make', background: true, notify_on_complete: 'true' }, task), {
      ...STARTED,
      notify_on_complete: true,
    });
    assert.deepEqual(await call(terminal, { command: 'serve', background: true, watch_patterns: 'listening' }, task), {
      ...STARTED,
      watch_patterns: ['listening'],
    });
  });

  void it('heartbeat implies notify and reports the interval it got (at least 60 s)', async () => {
    const task = new RecordingTaskClientDouble();
    assert.deepEqual(await call(terminal, { command: 'make test', background: true, heartbeat: 30 }, task), {
      ...STARTED,
      notify_on_complete: true,
      heartbeat_seconds: 60,
    });
    assert.deepEqual(await call(terminal, { command: 'make test', background: true, heartbeat: 90, notify: true }, task), {
      ...STARTED,
      notify_on_complete: true,
      heartbeat_seconds: 90,
    });
    assert.deepEqual(task.backgroundRequests.map((r) => [r.notifyOnComplete, r.heartbeatSeconds]), [
      [true, 30],
      [true, 90],
    ]);
  });

  void it('puts the keys in upstream\'s order', async () => {
    const task = new RecordingTaskClientDouble();
    const approval = () => Promise.resolve({ allowed: true as const, note: 'approved by the user' });
    const result = (await call(
      terminal,
      { command: 'rm -rf build && gh auth login --with-token', background: true, persist_on_release: true, pty: true },
      task,
      { approval },
    )) as Record<string, unknown>;
    assert.deepEqual(Object.keys(result), [...STARTED_KEYS, 'persist_on_release', 'approval', 'hint']);
    const all = (await call(
      terminal,
      {
        command: 'gh auth login --with-token',
        background: true,
        persist_on_release: true,
        pty: true,
        notify_on_complete: true,
        watch_patterns: ['x'],
        heartbeat: 60,
      },
      task,
      { approval },
    )) as Record<string, unknown>;
    assert.deepEqual(Object.keys(all), [
      ...STARTED_KEYS,
      'persist_on_release',
      'approval',
      'pty_note',
      'watch_patterns_ignored',
      'notify_on_complete',
      'heartbeat_seconds',
    ]);
    assert.equal(task.backgroundRequests[1]?.persistOnRelease, true);
  });

  void it('drops the PTY for a command that reads piped input to its end, keeps a stdin pipe and says how to end it', async () => {
    const task = new RecordingTaskClientDouble();
    const result = (await call(terminal, { command: '  GH auth   login --hostname x --with-token', background: true, pty: true }, task)) as Record<
      string,
      unknown
    >;
    assert.equal(
      result.pty_note,
      'PTY disabled for this command because it expects piped stdin/EOF (for example gh auth login --with-token). ' +
        "For local background processes, call process(action='close') after writing so it receives EOF.",
    );
    assert.deepEqual(task.backgroundRequests, [
      { command: '  GH auth   login --hostname x --with-token', pipeStdin: true, notifyOnComplete: false },
    ]);
    const interactive = (await call(terminal, { command: 'python3 -i', background: true, pty: true }, task)) as Record<string, unknown>;
    assert.equal(interactive.pty_note, undefined);
    assert.deepEqual(task.backgroundRequests[1], { command: 'python3 -i', pty: true, notifyOnComplete: false });
  });

  void it('recognises the pipe-stdin rule as upstream writes it', () => {
    assert.equal(commandRequiresPipeStdin('gh auth login --with-token < token.txt'), true);
    assert.equal(commandRequiresPipeStdin('echo t | gh auth login --with-token'), false);
    assert.equal(commandRequiresPipeStdin('gh auth login'), false);
  });

  void it('execute_code strips every background-only argument from a script\'s terminal calls', () => {
    const sent = {
      command: 'make',
      timeout: 30,
      ...Object.fromEntries(
        ['background', 'pty', 'notify', 'notify_on_complete', 'watch_patterns', 'heartbeat', 'persist_on_release'].map((k) => [k, true]),
      ),
    };
    assert.deepEqual(stripTerminalArgs(sent), { command: 'make', timeout: 30 });
  });
});
