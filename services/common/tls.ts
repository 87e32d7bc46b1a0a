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
import type { SecureContextOptions } from 'node:tls';
import { ChannelCredentials, ServerCredentials } from '@grpc/grpc-js';
import type { ExecutorClientTlsConfig, ServerTlsConfig } from './config.js';
import { ConfigError } from './config-error.js';
import type { Logger } from './logging.js';
import { checkContext, clientTlsMaterial, parseCertificate, readPem, TlsMaterialError, type ClientTlsFiles } from './tls-material.js';

export {
  classifyTlsFailure,
  clientTlsMaterial,
  diagnoseTls,
  TlsMaterialError,
  type ClientTlsFiles,
  type TlsFailure,
} from './tls-material.js';

/** Certificate files of a TLS server; with `clientCaFile`, clients must present a certificate it signed (mTLS). */
export interface ServerTlsFiles {
  readonly certFile: string;
  readonly keyFile: string;
  readonly clientCaFile?: string;
}

/** What a server presents, for logs and tests. */
export interface CertificateInfo {
  readonly serial: string;
  readonly subject: string;
  readonly validTo: string;
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
  const { ca, cert, key } = clientTlsMaterial(files);
  const options: Record<string, string> = {};
  if (files.serverName) {
    options['grpc.ssl_target_name_override'] = files.serverName;
    options['grpc.default_authority'] = files.serverName;
  }
  return { credentials: ChannelCredentials.createSsl(ca, key, cert), options };
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
