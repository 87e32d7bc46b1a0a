/**
 * The execute_code staging dir against a hostile sandbox user: the
 * directory renamed and replaced by a link mid-run, a planted stderr link,
 * a FIFO. Nothing outside the run dir may be written, read or given away.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, symlinkSync, writeFileSync, lstatSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { RunDir } from '../../services/executor/code-execution/run-dir.js';

describe('RunDir', () => {
  let root: string;
  let outside: string;

  before(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'berth-rundir-'));
    outside = path.join(root, 'outside');
    mkdirSync(outside);
    writeFileSync(path.join(outside, 'secret'), 'host secret');
  });

  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('is created private and refuses a name that exists', async () => {
    const dir = await RunDir.create(root, 'code-a');
    try {
      assert.equal(lstatSync(dir.hostPath).mode & 0o777, 0o700);
      await assert.rejects(RunDir.create(root, 'code-a'));
    } finally {
      await dir.remove();
    }
    assert.ok(!existsSync(path.join(root, 'code-a')));
  });

  it('keeps writing into its own directory after the name was swapped for a link', { skip: !existsSync('/proc/self/fd') }, async () => {
    const dir = await RunDir.create(root, 'code-b');
    // What a process in the sandbox could do between two of our steps.
    renameSync(dir.hostPath, path.join(root, 'moved-b'));
    symlinkSync(outside, dir.hostPath);
    await dir.writeNew('script.py', 'print(1)');
    assert.ok(!existsSync(path.join(outside, 'script.py')), 'nothing is written through the planted link');
    assert.equal(readFileSync(path.join(root, 'moved-b', 'script.py'), 'utf8'), 'print(1)');
    await dir.remove();
    assert.ok(existsSync(path.join(outside, 'secret')), 'removal does not follow the link');
  });

  it('reads stderr only from a regular file, never through a link or from a FIFO', async () => {
    const dir = await RunDir.create(root, 'code-c');
    try {
      symlinkSync(path.join(outside, 'secret'), path.join(dir.hostPath, 'stderr'));
      assert.equal((await dir.readHead('stderr', 100)).length, 0);
      execFileSync('mkfifo', [path.join(dir.hostPath, 'fifo')]);
      assert.equal((await dir.readHead('fifo', 100)).length, 0);
      writeFileSync(path.join(dir.hostPath, 'real'), 'E'.repeat(50));
      assert.equal((await dir.readHead('real', 10)).toString(), 'E'.repeat(10));
      assert.equal((await dir.readHead('missing', 10)).length, 0);
    } finally {
      await dir.remove();
    }
  });

  it('refuses to create a file over anything already there', async () => {
    const dir = await RunDir.create(root, 'code-d');
    try {
      symlinkSync(path.join(outside, 'secret'), path.join(dir.hostPath, 'hermes_tools.py'));
      await assert.rejects(dir.writeNew('hermes_tools.py', 'x'));
      assert.equal(readFileSync(path.join(outside, 'secret'), 'utf8'), 'host secret');
    } finally {
      await dir.remove();
    }
  });
});
