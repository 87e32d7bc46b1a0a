/**
 * The pure decisions behind read_file and write_file refusals: protected
 * write targets, read_file display text, device paths, binary naming.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sensitivePathError, writeDeniedError, type WriteTarget } from '../../services/dispatcher/tools/file/file-safety.js';
import {
  binaryExtension,
  describeBinaryFile,
  isBlockedDevicePath,
  looksBinary,
} from '../../services/dispatcher/tools/file/read-file.js';
import { isReadFileDisplayText } from '../../services/dispatcher/tools/file/write-file.js';

const HOME = '/home/agent';
const at = (absPath: string, realPath = absPath): WriteTarget => ({ absPath, realPath, home: HOME });

describe('sensitivePathError', () => {
  const text = (path: string): string =>
    `Refusing to write to sensitive system path: ${path}\nUse the terminal tool with sudo if you need to modify system files.`;

  it('refuses system prefixes and the docker socket, on the resolved target or the path as given', () => {
    assert.equal(sensitivePathError('/etc/hosts', at('/etc/hosts')), text('/etc/hosts'));
    assert.equal(sensitivePathError('/boot/x', at('/boot/x')), text('/boot/x'));
    assert.equal(sensitivePathError('/var/run/docker.sock', at('/var/run/docker.sock')), text('/var/run/docker.sock'));
    assert.equal(sensitivePathError('link', at('/w/link', '/usr/lib/systemd/system/x.service')), text('link'));
    assert.equal(sensitivePathError('/etc/../etc/passwd', at('/etc/passwd')), text('/etc/../etc/passwd'));
  });

  it('lets ordinary paths and look-alikes through', () => {
    assert.equal(sensitivePathError('/etcetera/x', at('/etcetera/x')), undefined);
    assert.equal(sensitivePathError('/w/etc/x', at('/w/etc/x')), undefined);
    assert.equal(sensitivePathError('/var/run/docker.sock.bak', at('/var/run/docker.sock.bak')), undefined);
  });
});

describe('writeDeniedError', () => {
  it('denies credential files and directories under the home, and the system ones', () => {
    for (const path of [
      `${HOME}/.ssh/authorized_keys`,
      `${HOME}/.ssh/config`,
      `${HOME}/.aws/credentials`,
      `${HOME}/.config/gh/hosts.yml`,
      `${HOME}/.netrc`,
      `${HOME}/.git-credentials`,
      `${HOME}/.bashrc`,
      '/etc/shadow',
      '/etc/sudoers.d/agent',
    ]) {
      assert.equal(writeDeniedError(path, at(path)), `Write denied: '${path}' is a protected system/credential file.`, path);
    }
    assert.equal(
      writeDeniedError('/w/x', at('/w/x', `${HOME}/.pgpass`), 'Move'),
      "Move denied: '/w/x' is a protected system/credential file.",
    );
    assert.match(String(writeDeniedError(`${HOME}/.kube/config`, at(`${HOME}/.kube/config`), 'Delete')), /^Delete denied: /);
  });

  it('allows the same names outside the home and when the home is unknown', () => {
    for (const path of ['/w/.npmrc', '/w/.ssh/id_rsa', `${HOME}/project/.aws/x`, `${HOME}/.sshx/y`, `${HOME}/.ssh`]) {
      assert.equal(writeDeniedError(path, at(path)), undefined, path);
    }
    assert.equal(writeDeniedError(`${HOME}/.netrc`, { absPath: `${HOME}/.netrc`, realPath: `${HOME}/.netrc`, home: undefined }), undefined);
  });
});

describe('isReadFileDisplayText', () => {
  it('recognises numbered read_file output and the dedup message', () => {
    assert.equal(isReadFileDisplayText('1|a\n2|b\n3|c'), true);
    assert.equal(isReadFileDisplayText('  10|x\n  11|y\n'), true);
    assert.equal(isReadFileDisplayText('1|a\n\n2|b\nplain'), true); // 2 of 3 non-empty lines numbered and consecutive
    assert.equal(
      isReadFileDisplayText(
        'Note: File unchanged since last read. The content from the earlier read_file result in this conversation is ' +
          'still current — refer to that instead of re-reading.',
      ),
      true,
    );
  });

  it('leaves real content alone', () => {
    assert.equal(isReadFileDisplayText('1|a'), false);
    assert.equal(isReadFileDisplayText('1|a\nb\nc\nd'), false);
    assert.equal(isReadFileDisplayText('1|a\n5|b'), false);
    assert.equal(isReadFileDisplayText('a|b\nc|d'), false);
    assert.equal(isReadFileDisplayText(''), false);
  });
});

describe('read_file name and content checks', () => {
  it('blocks devices and /proc secrets by name', () => {
    for (const path of ['/dev/zero', '/dev/tty', '/dev/fd/2', '/proc/self/environ', '/proc/12/task/13/maps', '/proc/1/fd/0']) {
      assert.equal(isBlockedDevicePath(path), true, path);
    }
    for (const path of ['/dev/null', '/dev/fd/3', '/proc/cpuinfo', '/w/proc/self/environ', '/proc/self/status']) {
      assert.equal(isBlockedDevicePath(path), false, path);
    }
  });

  it('finds binary extensions and names them as a suffix', () => {
    assert.equal(binaryExtension('a/b/photo.JPG'), '.jpg');
    assert.equal(binaryExtension('archive.tar.gz'), '.gz');
    assert.equal(binaryExtension('.dat'), '');
    assert.equal(binaryExtension('notes.txt'), undefined);
    assert.equal(binaryExtension('dir.png/readme'), undefined);
  });

  it('names binary content and formats its size', () => {
    assert.equal(describeBinaryFile(Buffer.from('%PDF-1.7'), 2048), 'Binary file (PDF document, 2.0 KB) — cannot display as text.');
    assert.equal(
      describeBinaryFile(Buffer.from('0000001866747970', 'hex'), 3 * 1024 * 1024),
      'Binary file (ISO media container (MP4/MOV family), 3.0 MB) — cannot display as text.',
    );
    assert.equal(describeBinaryFile(Buffer.from('000000ff', 'hex'), 10), 'Binary file (unknown binary, 10 bytes) — cannot display as text.');
  });

  it('treats NUL and broken UTF-8 as binary, except a sequence cut at the end of the sample', () => {
    assert.equal(looksBinary(Buffer.from('plain text')), false);
    assert.equal(looksBinary(Buffer.from('a\0b')), true);
    assert.equal(looksBinary(Buffer.from([0x61, 0xff, 0x61, 0x61, 0x61, 0x61])), true);
    assert.equal(looksBinary(Buffer.concat([Buffer.from('abc'), Buffer.from('€').subarray(0, 2)])), false);
    assert.equal(looksBinary(Buffer.alloc(0)), false);
  });
});
