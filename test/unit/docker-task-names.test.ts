/** The docker executor's name key (docker.name_key_file): made once, kept private, read again after a restart. */
import assert from 'node:assert/strict';
import { chmod, mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { BerthError } from '../../services/common/errors.js';
import { TaskNames } from '../../services/executor/backends/docker/task-names.js';

const dirs: string[] = [];
async function tempDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-name-key-'));
  dirs.push(dir);
  return dir;
}
const key = { tenant: 'acme', taskId: 'build-1' };
const refused = (pattern: RegExp) => (err: unknown) => err instanceof BerthError && err.code === 'FAILED_PRECONDITION' && pattern.test(err.message);

describe('the name key file', () => {
  after(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  test('is made on the first start, 0600, and a restarted executor gets the same names from it', async () => {
    const file = path.join(await tempDir(), 'docker', 'name-key');
    const first = await TaskNames.load(file);
    assert.equal((await stat(file)).mode & 0o777, 0o600);
    assert.match((await readFile(file, 'utf8')).trim(), /^[0-9a-f]{64}$/);
    const again = await TaskNames.load(file);
    assert.equal(again.container(key), first.container(key));
    assert.deepEqual(again.volumes(key), first.volumes(key));
    const elsewhere = await TaskNames.load(path.join(await tempDir(), 'name-key'));
    assert.notEqual(elsewhere.container(key), first.container(key), 'another executor key, other names');
  });

  test('a key others can read, a symlink, or one too short stops the executor with what to do', async () => {
    const dir = await tempDir();
    const open = path.join(dir, 'open-key');
    await writeFile(open, `${'ab'.repeat(32)}\n`);
    await chmod(open, 0o644);
    await assert.rejects(TaskNames.load(open), refused(/only it can read \(chmod 600 .*open-key\)/));
    const link = path.join(dir, 'link-key');
    await symlink(open, link);
    await assert.rejects(TaskNames.load(link), refused(/must be a regular file/));
    const short = path.join(dir, 'short-key');
    await writeFile(short, 'abcd\n', { mode: 0o600 });
    await assert.rejects(TaskNames.load(short), refused(/at least 32 random bytes in hex \(e\.g\. `openssl rand -hex 32`\)/));
  });

  test('an operator-made key (openssl rand -hex 32) is used as it is', async () => {
    const file = path.join(await tempDir(), 'given-key');
    await writeFile(file, `${'0f'.repeat(32)}\n`, { mode: 0o600 });
    const names = await TaskNames.load(file);
    assert.equal(names.container(key), new TaskNames(Buffer.from('0f'.repeat(32), 'hex')).container(key));
  });
});
