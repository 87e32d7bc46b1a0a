/** gRPC channel options every Berth client and server uses; apart from grpc-server.ts so that a client loads no server code. */

/** Max message size both ways: 10 MB argument strings must arrive whole and get a clear error, not a reset. */
export const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

export const CHANNEL_OPTIONS = {
  'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
  'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
} as const;
