import { readFileSync } from 'node:fs';
import { ChannelCredentials } from '@grpc/grpc-js';

/** PEM text, its bytes, or the path of a file holding it. */
export type PemSource = string | Uint8Array;

/**
 * TLS towards the dispatcher. With no field set, the system's roots verify
 * the server. `cert` and `key` together present a client certificate (mTLS).
 */
export interface TlsOptions {
  /** CA certificate(s) that sign the server's certificate. */
  readonly ca?: PemSource;
  /** Client certificate chain, for servers that ask for one. */
  readonly cert?: PemSource;
  /** The client certificate's private key. */
  readonly key?: PemSource;
  /** Name to verify the server's certificate against, when it differs from the address's host. */
  readonly serverName?: string;
}

/** Bytes of a PEM source: text that looks like PEM is taken as is, any other string is a file path. */
export function readPem(source: PemSource, what: string): Buffer {
  if (typeof source !== 'string') return Buffer.from(source);
  if (source.includes('-----BEGIN ')) return Buffer.from(source);
  try {
    return readFileSync(source);
  } catch (err) {
    throw new Error(`tls.${what}: cannot read '${source}' (${(err as Error).message}); pass PEM text or a readable file path`, { cause: err });
  }
}

/** grpc-js channel credentials for the options: insecure without `tls`. */
export function channelCredentials(tls: TlsOptions | boolean | undefined): ChannelCredentials {
  if (tls === undefined || tls === false) return ChannelCredentials.createInsecure();
  if (tls === true) return ChannelCredentials.createSsl();
  if ((tls.cert === undefined) !== (tls.key === undefined)) {
    throw new Error('tls.cert and tls.key go together: set both for a client certificate, or neither');
  }
  return ChannelCredentials.createSsl(
    tls.ca === undefined ? null : readPem(tls.ca, 'ca'),
    tls.key === undefined ? null : readPem(tls.key, 'key'),
    tls.cert === undefined ? null : readPem(tls.cert, 'cert'),
  );
}
