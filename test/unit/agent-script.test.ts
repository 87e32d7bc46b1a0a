/**
 * Staging the exec agent's file for a sandbox: content-addressed, readable
 * by any user, never half-written, never changed under a sandbox that uses
 * another version.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { agentDigest, findAgentScript, stageAgentScript } from '../../services/executor/backends/shared/agent-script.js';

describe('stageAgentScript', () => {
  let dir: string;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'berth-agent-script-'));
  });

  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("finds this package's berth_agent.py", async () => {
    assert.match(await readFile(findAgentScript(), 'utf8'), /^#!\/usr\/bin\/env python3\n"""Berth's exec agent/);
  });

  it('copies the file under its content hash, readable by every user, and keeps one copy per version', async () => {
    const v1 = path.join(dir, 'v1.py');
    const v2 = path.join(dir, 'v2.py');
    await writeFile(v1, 'print("one")\n');
    await writeFile(v2, 'print("two")\n');
    const root = path.join(dir, 'staged');
    const a = await stageAgentScript(v1, root);
    const again = await stageAgentScript(v1, root);
    const b = await stageAgentScript(v2, root);
    assert.equal(a.digest, createHash('sha256').update('print("one")\n').digest('hex').slice(0, 16));
    assert.equal(a.dir, path.join(root, a.digest));
    assert.equal(a.file, path.join(root, a.digest, 'berth_agent.py'));
    assert.deepEqual(again, a);
    assert.notEqual(b.dir, a.dir);
    assert.equal(await readFile(a.file, 'utf8'), 'print("one")\n');
    assert.equal(await readFile(b.file, 'utf8'), 'print("two")\n');
    assert.equal((await stat(a.dir)).mode & 0o777, 0o755);
    assert.equal((await stat(a.file)).mode & 0o777, 0o644);
    // Nothing else is left in a staged directory (no temporary files).
    assert.deepEqual(await readdir(a.dir), ['berth_agent.py']);
  });

  it('replaces a damaged staged copy', async () => {
    const source = path.join(dir, 'v3.py');
    await writeFile(source, 'print("three")\n');
    const root = path.join(dir, 'damaged');
    const staged = await stageAgentScript(source, root);
    await writeFile(staged.file, 'print("tampered")\n');
    await stageAgentScript(source, root);
    assert.equal(await readFile(staged.file, 'utf8'), 'print("three")\n');
    assert.equal(agentDigest(await readFile(staged.file)), staged.digest);
  });
});
