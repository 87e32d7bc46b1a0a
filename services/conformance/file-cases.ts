/**
 * Conformance cases of files: writes, reads and stats (spaces in names,
 * binary and large content, relative paths), atomic writes through
 * symlinks, failed writes, and the refusals that keep the executor bounded
 * (devices, FIFOs, sockets, files over the read cap), through the
 * environment and through the dispatcher's file tools.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { BerthError } from '../common/errors.js';
import { silentLogger } from '../common/logging.js';
import type { TaskClient } from '../common/task-client.js';
import type { TaskKey } from '../executor/backend.js';
import type { ToolContext } from '../dispatcher/registry/tool-types.js';
import { fileToolRegistrations } from '../dispatcher/tools/file-tools.js';
import type { BackendSuite } from './backend-suite.js';

/** File operations and their refusals. */
export function fileCases(suite: BackendSuite): void {
  const { name, tenant, testTimeoutMs, newTask, exec } = suite;
  describe('files', () => {
    const tempDir = async (key: TaskKey) => {
      const r = await exec(key, 'mktemp -d');
      assert.equal(r.exitCode, 0, r.output);
      return r.output.trim();
    };
    const sha256 = (data: Uint8Array) => createHash('sha256').update(data).digest('hex');

    it('writes, reads and stats files, with spaces in names', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const dir = await tempDir(key);
      const file = `${dir}/a dir/with space's name.txt`;
      const written = await suite.envs.writeFile(key, file, 'line one\nline two\n');
      assert.deepEqual(written, { absPath: file, bytesWritten: 18, dirsCreated: true });
      assert.equal((await suite.envs.readFile(key, file)).content.toString('utf8'), 'line one\nline two\n');
      assert.deepEqual(await suite.envs.stat(key, file), { absPath: file, exists: true, isDirectory: false, sizeBytes: 18 });
      assert.equal((await suite.envs.stat(key, `${dir}/a dir`)).isDirectory, true);
      assert.equal((await suite.envs.stat(key, `${dir}/missing`)).exists, false);
      // What the file tools write, the shell sees, and the other way round.
      assert.equal((await exec(key, `cat "${dir}/a dir/with space's name.txt"`)).output, 'line one\nline two\n');
      await exec(key, `cd "${dir}/a dir" && printf 'from shell' > 'shell file.txt'`);
      assert.equal((await suite.envs.readFile(key, 'shell file.txt')).content.toString(), 'from shell');
      const relative = await suite.envs.writeFile(key, 'relative.txt', 'r');
      assert.equal(relative.absPath, `${dir}/a dir/relative.txt`);
    });

    it('rejects a missing file with NOT_FOUND', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const dir = await tempDir(key);
      await assert.rejects(suite.envs.readFile(key, `${dir}/nope.txt`), (err: unknown) => {
        assert.ok(err instanceof BerthError, String(err));
        assert.equal(err.code, 'NOT_FOUND');
        return true;
      });
    });

    it('keeps binary content and a 5 MB file intact', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const dir = await tempDir(key);
      const binary = Buffer.alloc(256 * 4);
      for (let i = 0; i < binary.length; i++) binary[i] = i % 256;
      await suite.envs.writeFile(key, `${dir}/bytes.bin`, binary);
      assert.deepEqual((await suite.envs.readFile(key, `${dir}/bytes.bin`)).content, binary);
      assert.equal((await exec(key, `sha256sum < ${dir}/bytes.bin`)).output.split(' ')[0], sha256(binary));

      const big = randomBytes(5 * 1024 * 1024);
      await suite.envs.writeFile(key, `${dir}/big.bin`, big);
      assert.equal((await suite.envs.stat(key, `${dir}/big.bin`)).sizeBytes, big.length);
      assert.equal((await exec(key, `sha256sum < ${dir}/big.bin`)).output.split(' ')[0], sha256(big));
      const back = (await suite.envs.readFile(key, `${dir}/big.bin`)).content;
      assert.equal(back.length, big.length);
      assert.equal(sha256(back), sha256(big));
      await exec(key, `head -c 3000000 /dev/urandom > ${dir}/from-shell.bin`);
      const fromShell = (await suite.envs.readFile(key, `${dir}/from-shell.bin`)).content;
      assert.equal((await exec(key, `sha256sum < ${dir}/from-shell.bin`)).output.split(' ')[0], sha256(fromShell));
    });

    it('writes atomically: a new inode with the old mode, through a symlink', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const dir = await tempDir(key);
      await suite.envs.writeFile(key, `${dir}/f.txt`, 'old\n');
      const before = await exec(key, `cd ${dir} && chmod 754 f.txt && ln -s f.txt link && ln f.txt hard && stat -c %i f.txt`);
      assert.equal(before.exitCode, 0, before.output);
      const written = await suite.envs.writeFile(key, `${dir}/f.txt`, 'new content\n');
      assert.deepEqual(written, { absPath: `${dir}/f.txt`, bytesWritten: 12, dirsCreated: false });
      const after = await exec(key, `cd ${dir} && stat -c '%a %i' f.txt && cat f.txt hard`);
      const [mode, inode] = after.output.split('\n')[0]!.split(' ');
      assert.equal(mode, '754');
      assert.notEqual(inode, before.output.trim(), 'the write replaced the file (rename), not rewrote it in place');
      // A hard link keeps the old file: the rename gives the path a new inode (as upstream's mv -f does).
      assert.equal(after.output.split('\n').slice(1).join('\n'), 'new content\nold\n');

      // Through a symlink: the link's target is replaced, the link stays a link to it.
      await suite.envs.writeFile(key, `${dir}/link`, 'via link\n');
      const link = await exec(key, `cd ${dir} && [ -L link ] && readlink link && cat f.txt && stat -c %a f.txt`);
      assert.equal(link.output, 'f.txt\nvia link\n754\n');
      // A dangling link: the file is made where it points.
      await exec(key, `cd ${dir} && mkdir sub && ln -s sub/made.txt dangling`);
      await suite.envs.writeFile(key, `${dir}/dangling`, 'made\n');
      assert.equal((await exec(key, `cd ${dir} && [ -L dangling ] && cat sub/made.txt`)).output, 'made\n');
      assert.equal((await exec(key, `ls -A ${dir} ${dir}/sub | grep -c '^\\..*\\.berth-'`)).output, '0\n', 'no temp file is left');
    });

    it('a write that fails leaves the old content and no temp file', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const dir = await tempDir(key);
      await suite.envs.writeFile(key, `${dir}/locked/f.txt`, 'old\n');
      // The temp file cannot be made beside the file: a directory we may not write (root ignores
      // the mode bits, so as root it is made immutable instead).
      const lock = await exec(
        key,
        `cd ${dir} && if [ "$(id -u)" = 0 ]; then chattr +i locked; else chmod 555 locked; fi && echo locked`,
      );
      assert.equal(lock.output, 'locked\n', `cannot lock a directory in ${name}: ${lock.output}`);
      try {
        await assert.rejects(suite.envs.writeFile(key, `${dir}/locked/f.txt`, 'new\n'), (err: unknown) => {
          assert.ok(err instanceof BerthError, String(err));
          assert.equal(err.code, 'PERMISSION_DENIED', err.message);
          assert.equal(err.message, `Permission denied: ${dir}/locked/f.txt`);
          return true;
        });
        assert.equal((await exec(key, `cat ${dir}/locked/f.txt; ls -A ${dir}/locked`)).output, 'old\nf.txt\n');
      } finally {
        await exec(key, `cd ${dir} && if [ "$(id -u)" = 0 ]; then chattr -i locked; else chmod 755 locked; fi`);
      }
    });

    /** Asserts that `promise` is refused with INVALID_ARGUMENT and a message matching `pattern`. */
    const refused = (promise: Promise<unknown>, pattern: RegExp) =>
      assert.rejects(promise, (err: unknown) => {
        assert.ok(err instanceof BerthError, String(err));
        assert.equal(err.code, 'INVALID_ARGUMENT', err.message);
        assert.match(err.message, pattern);
        return true;
      });

    // Each of these once grew the executor without bound or hung the call (a FIFO without a writer).
    it('refuses to read or write a character device', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      await refused(suite.envs.readFile(key, '/dev/zero'), /\/dev\/zero is not a regular file \(it is a character device\)/);
      await refused(suite.envs.writeFile(key, '/dev/null', 'x'), /\/dev\/null is not a regular file/);
      // The environment keeps serving.
      assert.equal((await exec(key, 'echo still here')).output, 'still here\n');
    });

    it('refuses a FIFO without opening it for long', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const dir = await tempDir(key);
      assert.equal((await exec(key, `mkfifo ${dir}/pipe && echo made`)).output, 'made\n');
      await refused(suite.envs.readFile(key, `${dir}/pipe`), /pipe is not a regular file \(it is a FIFO\)/);
      await refused(suite.envs.writeFile(key, `${dir}/pipe`, 'x'), /pipe is not a regular file \(it is a FIFO\)/);
      assert.equal((await exec(key, `[ -p ${dir}/pipe ] && echo still a fifo`)).output, 'still a fifo\n');
    });

    it('refuses a Unix socket', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const dir = await tempDir(key);
      // python3 where the image has it, else perl (an image without python3 still has perl-base).
      const bind =
        `if command -v python3 >/dev/null; then python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' ${dir}/sock; ` +
        `else perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Local => $ARGV[0], Listen => 1) or die "$!"' ${dir}/sock; fi`;
      const made = await exec(key, `${bind} && [ -S ${dir}/sock ] && echo made`);
      assert.equal(made.output, 'made\n', `cannot make a socket in ${name}: ${made.output}`);
      await refused(suite.envs.readFile(key, `${dir}/sock`), /sock is not a regular file \(it is a socket\)/);
      await refused(suite.envs.writeFile(key, `${dir}/sock`, 'x'), /sock is not a regular file/);
    });

    it('the file tools refuse a FIFO and a device, and search_files passes a FIFO by', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const dir = await tempDir(key);
      await exec(key, `mkfifo ${dir}/pipe && printf 'beside the pipe\\n' > ${dir}/text.txt`);
      // The dispatcher's own tools, on this backend's environment: what a model's call does.
      const task: TaskClient = {
        exec: (request) => suite.envs.exec(key, request),
        readFile: (path) => suite.envs.readFile(key, path),
        writeFile: (path, content) => suite.envs.writeFile(key, path, content),
        stat: (path) => suite.envs.stat(key, path),
        startBackground: (request) => suite.envs.startBackground(key, request),
        process: (request) => suite.envs.process(key, request),
      };
      const context: ToolContext = { tenant, taskId: key.taskId, sessionId: 's', task, signal: new AbortController().signal, logger: silentLogger() };
      const call = async (tool: string, args: Record<string, unknown>) => {
        const registration = fileToolRegistrations().find((r) => r.name === tool);
        assert.ok(registration, tool);
        return JSON.parse(await registration.handler(args, context)) as Record<string, unknown>;
      };
      assert.equal(
        (await call('read_file', { path: `${dir}/pipe` })).error,
        `Cannot read '${dir}/pipe': not a regular file (directory, FIFO, socket, or device). Reading it could block indefinitely.`,
      );
      // /dev/zero is refused by name; /dev/null is not on that list, so the environment's own check answers.
      assert.equal(
        (await call('read_file', { path: '/dev/zero' })).error,
        "Cannot read '/dev/zero': this is a device file that would block or produce infinite output.",
      );
      assert.equal(
        (await call('read_file', { path: '/dev/null' })).error,
        "Cannot read '/dev/null': not a regular file (directory, FIFO, socket, or device). Reading it could block indefinitely.",
      );
      assert.match(String((await call('write_file', { path: `${dir}/pipe`, content: 'x' })).error), /pipe is not a regular file/);
      const found = await call('search_files', { pattern: 'beside', path: dir });
      assert.deepEqual(found.matches, [{ path: `${dir}/text.txt`, line: 1, content: 'beside the pipe' }]);
      assert.match(String((await call('search_files', { pattern: 'x', path: `${dir}/pipe` })).error), /is not a regular file or directory/);
    });

    it('refuses a file over the read cap from its size, sparse or not', { timeout: testTimeoutMs }, async () => {
      const key = newTask();
      const dir = await tempDir(key);
      // 64 GiB of holes: reading it whole is what must not happen.
      assert.equal((await exec(key, `truncate -s 64G ${dir}/sparse && echo made`)).output, 'made\n');
      await refused(suite.envs.readFile(key, `${dir}/sparse`), /File too large to read: .*sparse is 68,719,476,736 bytes; the file tools read files up to 8,388,608 bytes/);
      assert.equal((await suite.envs.stat(key, `${dir}/sparse`)).sizeBytes, 64 * 1024 ** 3);
      // One byte over the cap is refused; the cap itself is read whole.
      await exec(key, `head -c 8388609 /dev/urandom > ${dir}/over.bin && head -c 8388608 ${dir}/over.bin > ${dir}/cap.bin`);
      await refused(suite.envs.readFile(key, `${dir}/over.bin`), /over\.bin is 8,388,609 bytes/);
      assert.equal((await suite.envs.readFile(key, `${dir}/cap.bin`)).content.length, 8 * 1024 * 1024);
    });
  });
}
