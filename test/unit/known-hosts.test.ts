import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import {
  checkHostKey,
  fingerprintSha256,
  formatKnownHostsLine,
  hostFieldMatches,
  hostKeyAlgorithmsFor,
  KnownHostsFile,
  keyTypeOf,
  knownHostsName,
  parseKnownHosts,
  pinnedKeyTypes,
} from '../../services/executor/backends/ssh/known-hosts.js';

/** An SSH key blob: string type, then opaque bytes. */
function blob(type: string, fill: number): Buffer {
  const name = Buffer.from(type);
  const header = Buffer.alloc(4);
  header.writeUInt32BE(name.length);
  return Buffer.concat([header, name, Buffer.alloc(32, fill)]);
}

const keyA = blob('ssh-ed25519', 1);
const keyB = blob('ssh-ed25519', 2);
const rsa = blob('ssh-rsa', 3);

describe('known_hosts', () => {
  it('names hosts as OpenSSH does', () => {
    assert.equal(knownHostsName('Example.COM', 22), 'example.com');
    assert.equal(knownHostsName('10.0.0.1', 2222), '[10.0.0.1]:2222');
  });

  it('reads the key type from the blob and fingerprints like ssh-keygen', () => {
    assert.equal(keyTypeOf(keyA), 'ssh-ed25519');
    assert.equal(keyTypeOf(rsa), 'ssh-rsa');
    assert.throws(() => keyTypeOf(Buffer.from([0, 0, 0, 99, 1])), /malformed/);
    assert.match(fingerprintSha256(keyA), /^SHA256:[A-Za-z0-9+/]{43}$/);
  });

  it('formats and parses lines, skipping comments, blanks and malformed ones', () => {
    const line = formatKnownHostsLine('h', 2200, keyA);
    assert.equal(line, `[h]:2200 ssh-ed25519 ${keyA.toString('base64')}`);
    const entries = parseKnownHosts(`# comment\n\n${line}\nbroken-line\n@revoked * ssh-ed25519 ${keyB.toString('base64')}\n`);
    assert.equal(entries.length, 2);
    assert.deepEqual(
      entries.map((e) => [e.marker, e.hosts, e.keyType, e.line]),
      [
        [undefined, '[h]:2200', 'ssh-ed25519', 3],
        ['revoked', '*', 'ssh-ed25519', 5],
      ],
    );
  });

  it('matches patterns, lists, negations and hashed names', () => {
    assert.ok(hostFieldMatches('a.example,b.example', 'b.example', 22));
    assert.ok(hostFieldMatches('*.example', 'x.example', 22));
    assert.ok(!hostFieldMatches('*.example,!bad.example', 'bad.example', 22));
    assert.ok(hostFieldMatches('host?', 'host1', 22));
    assert.ok(!hostFieldMatches('host', 'host', 2222), 'a non-default port needs [host]:port');
    assert.ok(hostFieldMatches('[host]:2222', 'HOST', 2222));
    const salt = Buffer.from('0123456789abcdef0123');
    const hash = createHmac('sha1', salt).update('[host]:2222').digest('base64');
    assert.ok(hostFieldMatches(`|1|${salt.toString('base64')}|${hash}`, 'host', 2222));
    assert.ok(!hostFieldMatches(`|1|${salt.toString('base64')}|${hash}`, 'other', 2222));
  });

  it('tells known, unknown, changed and revoked keys apart', () => {
    const entries = parseKnownHosts(
      [formatKnownHostsLine('h', 22, keyA), formatKnownHostsLine('other', 22, keyB), `@revoked * ${keyTypeOf(rsa)} ${rsa.toString('base64')}`].join('\n'),
    );
    assert.deepEqual(checkHostKey(entries, 'h', 22, keyA), { kind: 'known' });
    assert.deepEqual(checkHostKey(entries, 'new', 22, keyA), { kind: 'unknown' });
    assert.deepEqual(checkHostKey(entries, 'h', 22, keyB), { kind: 'changed', knownFingerprints: [fingerprintSha256(keyA)], lines: [1] });
    assert.deepEqual(checkHostKey(entries, 'new', 22, rsa), { kind: 'revoked', line: 3 });
  });

  it('offers only the pinned key types so a second key type never looks like a change', () => {
    const entries = parseKnownHosts([formatKnownHostsLine('h', 22, keyA), formatKnownHostsLine('h', 22, rsa)].join('\n'));
    assert.deepEqual(pinnedKeyTypes(entries, 'h', 22), ['ssh-ed25519', 'ssh-rsa']);
    assert.deepEqual(hostKeyAlgorithmsFor(['ssh-ed25519', 'ssh-rsa']), ['ssh-ed25519', 'rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa']);
    assert.deepEqual(pinnedKeyTypes(entries, 'other', 22), []);
  });

  it('appends pins to a private file, treating a missing file as empty', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'berth-known-hosts-'));
    try {
      const file = new KnownHostsFile(path.join(dir, 'sub', 'known_hosts'));
      assert.deepEqual(await file.read(), []);
      await file.add('h', 2222, keyA);
      await writeFile(file.path, `${await readFile(file.path, 'utf8')}# no newline at the end`);
      await file.add('h2', 22, keyB);
      const entries = await file.read();
      assert.deepEqual(entries.map((e) => e.hosts), ['[h]:2222', 'h2']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
