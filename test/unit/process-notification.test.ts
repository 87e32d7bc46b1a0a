import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  completionBatchHeader,
  effectiveHeartbeatSeconds,
  formatAge,
  formatProcessNotification,
  type CompletionEvent,
} from '../../services/common/process-notification.js';

const base = { session_id: 'proc_4dae56ca81f6', task_id: 't1', owner_task_id: 't1', command: 'make test' };

function completion(fields: Partial<CompletionEvent>): CompletionEvent {
  return {
    ...base,
    type: 'completion',
    exit_code: 0,
    completion_reason: 'exited',
    termination_source: '',
    output: 'ok',
    started_at: 1_767_225_600,
    ...fields,
  };
}

describe('formatProcessNotification (upstream texts)', () => {
  it('completions: normal, failed, killed, cut output', () => {
    assert.equal(
      formatProcessNotification(completion({})),
      '[IMPORTANT: Background process proc_4dae56ca81f6 completed normally (exit code 0).\nCommand: make test\nOutput:\nok]',
    );
    assert.equal(
      formatProcessNotification(completion({ exit_code: 2 })),
      '[IMPORTANT: Background process proc_4dae56ca81f6 exited (exit code 2).\nCommand: make test\nOutput:\nok]',
    );
    assert.equal(
      formatProcessNotification(completion({ exit_code: -15, completion_reason: 'killed', termination_source: 'kill_all' })),
      '[IMPORTANT: Background process proc_4dae56ca81f6 terminated by kill_all (exit code -15, SIGTERM).\n' +
        'Command: make test\nOutput:\nok]',
    );
    assert.equal(
      formatProcessNotification(completion({ exit_code: 143 })),
      '[IMPORTANT: Background process proc_4dae56ca81f6 exited (exit code 143, SIGTERM).\nCommand: make test\nOutput:\nok]',
    );
    assert.equal(
      formatProcessNotification(completion({ output_cut: 3000 })),
      '[IMPORTANT: Background process proc_4dae56ca81f6 completed normally (exit code 0).\nCommand: make test\nOutput:\n' +
        '...(first 3000 characters cut — process(action="log", session_id="proc_4dae56ca81f6") has the full output)\nok]',
    );
  });

  it('watch events, summaries and heartbeats', () => {
    assert.equal(
      formatProcessNotification({ ...base, type: 'watch_match', pattern: 'READY', output: 'server READY', suppressed: 0 }),
      '[IMPORTANT: Background process proc_4dae56ca81f6 matched watch pattern "READY".\nCommand: make test\n' +
        'Matched output:\nserver READY]',
    );
    assert.equal(
      formatProcessNotification({ ...base, type: 'watch_match', pattern: 'READY', output: 'server READY', suppressed: 4 }),
      '[IMPORTANT: Background process proc_4dae56ca81f6 matched watch pattern "READY".\nCommand: make test\n' +
        'Matched output:\nserver READY\n(4 earlier matches were suppressed by rate limit)]',
    );
    assert.equal(
      formatProcessNotification({ session_id: '', command: '', type: 'watch_overflow_tripped', message: 'Too many.' }),
      '[IMPORTANT: Too many.]',
    );
    assert.equal(
      formatProcessNotification({
        ...base,
        type: 'heartbeat',
        seq: 2,
        interval: 60,
        elapsed: 125,
        output: 'step 7',
        started_at: 1_767_225_600,
      }),
      '[Background process proc_4dae56ca81f6 heartbeat #2 — still running after 2m5s (next in 60s when there is new ' +
        'output; you will also be told when it exits).\nCommand: make test\nOutput since last heartbeat:\nstep 7]',
    );
  });

  it('ages, the batch header and the heartbeat floor', () => {
    assert.deepEqual([45, 60, 1085, 7200, 7380].map(formatAge), ['45s', '1m', '18m5s', '2h', '2h3m']);
    assert.equal(
      completionBatchHeader(3),
      '[IMPORTANT: 3 background processes completed. Treat these results as one batch and give one consolidated ' +
        'response; preserve failures and actionable results.]',
    );
    assert.deepEqual([0, 1, 59, 60, 90].map(effectiveHeartbeatSeconds), [0, 60, 60, 60, 90]);
  });
});
