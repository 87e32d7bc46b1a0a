/**
 * The one file-error mapper every backend uses: exact texts (the file tools
 * show them to the model), the gRPC class each maps to, and the `path`,
 * `op` and `reason` each carries.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  ResourceExhaustedError,
  UnavailableError,
} from '../../services/common/errors.js';
import {
  fileErrorFromErrno,
  fileErrorFromNode,
  isFileError,
  type FileOp,
} from '../../services/executor/backends/shared/file-errors.js';

const P = '/w/a.txt';

function mapped(errno: string, op: FileOp, detail?: string) {
  const err = fileErrorFromErrno(errno, P, op, detail);
  assert.ok(err, `${errno} was not mapped`);
  return err;
}

describe('file errors', () => {
  it('maps each errno to its text, class and reason, with path and op', () => {
    const cases: Array<[string, FileOp, string, new (...a: never[]) => Error, string]> = [
      ['ENOENT', 'read', `File not found: ${P}`, NotFoundError, 'not-found'],
      ['ENOTDIR', 'read', `File not found: ${P}`, NotFoundError, 'not-found'],
      ['ENOTDIR', 'write', `cannot create ${P}: a parent path is not a directory`, InvalidArgumentError, 'parent-not-directory'],
      ['EEXIST', 'write', `cannot create ${P}: a parent path is not a directory`, InvalidArgumentError, 'parent-not-directory'],
      ['EISDIR', 'read', `${P} is a directory`, InvalidArgumentError, 'is-directory'],
      ['EACCES', 'write', `Permission denied: ${P}`, PermissionDeniedError, 'permission-denied'],
      ['EPERM', 'read', `Permission denied: ${P}`, PermissionDeniedError, 'permission-denied'],
      ['EROFS', 'write', `Permission denied: ${P}`, PermissionDeniedError, 'permission-denied'],
      ['ENOSPC', 'write', `No space left to write ${P}`, ResourceExhaustedError, 'no-space'],
      ['EDQUOT', 'write', `No space left to write ${P}`, ResourceExhaustedError, 'no-space'],
    ];
    for (const [errno, op, message, cls, reason] of cases) {
      const err = mapped(errno, op);
      assert.equal(err.message, message, errno);
      assert.ok(err instanceof cls, `${errno}: ${err.constructor.name}`);
      assert.equal(err.path, P);
      assert.equal(err.op, op);
      assert.equal(err.reason, reason);
      assert.ok(isFileError(err));
    }
  });

  it('says what a special file is, and the size of a file too large', () => {
    assert.equal(
      mapped('ENOTREG', 'read', 'fifo').message,
      `${P} is not a regular file (it is a FIFO); the file tools only read and write regular files. ` +
        'Use the terminal for devices, FIFOs and sockets.',
    );
    assert.equal(mapped('ENOTREG', 'write', 'directory').message, `${P} is a directory`);
    assert.equal(mapped('ENXIO', 'write').message.includes('(it is a socket)'), true);
    const big = mapped('EFBIG', 'read', '9000000');
    assert.equal(
      big.message,
      `File too large to read: ${P} is 9,000,000 bytes; the file tools read files up to 8,388,608 bytes (8 MiB). ` +
        'Read parts of it with the terminal instead (head, tail, sed -n START,ENDp).',
    );
    assert.equal(big.reason, 'too-large');
    // No size said: the cap plus one, as when the file grew while read.
    assert.match(mapped('EFBIG', 'read', 'garbage').message, / is 8,388,609 bytes;/);
  });

  it('leaves an errno that is not about the file to the backend', () => {
    assert.equal(fileErrorFromErrno('EIO', P, 'read'), undefined);
    assert.equal(fileErrorFromErrno('toString', P, 'read'), undefined);
  });

  it('maps node errors, keeping the cause, and passes domain and unknown errors through', () => {
    const enoent = Object.assign(new Error('ENOENT: no such file'), { code: 'ENOENT' });
    const err = fileErrorFromNode(enoent, P, 'stat');
    assert.ok(isFileError(err));
    assert.equal(err.message, `File not found: ${P}`);
    assert.equal(err.op, 'stat');
    assert.equal(err.cause, enoent);
    const domain = new UnavailableError('gone');
    assert.equal(fileErrorFromNode(domain, P, 'read'), domain);
    const eio = Object.assign(new Error('EIO'), { code: 'EIO' });
    assert.equal(fileErrorFromNode(eio, P, 'read'), eio);
    assert.equal(isFileError(eio), false);
  });
});
