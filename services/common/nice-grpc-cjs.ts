/**
 * nice-grpc by require() rather than by import. nice-grpc is CommonJS: an
 * `import` of it makes Node scan the source of each module it re-exports
 * for export names, which cost a short-lived `berth call` about as much as
 * the rest of its start-up; require() skips the scan. Same module, same
 * classes (instanceof holds across both ways).
 */
import { createRequire } from 'node:module';
import type * as NiceGrpc from 'nice-grpc';

const niceGrpc = createRequire(import.meta.url)('nice-grpc') as typeof NiceGrpc;

export const { ClientError, Metadata, Status, createChannel, createClient } = niceGrpc;
export type ClientError = NiceGrpc.ClientError;
export type Metadata = NiceGrpc.Metadata;
export type Status = NiceGrpc.Status;
