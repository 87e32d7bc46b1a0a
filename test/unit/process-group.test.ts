/**
 * The shared process-group kit for backends without the exec agent: the
 * kill script (as argv) and the signal table.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { killGroupArgv, signalExitCode, signalNumber } from '../../services/executor/backends/shared/process-group.js';

const groupGone = (pgid: number) =>
  spawnSync('ps', ['-o', 'stat=', '-g', String(pgid)], { encoding: 'utf8' })
    .stdout.trim()
    .split('\n')
    .every((s) => s === '' || s.startsWith('Z'));

describe('process-group kit', () => {
  it('signal names, with or without SIG, map to Linux numbers and exits to 128 + n', () => {
    assert.equal(signalNumber('TERM'), 15);
    assert.equal(signalNumber('SIGTERM'), 15);
    assert.equal(signalNumber('SIGKILL'), 9);
    assert.equal(signalNumber('SEGV'), 11);
    assert.equal(signalNumber('SIGNOPE'), undefined);
    assert.equal(signalNumber('toString'), undefined);
    assert.equal(signalExitCode('SIGINT'), 130);
    assert.equal(signalExitCode('PIPE'), 141);
    assert.equal(signalExitCode('WEIRD'), 128);
    assert.equal(signalExitCode(null), 128);
  });

  it('pins the kill argv: group id as $1, grace in 50 ms steps, the exit file as $2', () => {
    const argv = killGroupArgv(42, 100);
    assert.deepEqual(argv.slice(0, 2), ['bash', '-c']);
    assert.deepEqual(argv.slice(3), ['berth', '42']);
    assert.match(argv[2] ?? '', /^p=\$1\n/);
    assert.match(argv[2] ?? '', /for \(\(i = 0; i < 2; i\+\+\)\)/);
    assert.deepEqual(killGroupArgv(42, 100, '/x/exit').slice(3), ['berth', '42', '/x/exit']);
    assert.throws(() => killGroupArgv(1, 100), /refusing to kill process group 1/);
    assert.throws(() => killGroupArgv(0, 100), /refusing/);
    assert.throws(() => killGroupArgv(-7, 100), /refusing/);
  });

  it('kills a whole group, a member ignoring SIGTERM too, and writes 137 to the exit file', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'berth-kill-'));
    try {
      const group = spawn('bash', ['-c', 'trap "" TERM; sleep 60 & sleep 60'], { detached: true, stdio: 'ignore' });
      const pgid = group.pid ?? 0;
      const exited = new Promise((resolve) => group.once('exit', resolve));
      await new Promise((resolve) => setTimeout(resolve, 300));
      const exitFile = path.join(dir, 'exit');
      const [bin = 'bash', ...args] = killGroupArgv(pgid, 100, exitFile);
      const r = spawnSync(bin, args, { encoding: 'utf8', timeout: 10_000 });
      assert.equal(r.status, 0, r.stderr);
      await exited;
      assert.ok(groupGone(pgid), 'a member of the group is still running');
      assert.equal(readFileSync(exitFile, 'utf8'), '137\n');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a group that is already gone is not an error, and no exit file is written', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'berth-kill-'));
    try {
      const done = spawnSync('bash', ['-c', 'echo $$'], { encoding: 'utf8' });
      const pgid = Number(done.stdout.trim());
      const exitFile = path.join(dir, 'exit');
      const [bin = 'bash', ...args] = killGroupArgv(pgid, 50, exitFile);
      assert.equal(spawnSync(bin, args, { encoding: 'utf8' }).status, 0);
      assert.equal(existsSync(exitFile), false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
