/**
 * A client command's transport failure explained in terms of its flags: a
 * plaintext client at a TLS server is told the server speaks TLS, and so
 * on. Loads no gRPC stack (grpc-js or the CLI's HTTP/2 client fail alike).
 */
import { BerthError } from '../client/errors.js';
import { ClientError, Status } from '../common/nice-grpc-common-cjs.js';
import { diagnoseTls, type TlsFailure } from '../common/tls-material.js';
import type { ClientTarget } from './client-options.js';

/** Details grpc-js (or http2-client.ts) gives when no connection could be made (as opposed to a status the server sent). */
const CONNECTION_FAILURE = /No connection established|Failed to connect|Connection dropped|ECONNREFUSED|ECONNRESET|ENOTFOUND|EAI_AGAIN/i;

/** What to do, per failure, in the terms of the CLI's flags. */
export function describeClientTlsFailure(target: ClientTarget, failure: TlsFailure | 'server-tls', details: string): string {
  const at = `the server at ${target.address}`;
  switch (failure) {
    case 'server-tls':
      return `${at} speaks TLS: pass --tls-ca FILE (the CA that signed its certificate; env BERTH_TLS_CA), and --tls-cert/--tls-key if it requires a client certificate`;
    case 'server-plaintext':
      return `${at} does not speak TLS: drop --tls-ca/--tls-cert/--tls-key (and BERTH_TLS_*), or give the server server.tls`;
    case 'server-untrusted':
      return `${at} presented a certificate not signed by ${target.tls?.caFile ?? "the system's CAs"}: pass the CA that signed its server.tls.cert_file with --tls-ca`;
    case 'server-expired':
      return `${at} presented an expired (or not yet valid) certificate: its operator must renew server.tls.cert_file and send the server SIGHUP`;
    case 'server-name-mismatch':
      return `${at} presented a certificate for another name; connect by a name or address in its subjectAltName (${details})`;
    case 'client-cert-required':
      return `${at} requires a client certificate: pass --tls-cert FILE --tls-key FILE (env BERTH_TLS_CERT, BERTH_TLS_KEY)`;
    case 'client-cert-rejected':
      return `${at} refused the client certificate ${target.tls?.certFile ?? ''}: it must be signed by the CA in the server's server.tls.client_ca_file`;
  }
}

/** A transport failure (UNAVAILABLE) as one line that says what to do; undefined for other errors. */
export async function explainClientError(err: unknown, target: ClientTarget): Promise<string | undefined> {
  // The CLI's calls fail as nice-grpc ClientErrors, or as the client library's BerthErrors (Session calls).
  if (!(err instanceof ClientError || err instanceof BerthError) || err.code !== Status.UNAVAILABLE) return undefined;
  // UNAVAILABLE the server itself sent (shutting down, an executor unreachable) is its own message.
  if (!CONNECTION_FAILURE.test(err.details)) return `UNAVAILABLE: ${err.details}`;
  const failure = await diagnoseTls(target.address, target.tls);
  if (failure !== undefined) return describeClientTlsFailure(target, failure, err.details);
  return `cannot reach the Berth server at ${target.address} (${err.details}); is 'berth serve' running? Set --server or BERTH_SERVER`;
}
