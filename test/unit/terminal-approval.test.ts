import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { silentLogger } from '../../services/common/logging.js';
import type { GuardedAction, GuardVerdict } from '../../services/dispatcher/approval/approval-types.js';
import type { TaskClient } from '../../services/common/task-client.js';
import type { ToolContext } from '../../services/dispatcher/registry/tool-types.js';
import { processToolRegistration } from '../../services/dispatcher/tools/process-tool.js';
import { terminalToolRegistration } from '../../services/dispatcher/tools/terminal/terminal-tool.js';

/** Records what reached the executor; answers exec and startBackground. */
function taskDouble() {
  const ran: string[] = [];
  const task = {
    exec: async (r: { command: string }) => {
      ran.push(`exec:${r.command}`);
      return { output: 'done\n', exitCode: 0, timedOut: false, interrupted: false, notices: [] };
    },
    startBackground: async (r: { command: string }) => {
      ran.push(`bg:${r.command}`);
      return { sessionId: 'proc_0123456789ab', pid: 7 };
    },
  } as unknown as TaskClient;
  return { task, ran };
}

function context(task: TaskClient, approval?: (a: GuardedAction) => Promise<GuardVerdict>): ToolContext {
  return {
    tenant: 't',
    taskId: 'task',
    sessionId: 's',
    task,
    signal: new AbortController().signal,
    logger: silentLogger(),
    ...(approval ? { approval } : {}),
  };
}

const handler = terminalToolRegistration().handler;
const REFUSAL = JSON.stringify({ output: '', exit_code: -1, error: 'BLOCKED: no', status: 'blocked' });

describe('terminal asks the approval guard', () => {
  it('before a foreground command, and runs nothing when refused', async () => {
    const { task, ran } = taskDouble();
    const asked: GuardedAction[] = [];
    const result = await handler({ command: 'rm -rf build' }, context(task, async (a) => (asked.push(a), { allowed: false, result: REFUSAL })));
    assert.equal(result, REFUSAL);
    assert.deepEqual(asked, [{ tool: 'terminal', command: 'rm -rf build' }]);
    assert.deepEqual(ran, []);
  });

  it('before a background command, and runs nothing when refused', async () => {
    const { task, ran } = taskDouble();
    const asked: GuardedAction[] = [];
    const result = await handler(
      { command: 'rm -rf build', background: true },
      context(task, async (a) => (asked.push(a), { allowed: false, result: REFUSAL })),
    );
    assert.equal(result, REFUSAL);
    assert.equal(asked.length, 1);
    assert.deepEqual(ran, []);
  });

  it('runs an approved command and reports the approval in the foreground result', async () => {
    const { task, ran } = taskDouble();
    const result = JSON.parse(
      await handler({ command: 'rm -rf build' }, context(task, async () => ({ allowed: true, note: 'approved by the user' }))),
    );
    assert.deepEqual(result, { output: 'done', exit_code: 0, error: null, approval: 'approved by the user' });
    assert.deepEqual(ran, ['exec:rm -rf build']);
  });

  it('does not ask about commands refused by validation first', async () => {
    const { task } = taskDouble();
    let asked = 0;
    const approval = async () => (asked++, { allowed: true as const });
    await handler({ command: 42 }, context(task, approval));
    await handler({ command: 'npm run dev' }, context(task, approval)); // foreground guardrail
    assert.equal(asked, 0);
  });

  it('without a guard, hardline commands are still refused', async () => {
    const { task, ran } = taskDouble();
    const result = JSON.parse(await handler({ command: 'rm -rf /', background: true }, context(task)));
    assert.equal(result.status, 'blocked');
    assert.match(result.error, /^BLOCKED \(hardline\)/);
    assert.deepEqual(ran, []);
  });
});

describe('process asks the approval guard about input it sends', () => {
  const processHandler = processToolRegistration().handler;

  it('write and submit are guarded: a shell in the background cannot be used to skip approval', async () => {
    let sent = 0;
    const task = { process: async () => (sent++, '{"status":"ok"}') } as unknown as TaskClient;
    const asked: GuardedAction[] = [];
    const refuse = async (a: GuardedAction) => (asked.push(a), { allowed: false as const, result: REFUSAL });
    for (const action of ['write', 'submit']) {
      assert.equal(await processHandler({ action, session_id: 'proc_1', data: 'rm -rf ~/src\n' }, context(task, refuse)), REFUSAL);
    }
    assert.deepEqual(asked.map((a) => a.tool), ['process_manage', 'process_manage']);
    assert.equal(sent, 0);
    // Pressing Enter and reading need no approval.
    await processHandler({ action: 'submit', session_id: 'proc_1', data: '' }, context(task, refuse));
    await processHandler({ action: 'poll', session_id: 'proc_1' }, context(task, refuse));
    assert.equal(asked.length, 2);
    assert.equal(sent, 2);
  });
});
