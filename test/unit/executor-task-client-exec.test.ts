/**
 * How the dispatcher reads an executor's ExecExit: the start and end
 * directories and the recreated flag behind the terminal's `cwd` and
 * `environment_recreated` keys. An executor that predates the fields sends
 * their defaults, which must read as "not reported".
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ExecutorTaskClient } from '../../services/dispatcher/executors/executor-task-client.js';
import type { ExecEvent, ExecExit, ExecutorClient } from '../../services/gen/berth/v1/executor.js';

function clientAnswering(exit: Partial<ExecExit>): ExecutorTaskClient {
  const event: ExecEvent = {
    event: {
      $case: 'exit',
      value: {
        output: 'out',
        exitCode: 0,
        timedOut: false,
        interrupted: false,
        notices: [],
        startCwd: '',
        endCwd: '',
        environmentRecreated: false,
        ...exit,
      },
    },
  };
  const fake = {
    exec: async function* () {
      await Promise.resolve();
      yield event;
    },
  };
  return new ExecutorTaskClient(fake as unknown as ExecutorClient, { tenant: 't', taskId: 'x' });
}

const exec = (client: ExecutorTaskClient) => client.exec({ command: 'true', timeoutMs: 1000 });

describe('ExecutorTaskClient exec result', () => {
  it('passes the start and end directories and the recreated flag through', async () => {
    const result = await exec(clientAnswering({ startCwd: '/w', endCwd: '/tmp', environmentRecreated: true }));
    assert.deepEqual([result.startCwd, result.endCwd, result.environmentRecreated], ['/w', '/tmp', true]);
  });

  it('reads empty directories and a false flag as not reported', async () => {
    const result = await exec(clientAnswering({}));
    assert.ok(!('startCwd' in result) && !('endCwd' in result) && !('environmentRecreated' in result), JSON.stringify(result));
  });

  it('takes the directories only as a pair', async () => {
    const result = await exec(clientAnswering({ startCwd: '/w' }));
    assert.ok(!('startCwd' in result) && !('endCwd' in result), JSON.stringify(result));
  });
});
