/**
 * Conformance cases of the shell: state kept across calls (cwd, exported
 * variables, functions, after `exit`), stdout and stderr, stdin, signals,
 * large output; timeouts and interrupts that leave nothing behind; a
 * command under a terminal.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { BackendSuite } from './backend-suite.js';
import { uniqueSleepSeconds } from './process-probe.js';

/** Shell state kept across calls, output and exit codes. */
export function shellStateCases(suite: BackendSuite): void {
  const { scale, testTimeoutMs, newTask, exec } = suite;
  describe('shell state', () => {
    it('keeps cwd, exported variables and functions across calls', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const made = await exec(key, 'd=$(mktemp -d) && mkdir -p "$d/sub dir" && cd "$d/sub dir" && pwd');
      assert.equal(made.exitCode, 0, made.output);
      const dir = made.output.trim();
      assert.match(dir, /\/sub dir$/);
      await exec(key, 'export BERTH_CONF_VAR="two words"; greet() { echo "hello $1"; }');
      const r = await exec(key, 'pwd; echo "$BERTH_CONF_VAR"; greet there');
      assert.equal(r.output, `${dir}\ntwo words\nhello there\n`);
      assert.equal(r.exitCode, 0);
      assert.equal(await suite.envs.cwd(key), dir);
    });

    it('keeps state when a command ends with exit 3', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const r = await exec(key, 'cd / && export BERTH_EXIT_VAR=kept; echo before; exit 3');
      assert.deepEqual([r.exitCode, r.output], [3, 'before\n']);
      const after3 = await exec(key, 'pwd; echo "$BERTH_EXIT_VAR"');
      assert.equal(after3.output, '/\nkept\n');
      // Where each command started and ended, for the terminal's `cwd` key: resolved, and both from the shell.
      assert.equal(r.endCwd, '/');
      assert.equal(typeof r.startCwd, 'string');
      assert.deepEqual([after3.startCwd, after3.endCwd], ['/', '/']);
    });

    it('reports where a workdir command started and ended, and keeps the task cwd', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      await exec(key, 'cd /');
      const r = await suite.envs.exec(key, { command: 'cd /tmp', workdir: '/', timeoutMs: 30_000 * scale });
      assert.equal(r.exitCode, 0, r.output);
      assert.equal(r.startCwd, '/');
      assert.match(r.endCwd ?? '', /^\/.*tmp$/);
      assert.equal((await exec(key, 'pwd')).output, '/\n');
      const timedOut = await suite.envs.exec(key, { command: 'cd /tmp && sleep 30', timeoutMs: 1000 });
      assert.equal(timedOut.timedOut, true);
      assert.deepEqual([timedOut.startCwd, timedOut.endCwd], [undefined, undefined]);
    });

    it('merges stderr, passes stdin and reports signals as 128+n', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const r = await exec(key, 'echo out; echo err >&2; cat', { stdin: 'from stdin\n' });
      assert.equal(r.output, 'out\nerr\nfrom stdin\n');
      assert.equal((await exec(key, 'kill -9 $$')).exitCode, 137);
    });

    it('returns every byte of a large output', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const r = await exec(key, 'seq 1 150000; echo END');
      const lines = r.output.split('\n');
      assert.equal(lines[0], '1');
      assert.equal(lines[149_999], '150000');
      assert.equal(lines[150_000], 'END');
      assert.equal(r.exitCode, 0);
    });
  });
}

/** Timeouts (124) and interrupts (130) that kill the whole command. */
export function timeoutCases(suite: BackendSuite): void {
  const { scale, testTimeoutMs, newTask, exec, assertNoProcess } = suite;
  describe('timeouts and interrupts', () => {
    it('times out with 124, keeps partial output and leaves no process behind', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const child = uniqueSleepSeconds();
      const leader = child + 1;
      const r = await exec(key, `echo partial-output; sh -c 'sleep ${child}' & sleep ${leader}; echo never`, {
        timeoutMs: 1500 * scale,
      });
      assert.equal(r.exitCode, 124);
      assert.equal(r.timedOut, true);
      assert.match(r.output, /partial-output/);
      assert.doesNotMatch(r.output, /never/);
      await assertNoProcess(key, `${child}`, 'after a timeout');
      await assertNoProcess(key, `${leader}`, 'after a timeout');
      // The task still works, and the command's state was not saved over the old one.
      assert.equal((await exec(key, 'echo alive')).output, 'alive\n');
    });

    it('interrupts with 130 and kills the command', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const seconds = uniqueSleepSeconds();
      let ready!: () => void;
      const started = new Promise<void>((resolve) => (ready = resolve));
      let seen = '';
      const running = suite.envs.exec(key, {
        command: `echo ready; sleep ${seconds}`,
        timeoutMs: 60_000 * scale,
        onOutput: (text) => {
          seen += text;
          if (seen.includes('ready')) ready();
        },
      });
      await started;
      assert.equal(suite.envs.interrupt(key), 1);
      const r = await running;
      assert.deepEqual([r.exitCode, r.interrupted, r.timedOut], [130, true, false]);
      assert.match(r.output, /ready/);
      await assertNoProcess(key, `${seconds}`, 'after an interrupt');
    });
  });
}

/** A command under a terminal, when the backend has one. */
export function ptyCases(suite: BackendSuite, options: { readonly skipPty?: boolean }): void {
  const { name, testTimeoutMs, newTask, exec } = suite;
  describe('pty', () => {
    it('runs under a terminal when asked', { timeout: testTimeoutMs }, async (t) => {
      if (options.skipPty || !suite.capabilities.pty) {
        t.skip(`${name} has no PTY support`);
        return;
      }
      const key = newTask();
      const r = await exec(key, 'test -t 1 && echo is-a-tty; export BERTH_PTY_VAR=kept; exit 4', { pty: true });
      assert.equal(r.exitCode, 4);
      assert.match(r.output, /is-a-tty/);
      assert.equal((await exec(key, 'test -t 1 || echo not-a-tty; echo "$BERTH_PTY_VAR"')).output, 'not-a-tty\nkept\n');
    });
  });
}
