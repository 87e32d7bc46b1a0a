/**
 * TLS for Berth's gRPC servers and clients: certificate files read and
 * checked, server credentials that take new certificates on reload (SIGHUP)
 * without dropping a connection, client credentials, and a reading of
 * handshake failures that says what to change.
 *
 * Why not grpc-js's `experimental.FileWatcherCertificateProvider`: it polls
 * on a timer instead of reloading when told, and a file it cannot read or a
 * certificate its key does not match reaches the server as "no credentials",
 * so every new connection is dropped until the files are fixed. Here a new
 * certificate is checked whole (readable, parseable, in date, key matching)
 * before it replaces the old one, and the server's `setSecureContext` applies
 * it to new connections only: open streams keep the session they started on.
 */
import { readFileSync } from 'node:fs';
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import { connect as tlsConnect, createSecureContext, type ConnectionOptions, type SecureContextOptions } from 'node:tls';
import { ChannelCredentials, ServerCredentials } from '@grpc/grpc-js';
import type { ExecutorClientTlsConfig, ServerTlsConfig } from './config.js';
import { ConfigError } from './config-error.js';
import type { Logger } from './logging.js';

/** Certificate files of a TLS server; with `clientCaFile`, clients must present a certificate it signed (mTLS). */
export interface ServerTlsFiles {
  readonly certFile: string;
  readonly keyFile: string;
  readonly clientCaFile?: string;
}

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

/** What a server presents, for logs and tests. */
export interface CertificateInfo {
  readonly serial: string;
  readonly subject: string;
  readonly validTo: string;
}

function readPem(file: string, what: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new TlsMaterialError(`cannot read the ${what} ${file}: ${(err as Error).message}`);
  }
}

function parseCertificate(pem: Buffer, file: string, nowMs: number): X509Certificate {
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
function checkContext(options: SecureContextOptions, certFile: string, keyFile: string): void {
  try {
    createSecureContext(options);
  } catch (err) {
    throw new TlsMaterialError(`${certFile} and ${keyFile} do not make a usable certificate: ${(err as Error).message}`);
  }
}

interface ServerMaterial {
  readonly context: SecureContextOptions;
  readonly info: CertificateInfo;
}

/** Reads and checks a server's files; throws {@link TlsMaterialError} naming what is wrong. */
export function loadServerMaterial(files: ServerTlsFiles, nowMs = Date.now()): ServerMaterial {
  const cert = readPem(files.certFile, 'certificate');
  const key = readPem(files.keyFile, 'private key');
  const x509 = parseCertificate(cert, files.certFile, nowMs);
  const context: SecureContextOptions = { cert, key };
  if (files.clientCaFile !== undefined) {
    const ca = readPem(files.clientCaFile, 'client CA certificate');
    parseCertificate(ca, files.clientCaFile, nowMs);
    context.ca = ca;
  }
  checkContext(context, files.certFile, files.keyFile);
  return { context, info: { serial: x509.serialNumber, subject: x509.subject, validTo: x509.validTo } };
}

/**
 * Server credentials over certificate files, reloaded by {@link reload}. With
 * a client CA the handshake itself refuses a client without a certificate it
 * signed, before any call reaches a handler.
 */
export class ReloadableServerCredentials extends ServerCredentials {
  readonly files: ServerTlsFiles;
  #info: CertificateInfo;

  constructor(files: ServerTlsFiles) {
    const material = loadServerMaterial(files);
    const mutual = files.clientCaFile !== undefined;
    super({ requestCert: mutual, rejectUnauthorized: mutual }, material.context);
    this.files = files;
    this.#info = material.info;
  }

  /** The certificate new connections get. */
  get certificate(): CertificateInfo {
    return this.#info;
  }

  /**
   * Reads the files again; when they are good, new connections get them and
   * open ones keep theirs. Throws {@link TlsMaterialError} and changes nothing
   * when they are not.
   */
  reload(): CertificateInfo {
    const material = loadServerMaterial(this.files);
    this.updateSecureContextOptions(material.context);
    this.#info = material.info;
    return material.info;
  }

  override _equals(other: ServerCredentials): boolean {
    return this === other;
  }
}

let ipServernameWarningDropped = false;

/**
 * grpc-js puts the dialled host in SNI even when it is an IP address; Node
 * then ignores it and prints DEP0123 to stderr once per process, which reads
 * like a fault to whoever connects to 127.0.0.1. Only that warning is dropped.
 */
function dropIpServernameWarning(): void {
  if (ipServernameWarningDropped) return;
  ipServernameWarningDropped = true;
  const emit = process.emitWarning.bind(process) as (...args: unknown[]) => void;
  process.emitWarning = ((warning: string | Error, ...rest: unknown[]) => {
    const options = rest[0];
    const code = typeof options === 'object' && options !== null ? (options as { code?: string }).code : rest[1];
    if (code === 'DEP0123') return;
    emit(warning, ...rest);
  }) as typeof process.emitWarning;
}

/** Channel credentials and options for a TLS client; throws {@link TlsMaterialError}. */
export function clientTls(files: ClientTlsFiles): { credentials: ChannelCredentials; options: Record<string, string> } {
  dropIpServernameWarning();
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
  const options: Record<string, string> = {};
  if (files.serverName) {
    options['grpc.ssl_target_name_override'] = files.serverName;
    options['grpc.default_authority'] = files.serverName;
  }
  return { credentials: ChannelCredentials.createSsl(ca, key, cert), options };
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

function hostPort(address: string): { host: string; port: number } | undefined {
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

/** `server.tls` / `executor.tls` from config as files. */
export function serverTlsFiles(tls: ServerTlsConfig): ServerTlsFiles {
  return {
    certFile: tls.cert_file,
    keyFile: tls.key_file,
    ...(tls.client_ca_file === undefined ? {} : { clientCaFile: tls.client_ca_file }),
  };
}

/** `executors[].tls` from config as files. */
export function executorClientTlsFiles(tls: ExecutorClientTlsConfig): ClientTlsFiles {
  return {
    certFile: tls.cert_file,
    keyFile: tls.key_file,
    ...(tls.ca_file === undefined ? {} : { caFile: tls.ca_file }),
    ...(tls.server_name === undefined ? {} : { serverName: tls.server_name }),
  };
}

/**
 * Server credentials for a config key (`server.tls`, `executor.tls`), or
 * undefined for plaintext; bad files stop the start with {@link ConfigError}.
 */
export function serverCredentialsFor(key: string, tls: ServerTlsConfig | undefined): ReloadableServerCredentials | undefined {
  if (tls === undefined) return undefined;
  try {
    return new ReloadableServerCredentials(serverTlsFiles(tls));
  } catch (err) {
    throw err instanceof TlsMaterialError ? new ConfigError(`${key}: ${err.message}`) : err;
  }
}

/** Reloads `credentials` (SIGHUP) and logs the outcome; bad files leave the certificate in force as it was. */
export function reloadCertificates(key: string, credentials: ReloadableServerCredentials, logger: Logger): boolean {
  const before = credentials.certificate;
  try {
    const after = credentials.reload();
    logger.info({ key, serial: after.serial, validTo: after.validTo, previousSerial: before.serial }, `${key}: certificate reloaded; new connections get it`);
    return true;
  } catch (err) {
    logger.error(
      { key, serial: before.serial, validTo: before.validTo, error: (err as Error).message },
      `${key}: certificate not reloaded, the previous one stays in force: ${(err as Error).message}`,
    );
    return false;
  }
}
