/**
 * The pure parts of TLS: config keys and their checks, how the CLI picks TLS
 * from flags and environment, and how a client's handshake failure is read.
 * The handshakes themselves run in test/integration/tls-credentials.test.ts
 * and test/e2e/tls.test.ts.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '../../services/common/config.js';
import { parseConfig } from '../../services/common/config-load.js';
import { classifyTlsFailure } from '../../services/common/tls.js';
import { clientTarget, describeClientTlsFailure } from '../../services/cli/client-connection.js';
import { describeExecutorTlsFailure } from '../../services/dispatcher/executors/executor-channel.js';

describe('TLS config keys', () => {
  test('server.tls, executor.tls and executors[].tls are read as given', () => {
    const c = parseConfig({
      server: { tls: { cert_file: '/s.crt', key_file: '/s.key', client_ca_file: '/ca.crt' } },
      executor: { tls: { cert_file: '/e.crt', key_file: '/e.key', client_ca_file: '/ca.crt' } },
      executors: [{ address: 'e:7701', backend: 'local', tls: { ca_file: '/ca.crt', cert_file: '/d.crt', key_file: '/d.key', server_name: 'e' } }],
    });
    assert.deepEqual(c.server.tls, { cert_file: '/s.crt', key_file: '/s.key', client_ca_file: '/ca.crt' });
    assert.equal(c.executors[0]?.tls?.server_name, 'e');
    assert.equal(parseConfig({}).server.tls, undefined, 'plaintext unless configured');
  });

  test('an executor with TLS must name the CA of its clients (mTLS)', () => {
    assert.throws(
      () => parseConfig({ executor: { tls: { cert_file: '/e.crt', key_file: '/e.key' } } }),
      (err: unknown) => err instanceof ConfigError && /executor\.tls\.client_ca_file/.test(err.message),
    );
  });

  test('an executor entry with TLS needs the dispatcher\'s certificate and key; unknown keys are refused', () => {
    assert.throws(() => parseConfig({ executors: [{ address: 'e:1', backend: 'local', tls: { ca_file: '/ca.crt' } }] }), /cert_file[\s\S]*key_file|key_file[\s\S]*cert_file/);
    assert.throws(() => parseConfig({ server: { tls: { cert_file: '/s.crt', key_file: '/s.key', ca: '/x' } } }), /Unrecognized key: "ca"/);
  });
});

describe('CLI TLS settings', () => {
  test('no flag and no variable: plaintext to BERTH_SERVER', () => {
    assert.deepEqual(clientTarget({}, { BERTH_SERVER: 'h:1' }), { address: 'h:1', tls: undefined });
  });

  test('any one of them turns TLS on; flags win over variables', () => {
    assert.deepEqual(clientTarget({}, { BERTH_TLS_CA: '/env-ca' }), { address: '127.0.0.1:7700', tls: { caFile: '/env-ca' } });
    assert.deepEqual(
      clientTarget({ 'tls-ca': '/flag-ca', 'tls-key': '/flag.key' }, { BERTH_TLS_CA: '/env-ca', BERTH_TLS_CERT: '/env.crt', BERTH_TLS_KEY: '/env.key' }),
      { address: '127.0.0.1:7700', tls: { caFile: '/flag-ca', certFile: '/env.crt', keyFile: '/flag.key' } },
    );
  });
});

describe('reading a handshake failure', () => {
  // Details as grpc-js 1.14 on Node 20 gives them, taken from real failed calls.
  const cases: Array<[string, ReturnType<typeof classifyTlsFailure>]> = [
    ['No connection established. Last error: Error: 80CCA2E9897F0000:error:0A00010B:SSL routines:ssl3_get_record:wrong version number:../deps/openssl/openssl/ssl/record/ssl3_record.c:350:\n.', 'server-plaintext'],
    ['No connection established. Last error: 80CCA2E9897F0000:error:0A00045C:SSL routines:ssl3_read_bytes:tlsv13 alert certificate required:../deps/openssl/openssl/ssl/record/rec_layer_s3.c:1601:SSL alert number 116\n', 'client-cert-required'],
    ['No connection established. Last error: Error: unable to verify the first certificate. Resolution note: ', 'server-untrusted'],
    ['No connection established. Last error: Error: self-signed certificate in certificate chain. Resolution note: ', 'server-untrusted'],
    ["No connection established. Last error: Error [ERR_TLS_CERT_ALTNAME_INVALID]: Hostname/IP does not match certificate's altnames: Host: other.example. is not in the cert's altnames: IP Address:127.0.0.1, DNS:localhost.", 'server-name-mismatch'],
    ['No connection established. Last error: Error: certificate has expired. Resolution note: ', 'server-expired'],
    ['No connection established. Last error: connect ECONNREFUSED 127.0.0.1:1', undefined],
  ];
  for (const [details, expected] of cases) {
    test(`${expected ?? 'not TLS'}: ${details.slice(40, 110)}`, () => assert.equal(classifyTlsFailure(details), expected));
  }

  test('the CLI and the dispatcher word the fix in their own terms', () => {
    const target = { address: 'h:7700', tls: { caFile: '/ca.crt' } };
    assert.match(describeClientTlsFailure(target, 'client-cert-required', ''), /pass --tls-cert FILE --tls-key FILE/);
    assert.match(describeExecutorTlsFailure('e:7701', 'client-cert-required', undefined), /^executor e:7701 requires a client certificate: set cert_file and key_file/);
  });
});
