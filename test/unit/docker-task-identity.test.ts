/** Per-task uids on the docker backend: the range, the candidates, the account files, the host check, the image's files. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type Dockerode from 'dockerode';
import { BerthError } from '../../services/common/errors.js';
import { silentLogger } from '../../services/common/logging.js';
import { firstTarEntry } from '../../services/executor/backends/docker/image-accounts.js';
import {
  DEFAULT_TASK_UIDS,
  candidateUid,
  daemonRemapsIds,
  hostIdConflicts,
  parseRecordedUid,
  parseUidRange,
  taskAccounts,
  type HostIdFiles,
} from '../../services/executor/backends/docker/task-identity.js';
import { TaskUids } from '../../services/executor/backends/docker/task-uids.js';

const range = parseUidRange(DEFAULT_TASK_UIDS);

describe('docker.task_uids', () => {
  test('the default: 2^24 ids no distribution gives an account, below what software reads as negative', () => {
    assert.deepEqual(range, { first: 1_900_000_000, last: 1_916_777_215 });
    assert.equal(range.last - range.first + 1, 2 ** 24);
  });

  test('a malformed or unsafe range is refused naming the key', () => {
    const refused = (text: string, pattern: RegExp) =>
      assert.throws(() => parseUidRange(text), (err: unknown) => err instanceof BerthError && /docker\.task_uids/.test(err.message) && pattern.test(err.message));
    refused('1900000000', /FIRST-LAST/);
    refused('5-3', /1 <= FIRST <= LAST/);
    refused('0-10', /1 <= FIRST <= LAST/);
    refused('2000000000-2147483647', /<= 2147483646/);
    refused('500-2000', /holds uid 1000, the image's own sandbox user/);
    assert.deepEqual(parseUidRange(' 200000 - 265535 '), { first: 200_000, last: 265_535 });
  });

  test('candidates: in the range, the same for the same container on every executor, spread over tasks', () => {
    const seen = new Set<number>();
    for (let i = 0; i < 1000; i++) {
      const uid = candidateUid(range, `berth-task-${i}`, 0);
      assert.ok(uid >= range.first && uid <= range.last);
      seen.add(uid);
    }
    assert.equal(seen.size, 1000, 'no two of a thousand tasks share a first choice');
    assert.equal(candidateUid(range, 'berth-abc', 0), candidateUid(range, 'berth-abc', 0));
    assert.notEqual(candidateUid(range, 'berth-abc', 0), candidateUid(range, 'berth-abc', 1));
    const tiny = parseUidRange('5000-5002');
    assert.deepEqual(new Set([0, 1, 2].map((attempt) => candidateUid(tiny, 'x', attempt))), new Set([5000, 5001, 5002]), 'a small range is tried whole');
  });

  test('a recorded uid counts only when it is one of the range', () => {
    assert.equal(parseRecordedUid('1900000042', range), 1_900_000_042);
    assert.equal(parseRecordedUid('1000', range), undefined);
    assert.equal(parseRecordedUid('1900000042 ', range), undefined);
    assert.equal(parseRecordedUid(undefined, range), undefined);
    assert.equal(parseRecordedUid('', range), undefined);
  });
});

describe('taskAccounts', () => {
  const identity = { uid: 1_900_000_007, gid: 1_900_000_007 };
  const imagePasswd = [
    'root:x:0:0:root:/root:/bin/bash',
    'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin',
    'sandbox:x:1000:1000::/home/sandbox:/bin/bash',
    '',
  ].join('\n');
  const imageGroup = ['root:x:0:', 'users:x:100:sandbox', 'sandbox:x:1000:', ''].join('\n');

  test("the image's uid-1000 account moves to the task's ids, keeping its name; every other entry stays", () => {
    const files = taskAccounts({ passwd: imagePasswd, group: imageGroup }, identity, '/home/sandbox');
    assert.deepEqual(files.passwd.split('\n'), [
      'root:x:0:0:root:/root:/bin/bash',
      'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin',
      'sandbox:x:1900000007:1900000007::/home/sandbox:/bin/bash',
      '',
    ]);
    assert.deepEqual(files.group.split('\n'), ['root:x:0:', 'users:x:100:sandbox', 'sandbox:x:1900000007:', '']);
  });

  test("another image's name for uid 1000 is kept (whoami said it before), with the configured home", () => {
    const files = taskAccounts(
      { passwd: 'root:x:0:0::/root:/bin/sh\nubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/sh\n', group: 'ubuntu:x:1000:\n' },
      identity,
      '/home/sandbox',
    );
    assert.match(files.passwd, /^ubuntu:x:1900000007:1900000007:Ubuntu:\/home\/sandbox:\/bin\/sh$/m);
    assert.match(files.group, /^ubuntu:x:1900000007:$/m);
  });

  test('an image without the account, or without the files, gets a sandbox account; nothing else keeps the ids', () => {
    const bare = taskAccounts({}, identity, '/home/sandbox');
    assert.equal(bare.passwd, 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:1900000007:1900000007::/home/sandbox:/bin/bash\n');
    assert.equal(bare.group, 'root:x:0:\nsandbox:x:1900000007:\n');
    const squatted = taskAccounts(
      { passwd: 'root:x:0:0::/root:/bin/sh\nother:x:1900000007:5::/:/bin/sh\n', group: 'other:x:1900000007:\n' },
      identity,
      '/home/sandbox',
    );
    assert.doesNotMatch(squatted.passwd, /^other:/m);
    assert.doesNotMatch(squatted.group, /^other:/m);
  });
});

describe('hostIdConflicts', () => {
  const small = parseUidRange('200000-265535');

  test('accounts, groups and subordinate ranges of the host inside the range are named; others are not', () => {
    const conflicts = hostIdConflicts(
      small,
      {
        passwd: 'root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\nsvc:x:200010:200010::/:/bin/false\n',
        group: 'svc:x:200010:\n',
        subuid: 'alice:100000:65536\nbob:165536:65536\n',
        subgid: 'carol:300000:65536\n',
      },
      0,
    );
    assert.deepEqual(conflicts, ['/etc/passwd: svc (200010)', '/etc/group: svc (200010)', '/etc/subuid: bob (165536-231071)']);
  });

  test("the executor's own uid counts; this machine's files leave the default range free", () => {
    assert.deepEqual(hostIdConflicts(small, {}, 200_001), ["the executor's own uid (200001)"]);
    assert.deepEqual(hostIdConflicts(range, { passwd: 'cloudsdk:x:1000:1000::/home/c:/bin/bash\nnobody:x:65534:65534::/:/bin/false\n' }), []);
  });
});

/** A ustar header block for `name` with `typeflag` and `size`, then the data padded to 512 bytes. */
function tarEntry(name: string, typeflag: string, data: Buffer, linkName = ''): Buffer {
  const header = Buffer.alloc(512);
  header.write(name, 0, 'utf8');
  header.write('0000644\0', 100);
  header.write(`${data.length.toString(8).padStart(11, '0')}\0`, 124);
  header.write(typeflag, 156);
  header.write(linkName, 157);
  header.write('ustar\0', 257);
  return Buffer.concat([header, data, Buffer.alloc((512 - (data.length % 512)) % 512)]);
}

