/**
 * Conformance cases of background processes: start, poll, log, list, kill,
 * a natural exit, stdin (a pipe kept open on request, end of input
 * otherwise, a PTY); and what becomes of them when the stream to the exec
 * agent drops.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { BackendEnvironment } from '../executor/backend.js';
import type { BackendSuite } from './backend-suite.js';
import { countProcessesScript, uniqueSleepSeconds } from './process-probe.js';

/** Background processes through the `process` tool. */
export function backgroundCases(suite: BackendSuite, options: { readonly skipPty?: boolean }): void {
  const { name, scale, testTimeoutMs, newTask, exec, processAction, assertNoProcess, untilOutput } = suite;
  describe('background processes', () => {
    it('starts, polls, logs and kills with -15', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      await exec(key, 'cd / && export BERTH_BG_VAR=from-snapshot');
      const seconds = uniqueSleepSeconds();
      const started = await suite.envs.startBackground(key, {
        command: `echo "bg-one $BERTH_BG_VAR"; pwd; echo bg-two; sleep ${seconds}`,
      });
      assert.match(started.sessionId, /^proc_[0-9a-f]{12}$/);
      assert.ok(started.pid > 0, `pid ${started.pid}`);
      const polled = await untilOutput(key, started.sessionId, 'bg-two');
      assert.match(polled, /bg-one from-snapshot\n\/\nbg-two/);

      const running = await processAction(key, 'poll', started.sessionId);
      assert.equal(running.status, 'running');
      const log = await processAction(key, 'log', started.sessionId);
      assert.match(log.output ?? '', /bg-one from-snapshot\n\/\nbg-two/);
      const list = await processAction(key, 'list');
      assert.ok(list.processes?.some((p) => p.session_id === started.sessionId));

      // The check below must be able to see the process, or it would pass for the wrong reason.
      assert.equal((await exec(key, countProcessesScript(`${seconds}`))).output.trim(), 'count=1');
      const killed = await processAction(key, 'kill', started.sessionId);
      assert.deepEqual(
        [killed.status, killed.completion_reason, killed.termination_source],
        ['killed', 'killed', 'process.kill'],
      );
      assert.match(killed.output ?? '', /bg-two/);
      const after15 = await processAction(key, 'poll', started.sessionId);
      assert.deepEqual([after15.status, after15.exit_code], ['exited', -15]);
      await assertNoProcess(key, `${seconds}`, 'after killing a background process');
    });

    it('reports a natural exit code and takes stdin', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const done = await suite.envs.startBackground(key, { command: 'echo finishing; exit 5' });
      const waited = await processAction(key, 'wait', done.sessionId, { timeoutMs: 20_000 * scale });
      assert.deepEqual([waited.status, waited.exit_code], ['exited', 5]);
      assert.match(waited.output ?? '', /finishing/);

      // A stdin pipe kept open on request (commands that read piped input to its end).
      const reader = await suite.envs.startBackground(key, {
        command: 'read -r line; echo "got:$line"; cat; echo eof',
        pipeStdin: true,
      });
      const submitted = await processAction(key, 'submit', reader.sessionId, { data: 'hello there' });
      assert.equal(submitted.status, 'ok', JSON.stringify(submitted));
      await untilOutput(key, reader.sessionId, 'got:hello there');
      const closed = await processAction(key, 'close', reader.sessionId);
      assert.equal(closed.status, 'ok', JSON.stringify(closed));
      const end = await processAction(key, 'wait', reader.sessionId, { timeoutMs: 20_000 * scale });
      assert.deepEqual([end.status, end.exit_code], ['exited', 0]);
      assert.match(end.output ?? '', /eof/);
    });

    it('starts a process without a PTY at end of input: one that reads stdin to its end finishes', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const seconds = uniqueSleepSeconds();
      const started = await suite.envs.startBackground(key, { command: `wc -l; cat; echo read-all; sleep ${seconds}` });
      await untilOutput(key, started.sessionId, 'read-all');
      const polled = await processAction(key, 'poll', started.sessionId);
      assert.deepEqual([polled.status, polled.output_preview], ['running', '0\nread-all\n']);
      const refused = await processAction(key, 'write', started.sessionId, { data: 'late' });
      assert.deepEqual(refused, { status: 'error', error: 'Process stdin not available (non-local backend or stdin closed)' });
      await processAction(key, 'kill', started.sessionId);
    });

    it('takes input under a PTY: submit answers a prompt, close ends the input', { timeout: testTimeoutMs }, async (t) => {
      if (options.skipPty || !suite.capabilities.pty) {
        t.skip(`${name} has no PTY support`);
        return;
      }
      const key = newTask();
      const started = await suite.envs.startBackground(key, {
        command: 'stty -echo 2>/dev/null; read -r line; echo "got:$line"; cat >/dev/null; echo eof',
        pty: true,
      });
      const submitted = await processAction(key, 'submit', started.sessionId, { data: 'typed' });
      assert.equal(submitted.status, 'ok', JSON.stringify(submitted));
      await untilOutput(key, started.sessionId, 'got:typed');
      const closed = await processAction(key, 'close', started.sessionId);
      assert.deepEqual(closed, { status: 'ok', message: 'EOF sent' });
      const end = await processAction(key, 'wait', started.sessionId, { timeoutMs: 20_000 * scale });
      assert.deepEqual([end.status, end.exit_code], ['exited', 0]);
      assert.match(end.output ?? '', /eof/);
    });
  });
}

