/**
 * The `process` tool as a model calls it: the dispatcher's handler (argument
 * checks, seconds to milliseconds) over a real local backend's task
 * environment, with processes started by the `terminal` tool. The result
 * shapes are upstream hermes-agent's (tools/process_registry.py).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { processToolRegistration } from '../../services/dispatcher/tools/process-tool.js';
import { terminalToolRegistration } from '../../services/dispatcher/tools/terminal/terminal-tool.js';
import { localToolTasks } from '../support/tool-tasks.js';

type Json = Record<string, unknown>;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const tasks = localToolTasks('process-tool');

/** One task: calls `terminal` and `process` the way the dispatcher does. */
function task() {
  const { key, context } = tasks.newTask();
  const terminal = terminalToolRegistration();
  const processTool = processToolRegistration();
  return {
    key,
    async start(command: string, extra: Json = {}): Promise<string> {
      const started = JSON.parse(await terminal.handler({ command, background: true, ...extra }, context)) as Json;
      assert.equal(started.output, 'Background process started', JSON.stringify(started));
      return String(started.session_id);
    },
    async process(args: Json): Promise<Json> {
      return JSON.parse(await processTool.handler(args, context)) as Json;
    },
  };
}

describe('process tool over a local task', () => {
  it('finds a process by a 4-character prefix, with or without proc_, and not by a shorter one', async () => {
    const t = task();
    const id = await t.start('echo by-prefix');
    const hex = id.slice('proc_'.length);
    await t.process({ action: 'wait', session_id: id, timeout: 5 });
    for (const sessionId of [id, hex, hex.slice(0, 4), `proc_${hex.slice(0, 6)}`]) {
      const polled = await t.process({ action: 'poll', session_id: sessionId });
      assert.deepEqual([polled.session_id, polled.output_preview], [id, 'by-prefix\n'], sessionId);
    }
    const short = hex.slice(0, 3);
    assert.deepEqual(await t.process({ action: 'log', session_id: short }), {
      status: 'not_found',
      error: `No process with ID ${short}`,
    });
  });

  it('poll answers with output_preview and reads nothing away', async () => {
    const t = task();
    const command = 'echo first; sleep 1000';
    const id = await t.start(command);
    let polled: Json = {};
    for (let i = 0; i < 100 && polled.output_preview !== 'first\n'; i++) {
      polled = await t.process({ action: 'poll', session_id: id });
      if (polled.output_preview !== 'first\n') await sleep(50);
    }
    assert.deepEqual(Object.keys(polled), ['session_id', 'command', 'status', 'pid', 'uptime_seconds', 'output_preview']);
    assert.deepEqual([polled.command, polled.status, polled.output_preview], [command, 'running', 'first\n']);
    assert.equal((await t.process({ action: 'poll', session_id: id })).output_preview, 'first\n');
    assert.equal(polled.output, undefined);
  });

  it('wait answers an exit with the last 2,000 characters and how it ended', async () => {
    const t = task();
    const command = 'head -c 3000 /dev/zero | tr "\\0" z; exit 3';
    const id = await t.start(command);
    assert.deepEqual(await t.process({ action: 'wait', session_id: id, timeout: 10 }), {
      status: 'exited',
      command,
      exit_code: 3,
      completion_reason: 'exited',
      termination_source: '',
      output: 'z'.repeat(2000),
      output_cut: 1000,
    });
  });

  it('wait answers a timeout with the process still running and says it is not an error', async () => {
    const t = task();
    const command = 'echo still-going; sleep 1000';
    const id = await t.start(command);
    const waited = await t.process({ action: 'wait', session_id: id.slice(0, 9), timeout: 1 });
    assert.deepEqual(Object.keys(waited), ['status', 'command', 'output', 'process_running', 'timeout_note']);
    assert.deepEqual([waited.status, waited.command, waited.output, waited.process_running], [
      'timeout',
      command,
      'still-going\n',
      true,
    ]);
    assert.match(
      String(waited.timeout_note),
      /^Wait window of 1s elapsed — the process is still running\. This is not an error\. Uptime: \d+s\. Poll again later or use terminal\(background=true, notify_on_complete=true\) next time for automatic notification\.$/,
    );
  });

  it('refuses a wait timeout below 1 before looking the process up', async () => {
    const t = task();
    for (const timeout of [0, -1]) {
      assert.deepEqual(await t.process({ action: 'wait', session_id: 'proc_000000000000', timeout }), {
        status: 'error',
        error: `timeout must be positive (got ${timeout})`,
      });
    }
  });

  it('kill answers with the kill source and the output, then already_exited', async () => {
    const t = task();
    const command = 'echo about-to-die; sleep 1000';
    const id = await t.start(command);
    for (let i = 0; i < 100; i++) {
      if ((await t.process({ action: 'poll', session_id: id })).output_preview === 'about-to-die\n') break;
      await sleep(50);
    }
    assert.deepEqual(await t.process({ action: 'kill', session_id: id.slice(0, 10) }), {
      status: 'killed',
      session_id: id,
      completion_reason: 'killed',
      termination_source: 'process.kill',
      output: 'about-to-die\n',
    });
    assert.deepEqual(await t.process({ action: 'kill', session_id: id }), {
      status: 'already_exited',
      command,
      exit_code: -15,
      completion_reason: 'killed',
      termination_source: 'process.kill',
      output: 'about-to-die\n',
    });
  });

  it('submit and close drive a PTY process with upstream shapes; one without a PTY has no stdin', async () => {
    const t = task();
    const id = await t.start('stty -echo; echo ready; read -r answer; echo "answer=$answer"; cat', { pty: true });
    // Input typed before the echo is off would come back in the output.
    for (let i = 0; i < 100 && !String((await t.process({ action: 'poll', session_id: id })).output_preview).includes('ready'); i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.deepEqual(await t.process({ action: 'submit', session_id: id, data: 'yes' }), { status: 'ok', bytes_written: 4 });
    assert.deepEqual(await t.process({ action: 'close', session_id: id }), { status: 'ok', message: 'EOF sent' });
    const done = await t.process({ action: 'wait', session_id: id, timeout: 10 });
    assert.deepEqual([done.status, done.exit_code, done.output], ['exited', 0, 'ready\nanswer=yes\n']);
    const plain = await t.start('cat; echo read-all');
    assert.deepEqual(await t.process({ action: 'submit', session_id: plain, data: 'yes' }), {
      status: 'error',
      error: 'Process stdin not available (non-local backend or stdin closed)',
    });
    assert.match(String((await t.process({ action: 'wait', session_id: plain, timeout: 10 })).output), /read-all/);
    assert.deepEqual(await t.process({ action: 'write', session_id: id, data: 'late' }), {
      status: 'already_exited',
      error: 'Process has already finished',
    });
  });

  it('list entries carry upstream keys and the owning task', async () => {
    const t = task();
    const id = await t.start('sleep 1000', { notify_on_complete: true });
    const listed = (await t.process({ action: 'list' })) as { processes: Json[] };
    assert.deepEqual(listed.processes.map((p) => Object.keys(p)), [
      [
        'session_id',
        'command',
        'cwd',
        'pid',
        'owner_task_id',
        'started_at',
        'uptime_seconds',
        'status',
        'output_preview',
        'notify_on_complete',
      ],
    ]);
    assert.deepEqual([listed.processes[0]?.session_id, listed.processes[0]?.owner_task_id], [id, t.key.taskId]);
  });
});
