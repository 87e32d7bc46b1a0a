/**
 * The exec agent's archive, and staging it for a sandbox: content-addressed, readable
 * by any user, never half-written, never changed under a sandbox that uses
 * another version.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { AGENT_FILE_NAME, agentDigest, findAgentScript, stageAgentScript } from '../../services/executor/backends/shared/agent/agent-script.js';
import { AGENT_SOURCE_DIR } from '../support/agent-variant.js';
import { realPython } from '../support/python-bin.js';

describe('the agent archive', () => {
  let dir: string;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'berth-agent-script-'));
  });

  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("finds this installation's agent archive: the entry point and the package, nothing else", () => {
    const archive = findAgentScript();
    assert.equal(path.basename(archive), AGENT_FILE_NAME);
    const list = 'import sys, zipfile; print("\\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))';
    const names = execFileSync(realPython(), ['-c', list, archive], { encoding: 'utf8' }).trim().split('\n');
    assert.equal(names[0], '__main__.py');
    assert.ok(names.includes('berth_agent/__init__.py'), names.join(' '));
    assert.deepEqual(names.slice(1).filter((n) => !/^berth_agent\/[a-z_]+\.py$/.test(n)), []);
    assert.deepEqual([...names].sort(), names);
  });

  it('builds the same bytes from the same sources, so the hash names one agent wherever it was built', async () => {
    const again = path.join(dir, 'again.pyz');
    execFileSync(realPython(), [path.join(AGENT_SOURCE_DIR, 'build.py'), again], { stdio: 'ignore' });
    assert.equal(agentDigest(await readFile(again)), agentDigest(await readFile(findAgentScript())));
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
    assert.equal(a.file, path.join(root, a.digest, AGENT_FILE_NAME));
    assert.deepEqual(again, a);
    assert.notEqual(b.dir, a.dir);
    assert.equal(await readFile(a.file, 'utf8'), 'print("one")\n');
    assert.equal(await readFile(b.file, 'utf8'), 'print("two")\n');
    assert.equal((await stat(a.dir)).mode & 0o777, 0o755);
    assert.equal((await stat(a.file)).mode & 0o777, 0o644);
    // Nothing else is left in a staged directory (no temporary files).
    assert.deepEqual(await readdir(a.dir), [AGENT_FILE_NAME]);
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
