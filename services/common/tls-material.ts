/**
 * The TLS a gRPC client needs without grpc-js: certificate files read and
 * checked, and a reading of handshake failures that says what to change
 * (tls.ts builds grpc-js credentials and server reloading on these; the
 * CLI's HTTP/2 client uses them directly).
 */
import { readFileSync } from 'node:fs';
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import { connect as tlsConnect, createSecureContext, type ConnectionOptions, type SecureContextOptions } from 'node:tls';

/** Certificate files of a TLS client: the CA to trust the server by (none: the system's), and its own identity for mTLS. */
export interface ClientTlsFiles {
  readonly caFile?: string;
  readonly certFile?: string;
  readonly keyFile?: string;
  /** The name to check the server's certificate against, when it differs from the address's host. */
  readonly serverName?: string;
}

/** Certificate material that cannot be used; the message names the file and the problem. */
export class TlsMaterialError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TlsMaterialError';
  }
}

export function readPem(file: string, what: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new TlsMaterialError(`cannot read the ${what} ${file}: ${(err as Error).message}`);
  }
}

export function parseCertificate(pem: Buffer, file: string, nowMs: number): X509Certificate {
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(pem);
  } catch (err) {
    throw new TlsMaterialError(`${file} holds no PEM certificate: ${(err as Error).message}`);
  }
  if (Date.parse(cert.validTo) < nowMs) throw new TlsMaterialError(`the certificate in ${file} expired on ${cert.validTo}`);
  if (Date.parse(cert.validFrom) > nowMs) {
    throw new TlsMaterialError(`the certificate in ${file} is not valid before ${cert.validFrom}`);
  }
  return cert;
}

/** Builds a secure context from the options, so a key that does not match its certificate fails here, not at a handshake. */
export function checkContext(options: SecureContextOptions, certFile: string, keyFile: string): void {
  try {
    createSecureContext(options);
  } catch (err) {
    throw new TlsMaterialError(`${certFile} and ${keyFile} do not make a usable certificate: ${(err as Error).message}`);
  }
}

/** A TLS client's files read and checked (CA parseable and in date, certificate and key a pair); throws {@link TlsMaterialError}. */
export function clientTlsMaterial(files: ClientTlsFiles): { ca: Buffer | null; cert: Buffer | null; key: Buffer | null } {
  const nowMs = Date.now();
  const ca = files.caFile === undefined ? null : readPem(files.caFile, 'CA certificate');
  if (ca !== null && files.caFile !== undefined) parseCertificate(ca, files.caFile, nowMs);
  if ((files.certFile === undefined) !== (files.keyFile === undefined)) {
    throw new TlsMaterialError('a client certificate needs both its certificate file and its key file');
  }
  let cert: Buffer | null = null;
  let key: Buffer | null = null;
  if (files.certFile !== undefined && files.keyFile !== undefined) {
    cert = readPem(files.certFile, 'client certificate');
    key = readPem(files.keyFile, 'client private key');
    parseCertificate(cert, files.certFile, nowMs);
    checkContext({ cert, key }, files.certFile, files.keyFile);
  }
  return { ca, cert, key };
}

/** Why a TLS (or plaintext) connection failed, as far as the client's error tells. */
export type TlsFailure =
  /** A TLS client met a server that answers in plaintext. */
  | 'server-plaintext'
  /** The server's certificate is not signed by a CA the client trusts. */
  | 'server-untrusted'
  /** The server's certificate expired (or is not valid yet): it was not renewed and reloaded in time. */
  | 'server-expired'
  /** The server's certificate does not name the host the client dialled. */
  | 'server-name-mismatch'
  /** The server wants a client certificate and got none. */
  | 'client-cert-required'
  /** The server does not trust the client's certificate. */
  | 'client-cert-rejected';

const FAILURE_PATTERNS: ReadonlyArray<readonly [RegExp, TlsFailure]> = [
  [/wrong version number|packet length too long|unknown protocol|record layer failure/i, 'server-plaintext'],
  [/certificate required|peer did not return a certificate/i, 'client-cert-required'],
  [/alert (unknown ca|bad certificate|certificate unknown|decrypt error)|tlsv1 alert unknown ca/i, 'client-cert-rejected'],
  [/Hostname\/IP does not match|altnames|ERR_TLS_CERT_ALTNAME/i, 'server-name-mismatch'],
  [/certificate (has expired|is not yet valid)|CERT_HAS_EXPIRED|CERT_NOT_YET_VALID/i, 'server-expired'],
  [/self[- ]signed certificate|unable to (get local issuer|verify the first)|certificate signature failure|UNABLE_TO_VERIFY|SELF_SIGNED/i, 'server-untrusted'],
];

/** Reads a gRPC client error's details for a TLS failure; pure, so each caller words the fix in its own terms. */
export function classifyTlsFailure(details: string): TlsFailure | undefined {
  return FAILURE_PATTERNS.find(([pattern]) => pattern.test(details))?.[1];
}

const HTTP2_PREFACE = Buffer.concat([
  Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1'),
  // An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
  Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]),
]);

export function hostPort(address: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([^\]]+)\]|([^:/]+)):(\d+)$/.exec(address.replace(/^dns:(\/\/\/)?/, ''));
  return m ? { host: m[1] ?? m[2]!, port: Number(m[3]) } : undefined;
}

/**
 * Finds out why a connection to `address` (host:port) failed, by a handshake
 * of its own: with `client` undefined (a plaintext client), whether the
 * server speaks TLS ('server-tls'); with the client's TLS files, which part
 * of the handshake fails. A TLS 1.3 server judges the client's certificate
 * after the client considers the handshake done, so the probe sends the
 * HTTP/2 preface and waits for the server's first frame or its alert.
 * Undefined when nothing answers or nothing is wrong with TLS.
 */
export function diagnoseTls(
  address: string,
  client: ClientTlsFiles | undefined,
  timeoutMs = 3000,
): Promise<TlsFailure | 'server-tls' | undefined> {
  const target = hostPort(address);
  if (!target) return Promise.resolve(undefined);
  let options: ConnectionOptions = { ...target, ALPNProtocols: ['h2'], rejectUnauthorized: false };
  if (client !== undefined) {
    try {
      options = {
        ...options,
        rejectUnauthorized: true,
        ...(client.caFile === undefined ? {} : { ca: readFileSync(client.caFile) }),
        ...(client.certFile === undefined ? {} : { cert: readFileSync(client.certFile) }),
        ...(client.keyFile === undefined ? {} : { key: readFileSync(client.keyFile) }),
      };
    } catch {
      return Promise.resolve(undefined);
    }
  }
  const servername = client?.serverName ?? (isIP(target.host) ? undefined : target.host);
  if (servername !== undefined) options.servername = servername;
  return new Promise((resolve) => {
    let settled = false;
    const socket = tlsConnect(options);
    const timer = setTimeout(() => done(undefined), timeoutMs);
    function done(value: TlsFailure | 'server-tls' | undefined): void {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(value);
    }
    let secure = false;
    socket.once('secureConnect', () => {
      if (client === undefined) return done('server-tls');
      secure = true;
      socket.write(HTTP2_PREFACE);
      socket.once('data', () => done(undefined));
    });
    socket.once('error', (err: NodeJS.ErrnoException) =>
      done(client === undefined ? undefined : classifyTlsFailure(`${err.code ?? ''} ${err.message}`)),
    );
    // Node's TLS server closes without an alert when it rejects a client's certificate.
    socket.once('close', () => done(secure ? (client?.certFile ? 'client-cert-rejected' : 'client-cert-required') : undefined));
  });
}
