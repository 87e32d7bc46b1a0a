/**
 * How the CLI's client commands reach a server over grpc-js: the address,
 * TLS from `--tls-ca/--tls-cert/--tls-key` (or `BERTH_TLS_CA/CERT/KEY`).
 * `berth call` and `berth tools` use http2-client.ts instead; both explain a
 * transport failure with client-failure.ts.
 */
import type { Channel } from 'nice-grpc';
import { createChannel, createClient } from '../common/nice-grpc-cjs.js';
import { CHANNEL_OPTIONS } from '../common/channel-options.js';
import { clientTls } from '../common/tls.js';
import { DispatcherDefinition, type DispatcherClient } from '../gen/berth/v1/dispatcher.js';
import { readTlsFlags, type ClientTarget } from './client-options.js';

export { describeClientTlsFailure, explainClientError } from './client-failure.js';
export { CLIENT_OPTIONS, ClientTlsError, DEFAULT_SERVER, clientTarget, type ClientFlags, type ClientTarget } from './client-options.js';

export function openClient(target: ClientTarget): { channel: Channel; client: DispatcherClient } {
  const files = target.tls;
  const tls = files === undefined ? undefined : readTlsFlags(() => clientTls(files));
  const channel = createChannel(target.address, tls?.credentials, { ...CHANNEL_OPTIONS, ...tls?.options });
  return { channel, client: createClient(DispatcherDefinition, channel) };
}
