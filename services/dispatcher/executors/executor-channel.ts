/**
 * The dispatcher's connection to one remote executor: a gRPC channel
 * (plaintext, or mTLS with `executors[].tls`), the shared secret on every
 * call as a second factor, and connection failures turned into UNAVAILABLE
 * errors that name the executor and, where TLS is the cause, what to change.
 */
import {
  ClientError,
  Metadata,
  Status,
  createChannel,
  createClientFactory,
  type Channel,
  type ClientMiddleware,
} from 'nice-grpc';
import { CHANNEL_OPTIONS, EXECUTOR_SECRET_HEADER } from '../../common/grpc-server.js';
import { clientTls, diagnoseTls, type ClientTlsFiles, type TlsFailure } from '../../common/tls.js';
import { ExecutorDefinition, type ExecutorClient } from '../../gen/berth/v1/executor.js';

export interface ExecutorConnection {
  /** The channel new calls go over; a reload puts a new one here. */
  readonly channel: Channel;
  readonly client: ExecutorClient;
  /** A sentence on why the executor cannot be reached, given a failed call's details. */
  explain(details: string): Promise<string>;
  /**
   * Re-reads the client certificate files (SIGHUP) and sends new calls over a
   * new channel that uses them; calls and streams in flight finish on the old
   * one. Throws {@link TlsMaterialError} and changes nothing when the files are bad.
   */
  reload(): void;
  close(): void;
}

/** Details grpc-js gives when no connection could be made (as opposed to a status the executor sent). */
const CONNECTION_FAILURE = /No connection established|Failed to connect|Connection dropped|ECONNREFUSED|ECONNRESET/i;
/** Probe at most this often per executor, so a burst of failing calls costs one handshake. */
const DIAGNOSIS_TTL_MS = 5000;

/** What to change, per failure, in the terms of the dispatcher's config. */
export function describeExecutorTlsFailure(address: string, failure: TlsFailure | 'server-tls', tls: ClientTlsFiles | undefined): string {
  switch (failure) {
    case 'server-tls':
      return `executor ${address} speaks TLS and this dispatcher connects in plaintext: set tls: {ca_file, cert_file, key_file} on its entry under executors:`;
    case 'server-plaintext':
      return `executor ${address} does not speak TLS: give it executor.tls, or remove tls from its entry under executors:`;
    case 'server-untrusted':
      return `executor ${address} presented a certificate not signed by ${tls?.caFile ?? 'the system CAs'} (executors[].tls.ca_file)`;
    case 'server-expired':
      return `executor ${address} presented an expired (or not yet valid) certificate: renew its executor.tls.cert_file and send it SIGHUP`;
    case 'server-name-mismatch':
      return `executor ${address} presented a certificate for another name: set executors[].tls.server_name to a name in its subjectAltName`;
    case 'client-cert-required':
      return `executor ${address} requires a client certificate: set cert_file and key_file in its entry's tls under executors:`;
    case 'client-cert-rejected':
      return `executor ${address} refused this dispatcher's client certificate ${tls?.certFile ?? ''}: it must be signed by the CA in the executor's executor.tls.client_ca_file`;
  }
}

/** `spans`: tracing's client middleware, when tracing is on (it sends the trace context to the executor). */
export function connectExecutor(
  address: string,
  sharedSecret: string,
  tls: ClientTlsFiles | undefined,
  spans?: ClientMiddleware,
): ExecutorConnection {
  let diagnosis: { atMs: number; sentence: Promise<string | undefined> } | undefined;
  const explain = async (details: string): Promise<string> => {
    const nowMs = Date.now();
    if (diagnosis === undefined || nowMs - diagnosis.atMs > DIAGNOSIS_TTL_MS) {
      diagnosis = {
        atMs: nowMs,
        sentence: diagnoseTls(address, tls).then((f) => (f === undefined ? undefined : describeExecutorTlsFailure(address, f, tls))),
      };
    }
    return (await diagnosis.sentence) ?? `executor ${address} is unreachable: ${details}`;
  };
  const base = createClientFactory().use(explainFailures(explain)).use(addSecret(sharedSecret));
  const factory = spans ? base.use(spans) : base;
  const open = () => {
    const { credentials, options } = tls === undefined ? { credentials: undefined, options: {} } : clientTls(tls);
    const channel = createChannel(address, credentials, { ...CHANNEL_OPTIONS, ...options });
    return { channel, client: factory.create(ExecutorDefinition, channel) };
  };
  let current = open();
  // Old channels stay open for the calls still on them; they go idle and are closed with the dispatcher.
  const retired: Channel[] = [];
  return {
    get channel() {
      return current.channel;
    },
    get client() {
      return current.client;
    },
    explain,
    reload() {
      if (tls === undefined) return;
      const next = open();
      retired.push(current.channel);
      current = next;
      diagnosis = undefined;
    },
    close() {
      for (const channel of [...retired, current.channel]) channel.close();
    },
  };
}

function addSecret(secret: string): ClientMiddleware {
  return async function* addExecutorSecret(call, options) {
    const metadata = Metadata(options.metadata);
    if (secret) metadata.set(EXECUTOR_SECRET_HEADER, secret);
    return yield* call.next(call.request, { ...options, metadata });
  };
}

function explainFailures(explain: (details: string) => Promise<string>): ClientMiddleware {
  return async function* explainConnectionFailure(call, options) {
    try {
      return yield* call.next(call.request, options);
    } catch (err) {
      if (err instanceof ClientError && err.code === Status.UNAVAILABLE && CONNECTION_FAILURE.test(err.details)) {
        throw new ClientError(err.path, Status.UNAVAILABLE, await explain(err.details));
      }
      throw err;
    }
  };
}
