import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { silentLogger } from '../../services/common/logging.js';
import type { ToolArgs, ToolContext } from '../../services/dispatcher/registry/tool-types.js';
import { foregroundTimeoutGuard } from '../../services/dispatcher/tools/terminal/guards/foreground-timeout.js';
import type { TerminalCall } from '../../services/dispatcher/tools/terminal/guards/terminal-guard.js';

const guard = foregroundTimeoutGuard(600);
const ctx = { logger: silentLogger() } as unknown as ToolContext;

function callWith(args: ToolArgs, background = false): TerminalCall {
  return {
    args,
    background,
    command: 'make',
    workdir: undefined,
    timeoutSec: 180,
    promotedFromTimeoutSec: undefined,
    approvalNote: undefined,
  };
}

function run(call: TerminalCall): unknown {
  const result = guard.beforeRun?.(call, ctx);
  return typeof result === 'string' ? JSON.parse(result) : result;
}

void describe('foreground timeout guard', () => {
  void it('takes timeouts up to the cap, rounding a fraction up', () => {
    for (const [timeout, expected] of [[1, 1], [600, 600], [2.5, 3]] as const) {
      const call = callWith({ timeout });
      assert.equal(run(call), undefined);
      assert.deepEqual([call.timeoutSec, call.promotedFromTimeoutSec], [expected, undefined]);
    }
  });

  void it('marks a foreground timeout over the cap for a background run instead of refusing it', () => {
    const call = callWith({ timeout: 601 });
    assert.equal(run(call), undefined);
    assert.equal(call.promotedFromTimeoutSec, 601);
    const background = callWith({ timeout: 3600 }, true);
    assert.equal(run(background), undefined);
    assert.equal(background.promotedFromTimeoutSec, undefined);
  });

  void it('refuses a timeout of zero or less with upstream\'s text, background calls too', () => {
    assert.deepEqual(run(callWith({ timeout: 0 })), { error: 'timeout must be a positive number of seconds (got 0).' });
    assert.deepEqual(run(callWith({ timeout: -5 }, true)), { error: 'timeout must be a positive number of seconds (got -5).' });
    assert.deepEqual(run(callWith({ timeout: -0.5 })), { error: 'timeout must be a positive number of seconds (got -0.5).' });
  });

  void it('refuses a timeout that is not a number in the terminal shape', () => {
    assert.deepEqual(run(callWith({ timeout: 'soon' })), {
      output: '',
      exit_code: -1,
      error: 'Invalid timeout: expected a positive integer number of seconds, got "soon"',
      status: 'error',
    });
  });
});
