/**
 * Server credentials that reload: a real nice-grpc server on an ephemeral
 * port, certificates from test/support/test-pki.ts. Bad files at start stop
 * the start with the key and file named; bad files on reload change nothing.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';
import { connect as tlsConnect } from 'node:tls';
import { createChannel, createClient, createServer, type Server } from 'nice-grpc';
import { HealthDefinition, HealthServiceImpl, HealthState } from 'nice-grpc-server-health';
import { ConfigError } from '../../services/common/config.js';
import { ReloadableServerCredentials, TlsMaterialError, clientTls, serverCredentialsFor } from '../../services/common/tls.js';
import { createTestPki, type TestPki } from '../support/test-pki.js';

function peerSerial(port: number, caFile: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({ host: '127.0.0.1', port, ca: readFileSync(caFile), ALPNProtocols: ['h2'] });
    socket.once('secureConnect', () => {
      resolve(socket.getPeerCertificate().serialNumber.toUpperCase());
      socket.destroy();
    });
    socket.once('error', reject);
  });
}

describe('ReloadableServerCredentials', () => {
  let pki: TestPki;
  let server: Server;
  let port: number;
  let credentials: ReloadableServerCredentials;
  let certFile: string;
  let keyFile: string;
  let firstSerial: string;

  before(async () => {
    pki = createTestPki();
    const first = pki.serverCert('first');
    firstSerial = first.serial;
    certFile = join(pki.dir, 'live.crt');
    keyFile = join(pki.dir, 'live.key');
    copyFileSync(first.certFile, certFile);
    copyFileSync(first.keyFile, keyFile);
    credentials = new ReloadableServerCredentials({ certFile, keyFile });
    server = createServer();
    server.add(HealthDefinition, HealthServiceImpl(HealthState()));
    port = await server.listen('127.0.0.1:0', credentials);
  });

  after(() => {
    server?.forceShutdown();
    pki?.[Symbol.dispose]();
  });

  const healthCheck = async () => {
    const { credentials: c } = clientTls({ caFile: pki.ca.certFile });
    const channel = createChannel(`127.0.0.1:${port}`, c);
    try {
      return (await createClient(HealthDefinition, channel).check({ service: '' })).status;
    } finally {
      channel.close();
    }
  };

  test('bad files on reload throw, name the problem and leave the certificate in force', async () => {
    const badFiles: Array<[string, () => void, RegExp]> = [
      ['a key that is not the certificate\'s', () => copyFileSync(pki.serverCert('other').keyFile, keyFile), /key values mismatch/],
      ['a certificate file without a certificate', () => writeFileSync(certFile, 'not a certificate\n'), /holds no PEM certificate/],
      [
        'an expired certificate',
        () => {
          const expired = pki.serverCert('expired', pki.ca, -1);
          copyFileSync(expired.certFile, certFile);
          copyFileSync(expired.keyFile, keyFile);
        },
        /live\.crt expired on/,
      ],
      ['a missing key file', () => rmSync(keyFile), /cannot read the private key .*live\.key/],
    ];
    const good = pki.serverCert('good');
    for (const [what, breakIt, message] of badFiles) {
      copyFileSync(good.certFile, certFile);
      copyFileSync(good.keyFile, keyFile);
      breakIt();
      assert.throws(() => credentials.reload(), (err: unknown) => err instanceof TlsMaterialError && message.test(err.message), what);
      assert.equal(credentials.certificate.serial, firstSerial, what);
      assert.equal(await peerSerial(port, pki.ca.certFile), firstSerial, what);
      assert.equal(await healthCheck(), 1, `${what}: still serving`);
    }
  });

  test('good files on reload go to new connections', async () => {
    const next = pki.serverCert('next');
    copyFileSync(next.certFile, certFile);
    copyFileSync(next.keyFile, keyFile);
    assert.equal(credentials.reload().serial, next.serial);
    assert.equal(await peerSerial(port, pki.ca.certFile), next.serial);
    assert.equal(await healthCheck(), 1);
  });

  test('bad files at start stop it with the config key and the file named', () => {
    assert.throws(
      () => serverCredentialsFor('server.tls', { cert_file: join(pki.dir, 'missing.crt'), key_file: keyFile }),
      (err: unknown) => err instanceof ConfigError && /^server\.tls: cannot read the certificate .*missing\.crt/.test(err.message),
    );
  });
});