/** A dropped agent stream, for a backend whose environments have one (see BackendConformanceOptions). */
export function droppedStreamCases(
  suite: BackendSuite,
  options: { readonly dropAgentStream: (env: BackendEnvironment) => Promise<void>; readonly backgroundAfterDrop?: 'survives' | 'ends' },
): void {
  const { scale, testTimeoutMs, newTask, exec, processAction, assertNoProcess, untilOutput } = suite;
  const { dropAgentStream } = options;
  describe('dropped agent stream', () => {
    const survives = (options.backgroundAfterDrop ?? 'survives') === 'survives';
    const title = survives
      ? 'a background process survives a dropped agent stream and is found again after reconnect'
      : 'a dropped agent stream ends background processes: poll says they exited, none is left running';
    it(title, { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      await exec(key, 'cd / && export BERTH_DROP_VAR=kept');
      const seconds = uniqueSleepSeconds();
      const started = await suite.envs.startBackground(key, { command: `echo bg-up; sleep ${seconds}; echo never` });
      await untilOutput(key, started.sessionId, 'bg-up');
      assert.equal((await exec(key, countProcessesScript(`${seconds}`))).output.trim(), 'count=1');
      const env = suite.environment(key);
      assert.ok(env);

      await dropAgentStream(env);

      // The next command reconnects; the shell state lives in the environment, not in the stream.
      const after = await exec(key, 'echo "$PWD $BERTH_DROP_VAR"');
      assert.equal(after.exitCode, 0, after.output);
      assert.equal(after.output, '/ kept\n');
      const list = await processAction(key, 'list');
      assert.ok(list.processes?.some((p) => p.session_id === started.sessionId), JSON.stringify(list));
      if (survives) {
        const polled = await processAction(key, 'poll', started.sessionId);
        assert.equal(polled.status, 'running', JSON.stringify(polled));
        assert.equal((await exec(key, countProcessesScript(`${seconds}`))).output.trim(), 'count=1');
        const killed = await processAction(key, 'kill', started.sessionId);
        assert.equal(killed.status, 'killed', JSON.stringify(killed));
        const end = await processAction(key, 'poll', started.sessionId);
        assert.deepEqual([end.status, end.exit_code], ['exited', -15]);
      } else {
        const end = await processAction(key, 'wait', started.sessionId, { timeoutMs: 20_000 * scale });
        assert.equal(end.status, 'exited', JSON.stringify(end));
        assert.match(end.output ?? '', /bg-up/);
      }
      await assertNoProcess(key, `${seconds}`, 'after the dropped stream');
    });
  });
}