describe('firstTarEntry (the archive Docker returns for one path)', () => {
  test('a regular file, after PAX records', () => {
    const pax = Buffer.from('30 mtime=1700000000.123456789\n');
    const archive = Buffer.concat([
      tarEntry('PaxHeaders/passwd', 'x', pax),
      tarEntry('passwd', '0', Buffer.from('root:x:0:0::/root:/bin/sh\n')),
      Buffer.alloc(1024),
    ]);
    const entry = firstTarEntry(archive);
    assert.equal(entry.type, 'file');
    assert.equal(entry.data.toString(), 'root:x:0:0::/root:/bin/sh\n');
  });

  test('a symlink names its target; a truncated or empty archive is an error', () => {
    assert.deepEqual(firstTarEntry(Buffer.concat([tarEntry('passwd', '2', Buffer.alloc(0), '../usr/share/passwd'), Buffer.alloc(1024)])), {
      type: 'symlink',
      linkTarget: '../usr/share/passwd',
      data: Buffer.alloc(0),
    });
    assert.throws(() => firstTarEntry(tarEntry('passwd', '0', Buffer.alloc(600)).subarray(0, 700)), /truncated/);
    assert.throws(() => firstTarEntry(Buffer.alloc(1024)), /empty/);
  });
});

describe('TaskUids: the range in force, settled with the daemon', () => {
  /** A test double for the one call made here: a rootless or userns-remap daemon cannot run on this machine. */
  const daemonDouble = (securityOptions: string[]) => ({ info: async () => ({ SecurityOptions: securityOptions }) }) as unknown as Dockerode;
  const uids = (securityOptions: string[], configured = '', hostIdFiles: HostIdFiles = {}) =>
    new TaskUids({ docker: daemonDouble(securityOptions), daemon: 'the daemon', configured, logger: silentLogger(), hostIdFiles: async () => hostIdFiles });

  test('a daemon that remaps container ids is recognised by its security options', () => {
    assert.equal(daemonRemapsIds(['name=seccomp,profile=default', 'name=rootless']), true);
    assert.equal(daemonRemapsIds(['name=userns']), true);
    assert.equal(daemonRemapsIds(['name=seccomp,profile=default', 'name=cgroupns']), false);
    assert.equal(daemonRemapsIds(undefined), false);
  });

  test('unset: the default, or ids inside the usual 65536 under a remapping daemon', async () => {
    assert.deepEqual(await uids(['name=seccomp,profile=default']).range(), range);
    assert.deepEqual(await uids(['name=rootless']).range(), { first: 10_000, last: 65_533 });
  });

  test('a set range must fit a remapping daemon, and must meet no host id elsewhere', async () => {
    await assert.rejects(uids(['name=userns'], '1900000000-1900000100').range(), /does not fit the daemon, which maps containers' ids into a range of its own/);
    assert.deepEqual(await uids(['name=userns'], '20000-30000').range(), { first: 20_000, last: 30_000 });
    await assert.rejects(
      uids([], '200000-300000', { subuid: 'alice:250000:65536\n' }).range(),
      /docker\.task_uids \(200000-300000\) holds ids this host uses: \/etc\/subuid: alice \(250000-315535\)/,
    );
    assert.throws(() => uids([], 'lots'), /docker\.task_uids: "lots" is not FIRST-LAST/);
  });
});
