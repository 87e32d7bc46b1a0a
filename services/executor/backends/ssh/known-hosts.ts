/**
 * Host-key pinning in OpenSSH's known_hosts format, so operators can share
 * the file with `ssh` (and inspect it with `ssh-keygen -F`).
 *
 * Pure functions parse, match and format lines; {@link KnownHostsFile} adds
 * the small amount of file I/O. Supported: plain and hashed (`|1|salt|hash`)
 * host fields, comma lists, `*`/`?` wildcards, `!` negation, `[host]:port`,
 * and the `@revoked` marker. `@cert-authority` lines are ignored: Berth does
 * not accept host certificates.
 */
import { createHash, createHmac } from 'node:crypto';
import { appendFile, mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';

export interface KnownHostsEntry {
  readonly marker: 'revoked' | 'cert-authority' | undefined;
  /** The host field as written: patterns, comma-separated, or one hashed name. */
  readonly hosts: string;
  readonly keyType: string;
  /** The key blob, base64 as in the file. */
  readonly keyBase64: string;
  /** 1-based line number, for messages. */
  readonly line: number;
}

/** What the file says about a host's key. */
export type HostKeyStatus =
  /** The key is listed for this host. */
  | { readonly kind: 'known' }
  /** Nothing is listed for this host. */
  | { readonly kind: 'unknown' }
  /** The host is listed with other keys: the key changed (or someone is in the middle). */
  | { readonly kind: 'changed'; readonly knownFingerprints: readonly string[]; readonly lines: readonly number[] }
  /** The key is marked `@revoked`. */
  | { readonly kind: 'revoked'; readonly line: number };

/** The host name as known_hosts spells it: `host` on port 22, `[host]:port` otherwise. */
export function knownHostsName(host: string, port: number): string {
  return port === 22 ? host.toLowerCase() : `[${host.toLowerCase()}]:${port}`;
}

/** Parses known_hosts text; malformed lines are skipped, as ssh does. */
export function parseKnownHosts(text: string): KnownHostsEntry[] {
  const entries: KnownHostsEntry[] = [];
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const fields = line.split(/\s+/);
    let marker: KnownHostsEntry['marker'];
    if (fields[0] === '@revoked' || fields[0] === '@cert-authority') {
      marker = fields[0] === '@revoked' ? 'revoked' : 'cert-authority';
      fields.shift();
    }
    const [hosts, keyType, keyBase64] = fields;
    if (!hosts || !keyType || !keyBase64) return;
    entries.push({ marker, hosts, keyType, keyBase64, line: index + 1 });
  });
  return entries;
}

/** Matches one OpenSSH pattern (`*`, `?`) against a name, case-insensitively. */
function matchPattern(pattern: string, name: string): boolean {
  const regex = pattern
    .toLowerCase()
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replaceAll('*', '.*')
    .replaceAll('?', '.');
  return new RegExp(`^${regex}$`).test(name);
}

/** True when a hashed host field (`|1|base64 salt|base64 hmac`) is `name`. */
function matchHashed(field: string, name: string): boolean {
  const [, kind, salt, hash] = field.split('|');
  if (kind !== '1' || !salt || !hash) return false;
  const digest = createHmac('sha1', Buffer.from(salt, 'base64')).update(name).digest('base64');
  return digest === hash;
}

/** True when the host field of a line names `host` on `port`. */
export function hostFieldMatches(field: string, host: string, port: number): boolean {
  const name = knownHostsName(host, port);
  if (field.startsWith('|')) return matchHashed(field, name);
  let matched = false;
  for (const pattern of field.split(',')) {
    if (pattern.startsWith('!')) {
      if (matchPattern(pattern.slice(1), name)) return false;
    } else if (matchPattern(pattern, name)) {
      matched = true;
    }
  }
  return matched;
}

/** The key type named inside an SSH public key blob (`ssh-ed25519`, `ssh-rsa`, ...). */
export function keyTypeOf(blob: Uint8Array): string {
  const buf = Buffer.from(blob);
  if (buf.length < 4) throw new Error('host key blob is too short');
  const len = buf.readUInt32BE(0);
  if (len > buf.length - 4) throw new Error('host key blob is malformed');
  return buf.subarray(4, 4 + len).toString('latin1');
}

/** `SHA256:<base64, unpadded>`, as `ssh-keygen -lf` prints it. */
export function fingerprintSha256(blob: Uint8Array): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

/** Checks a host's key against the entries. */
export function checkHostKey(entries: readonly KnownHostsEntry[], host: string, port: number, blob: Uint8Array): HostKeyStatus {
  const base64 = Buffer.from(blob).toString('base64');
  const forHost = entries.filter((e) => e.marker !== 'cert-authority' && hostFieldMatches(e.hosts, host, port));
  const revoked = entries.find((e) => e.marker === 'revoked' && e.keyBase64 === base64);
  if (revoked) return { kind: 'revoked', line: revoked.line };
  const plain = forHost.filter((e) => e.marker === undefined);
  if (plain.some((e) => e.keyBase64 === base64)) return { kind: 'known' };
  if (plain.length === 0) return { kind: 'unknown' };
  return {
    kind: 'changed',
    knownFingerprints: plain.map((e) => fingerprintSha256(Buffer.from(e.keyBase64, 'base64'))),
    lines: plain.map((e) => e.line),
  };
}

/** The line that pins `blob` for `host:port` (no newline). */
export function formatKnownHostsLine(host: string, port: number, blob: Uint8Array): string {
  return `${knownHostsName(host, port)} ${keyTypeOf(blob)} ${Buffer.from(blob).toString('base64')}`;
}

/**
 * Host-key algorithms to offer so the server presents a key type that is
 * already pinned: otherwise a server with several keys could present an
 * unpinned type, which would look like a changed key. Empty: any type.
 */
export function hostKeyAlgorithmsFor(keyTypes: readonly string[]): string[] {
  const out: string[] = [];
  for (const type of keyTypes) {
    const algorithms = type === 'ssh-rsa' ? ['rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa'] : [type];
    for (const a of algorithms) if (!out.includes(a)) out.push(a);
  }
  return out;
}

/** Key types pinned for `host:port` (plain entries only). */
export function pinnedKeyTypes(entries: readonly KnownHostsEntry[], host: string, port: number): string[] {
  const types = entries
    .filter((e) => e.marker === undefined && hostFieldMatches(e.hosts, host, port))
    .map((e) => e.keyType);
  return [...new Set(types)];
}

/** A known_hosts file on the executor. Missing means empty. */
export class KnownHostsFile {
  readonly path: string;

  constructor(filePath: string) {
    this.path = filePath;
  }

  async read(): Promise<KnownHostsEntry[]> {
    try {
      return parseKnownHosts(await readFile(this.path, 'utf8'));
    } catch (err) {
      if ((err as { code?: unknown }).code === 'ENOENT') return [];
      throw err;
    }
  }

  /** Appends a pin; the directory is created private to the executor's user. */
  async add(host: string, port: number, blob: Uint8Array): Promise<void> {
    await mkdir(path.dirname(this.path), { recursive: true, mode: 0o700 });
    const existing = await readFile(this.path, 'utf8').catch(() => '');
    const separator = existing === '' || existing.endsWith('\n') ? '' : '\n';
    await appendFile(this.path, `${separator}${formatKnownHostsLine(host, port, blob)}\n`, { mode: 0o600 });
  }
}
