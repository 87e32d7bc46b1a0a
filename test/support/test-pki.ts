/**
 * Certificates made at run time for TLS tests, with Debian's `openssl`: a CA,
 * server certificates for 127.0.0.1/localhost, client certificates, and a
 * second CA nobody trusts. EC P-256 keys, valid for a day, in a temp dir the
 * caller removes; nothing of it is committed.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { X509Certificate, randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface CertFiles {
  readonly certFile: string;
  readonly keyFile: string;
  /** Serial number as X509Certificate.serialNumber gives it (uppercase hex). */
  readonly serial: string;
}

export interface TestCa extends CertFiles {
  readonly name: string;
}

export interface TestPki extends Disposable {
  readonly dir: string;
  /** The CA every server and client trusts. */
  readonly ca: TestCa;
  /** A CA nobody is configured to trust. */
  readonly untrustedCa: TestCa;
  /**
   * A new server certificate (SAN IP:127.0.0.1, DNS:localhost) signed by `ca`
   * (default: the trusted CA), valid for `days` (-1: expired yesterday).
   */
  serverCert(name: string, ca?: TestCa, days?: number): CertFiles;
  /** A new client certificate signed by `ca` (default: the trusted CA). */
  clientCert(name: string, ca?: TestCa): CertFiles;
}

function openssl(args: string[]): void {
  try {
    execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    const stderr = String((err as { stderr?: Buffer }).stderr ?? '');
    throw new Error(`openssl ${args[0]} failed (apt-get install openssl): ${stderr || (err as Error).message}`);
  }
}

const KEY_ARGS = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function serialOf(certFile: string): string {
  return new X509Certificate(readFileSync(certFile)).serialNumber;
}

export function createTestPki(): TestPki {
  const dir = mkdtempSync(join(tmpdir(), 'berth-pki-'));
  const makeCa = (name: string): TestCa => {
    const certFile = join(dir, `${name}.crt`);
    const keyFile = join(dir, `${name}.key`);
    openssl([
      'req', '-x509', ...KEY_ARGS, '-keyout', keyFile, '-out', certFile, '-days', '1', '-subj', `/CN=${name}`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
    ]);
    return { name, certFile, keyFile, serial: serialOf(certFile) };
  };
  const issue = (name: string, ca: TestCa, extensions: string, days = 1): CertFiles => {
    const keyFile = join(dir, `${name}.key`);
    const csr = join(dir, `${name}.csr`);
    const certFile = join(dir, `${name}.crt`);
    const ext = join(dir, `${name}.ext`);
    writeFileSync(ext, `basicConstraints=CA:FALSE\n${extensions}\n`);
    openssl(['req', ...KEY_ARGS, '-keyout', keyFile, '-out', csr, '-subj', `/CN=${name}`]);
    openssl([
      'x509', '-req', '-in', csr, '-CA', ca.certFile, '-CAkey', ca.keyFile, '-days', String(days),
      '-set_serial', `0x${randomBytes(8).toString('hex')}`, '-extfile', ext, '-out', certFile,
    ]);
    return { certFile, keyFile, serial: serialOf(certFile) };
  };
  try {
    const ca = makeCa('berth-test-ca');
    const untrustedCa = makeCa('untrusted-test-ca');
    return {
      dir,
      ca,
      untrustedCa,
      serverCert: (name, by = ca, days = 1) =>
        issue(name, by, 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth', days),
      clientCert: (name, by = ca) => issue(name, by, 'extendedKeyUsage=clientAuth'),
      [Symbol.dispose]: () => rmSync(dir, { recursive: true, force: true }),
    };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}
