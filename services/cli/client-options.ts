/**
 * The client commands' flags and the server they name, without the gRPC
 * stack: parsing a command line (and printing its help) loads only this;
 * client-connection.ts opens the connection.
 */
import type { ClientTlsFiles } from '../common/tls.js';

export const DEFAULT_SERVER = '127.0.0.1:7700';

/** parseArgs options shared by every command that talks to a server. */
export const CLIENT_OPTIONS = {
  server: { type: 'string' },
  'api-key': { type: 'string' },
  'tls-ca': { type: 'string' },
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
} as const;

export interface ClientTarget {
  readonly address: string;
  /** Undefined: plaintext. */
  readonly tls: ClientTlsFiles | undefined;
}

/** A failure to use the TLS flags' files; the CLI exits 2 as for other usage errors. */
export class ClientTlsError extends Error {}

/** Runs `read` over the TLS flags' files; tls-material.ts's TlsMaterialError comes out as a ClientTlsError in the flags' terms. */
export function readTlsFlags<T>(read: () => T): T {
  try {
    return read();
  } catch (err) {
    // By name: importing the class would load node:tls for every command line parsed.
    if (err instanceof Error && err.name === 'TlsMaterialError') {
      throw new ClientTlsError(`--tls-ca/--tls-cert/--tls-key: ${err.message.replace('its certificate file and its key file', '--tls-cert and --tls-key')}`);
    }
    throw err;
  }
}

export interface ClientFlags {
  readonly server?: string | undefined;
  readonly 'tls-ca'?: string | undefined;
  readonly 'tls-cert'?: string | undefined;
  readonly 'tls-key'?: string | undefined;
}

/** Flags first, then the environment. */
export function clientTarget(values: ClientFlags, env: NodeJS.ProcessEnv): ClientTarget {
  const pick = (flag: string | undefined, name: string) => flag ?? (env[name] || undefined);
  const caFile = pick(values['tls-ca'], 'BERTH_TLS_CA');
  const certFile = pick(values['tls-cert'], 'BERTH_TLS_CERT');
  const keyFile = pick(values['tls-key'], 'BERTH_TLS_KEY');
  const address = values.server ?? (env.BERTH_SERVER || DEFAULT_SERVER);
  if (caFile === undefined && certFile === undefined && keyFile === undefined) return { address, tls: undefined };
  return {
    address,
    tls: {
      ...(caFile === undefined ? {} : { caFile }),
      ...(certFile === undefined ? {} : { certFile }),
      ...(keyFile === undefined ? {} : { keyFile }),
    },
  };
}

/** The server could not be reached (or not over the transport the flags chose), or said it is unavailable. */
export class TransportError extends Error {
  constructor(
    message: string,
    /** False when the server answered but refused (it predates a feature): not worth retrying. */
    readonly unreachable = true,
  ) {
    super(message);
  }
}
